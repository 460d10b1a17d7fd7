// MX matrices and prepared x rows as bf16 operands for cuBLASLt (`cuda/mx_bf16.rs`).
//
// `mx_tiled_to_bf16`: a matrix re-tiled for the tensor-core GEMV (`tile_mx`, FP4 words
// re-encoded) back to row-major bf16 [rows, kp] with its E8M0 block scales applied. Exact: an E4M3 code has
// at most 4 significant bits and an E2M1 code 2, bf16 keeps 8 and f32's exponent range.
//
// `xprep_split_bf16`: rows of an x preparation ((hi + lo)·2^-e per 32-value block,
// hi/lo f16 in the k order 0,2,4,6,1,3,5,7 per 8 values) to `terms` bf16 planes whose
// sum is the row: plane 0 = bf16(v), plane 1 = bf16(v - plane 0), ... Two planes carry
// 16 significant bits, three all 24 of an f32 (v itself has at most 22: hi + lo).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ float e8m0(u8 s) {
    if (s == 255) return __int_as_float(0x7fc00000);
    if (s == 0) return 5.877471754111438e-39f;  // 2^-127 (subnormal)
    return __int_as_float(((u32)s) << 23);
}

__device__ __forceinline__ float e4m3(u8 b) {
    const u32 e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) {
        v = (float)m * 0.001953125f;  // m · 2^-9
    } else if (e == 15 && m == 7) {
        v = __int_as_float(0x7fc00000);
    } else {
        v = __int_as_float(((e + 120u) << 23) | (m << 20));  // (1 + m/8) · 2^(e-7)
    }
    return (b & 0x80) ? -v : v;
}

// Element e's E2M1 code from a word of the GEMV's FP4 tiles: the GEMV stores each code's
// exponent-mantissa field and sign bit where its fragments want them (`FP4_PLACE` in
// gemv.rs, `a_frag<4>` in gemv_common.cuh).
__device__ __forceinline__ u32 fp4_code(u32 w, int e) {
    const int field[8] = {9, 0, 25, 16, 6, 3, 22, 19};
    const int sign[8] = {15, 14, 31, 30, 12, 13, 28, 29};
    return ((w >> field[e]) & 7u) | (((w >> sign[e]) & 1u) << 3);
}

__device__ __forceinline__ float e2m1(u32 c) {
    const u32 e = (c >> 1) & 3u, m = c & 1u;
    const float v = e == 0 ? 0.5f * (float)m : __int_as_float(((e + 126u) << 23) | (m << 22));
    return (c & 8u) ? -v : v;
}

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ u16 bf16_bits(float f) {
    const u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float f16_float(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float bf16_float(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}

// One thread per 16-byte piece of the tiled data (a lane's piece of one row: FP4 one
// 32-value block, FP8 half a block), so each thread reads 16 contiguous bytes and one
// scale and writes 32 (FP4) or 16 (FP8) contiguous bf16 values with 16-byte stores.
// Tiled layout (gemv.rs `tile_mx`): per (32-row tile T, 128-byte chunk c) 4096 bytes
// [i 4][j 2][lane 32][16 B] with lane = 4g + t holding row 32T + g + 8i, bytes
// 128c + 64j + 16t; then per (T, c) the scale tile: FP4 8 bytes per lane [i][j]
// (block 8c + 4j + t), FP8 8 bytes per lane pair p = lane/2 [i][j] (block 4c + 2j + p%2).
// pieces = rows * chunks * 8 < 2^31 (checked by the caller).
extern "C" __global__ void mx_tiled_to_bf16(const u8* __restrict__ data,
                                            const u8* __restrict__ scales,
                                            u16* __restrict__ out, int rows, int chunks,
                                            int fp4) {
    const u32 per_row = (u32)chunks * 8u;
    const u32 total = (u32)rows * per_row;
    const u32 kp = (u32)chunks * 128u * (fp4 ? 2u : 1u);
    for (u32 idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += gridDim.x * blockDim.x) {
        const u32 r = idx / per_row, p = idx - r * per_row;
        const u32 tile = r >> 5, in_tile = r & 31u;
        const u32 i = in_tile >> 3, g = in_tile & 7u;
        const u32 c = p >> 3, j = (p >> 2) & 1u, t = p & 3u;
        const u32 lane = 4u * g + t;
        const unsigned long long tc = (unsigned long long)tile * chunks + c;
        const uint4 v = *reinterpret_cast<const uint4*>(data + (tc * 8 + i * 2 + j) * 512 +
                                                        lane * 16);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        uint4* dst = reinterpret_cast<uint4*>(out + (unsigned long long)r * kp +
                                              (unsigned long long)p * (fp4 ? 32u : 16u));
        if (fp4) {
            const float s = e8m0(scales[tc * 256 + lane * 8 + i * 2 + j]);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                // Word q: values 8q .. 8q + 7, re-encoded for the GEMV (`fp4_code`).
                u32 o[4];
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    o[h] = (u32)bf16_bits(e2m1(fp4_code(w[q], 2 * h)) * s) |
                           ((u32)bf16_bits(e2m1(fp4_code(w[q], 2 * h + 1)) * s) << 16);
                }
                dst[q] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        } else {
            const float s = e8m0(scales[tc * 128 + (lane >> 1) * 8 + i * 2 + j]);
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                u32 o[4];
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    const u32 word = w[2 * q + (h >> 1)];
                    const u32 sh = 16u * (h & 1);
                    o[h] = (u32)bf16_bits(e4m3((word >> sh) & 0xffu) * s) |
                           ((u32)bf16_bits(e4m3((word >> (sh + 8)) & 0xffu) * s) << 16);
                }
                dst[q] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        }
    }
}

// x rows: row r's preparation starts at value r·stride (hl at 2·r·stride u16 values: per
// 32-value block 32 hi then 32 lo; xs at r·stride/32). Writes `terms` planes of
// [rows, k] bf16 (1 to 3: out0, out1, out2; planes past `terms` are not touched).
extern "C" __global__ void xprep_split_bf16(const u16* __restrict__ hl,
                                            const float* __restrict__ xs,
                                            u16* __restrict__ out0, u16* __restrict__ out1,
                                            u16* __restrict__ out2, int rows, int stride,
                                            int k, int terms) {
    u16* const outs[3] = {out0, out1, out2};
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const unsigned long long row_hl = (unsigned long long)r * stride * 2;
        const unsigned long long row_xs = (unsigned long long)r * (stride >> 5);
        const unsigned long long row_out = (unsigned long long)r * k;
        for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < k;
             col += gridDim.x * blockDim.x) {
            const int blk = col >> 5, kk = col & 31;
            const int jj = kk & 7;
            const int pos = (kk - jj) + ((jj & 1) ? 4 + (jj >> 1) : (jj >> 1));
            const unsigned long long base = row_hl + (unsigned long long)blk * 64;
            const float hi = f16_float(hl[base + pos]);
            const float lo = f16_float(hl[base + 32 + pos]);
            // hi + lo is exact in f32 (two f16 of <= 11 bits, lo below hi's last bit).
            float v = (hi + lo) * xs[row_xs + blk];
#pragma unroll
            for (int p = 0; p < 3; ++p) {
                if (p < terms) {
                    const u16 b = bf16_bits(v);
                    outs[p][row_out + col] = b;
                    v -= bf16_float(b);
                }
            }
        }
    }
}
