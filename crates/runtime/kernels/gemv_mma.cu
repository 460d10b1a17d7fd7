// Favlo CUDA kernels: MXFP4 / MXFP8 (E4M3) GEMV on the tensor cores, y = W x.
//
// Layout (favlo-mx, unchanged): `rows` rows of `data_row_bytes` (K padded to 256 for
// FP4, 128 for FP8, zero-filled), then at `scale_offset` `rows` rows of
// `scale_row_bytes` E8M0 bytes, one per 32 values. FP4: element 0 in the low nibble.
//
// Why tensor cores for a GEMV: the CUDA-core version spent ~4 instructions per value
// (decode, f16->f32 widen, FFMA) and was issue-bound at 35% of copy bandwidth. Here
// weights are decoded to f16x2 (FP4: shifts and masks, value x 2^-14, exact; FP8: the
// hardware cvt.rn.f16x2.e4m3x2, exact) and fed to mma.sync.m16n8k16 (f32 accumulate),
// which does the multiply-adds and the widening for free.
//
// x keeps ~22 bits: `gemv_prep_x` splits x, per 32-value block scaled by 2^e so the
// block maximum lies in [2^14, 2^15), into f16 hi + f16 lo (x*2^e ~ hi + lo). The eight
// B columns of the mma are (hi, lo) x (the block of thread-in-group t = 0..3): column
// n = 2t + h holds block t's hi (h = 0) or lo (h = 1) values on the k slots that
// thread t's A registers cover and zero elsewhere. So after the 8 k-steps of one
// 32-value block, thread (g, t) holds C[row, 2t] + C[row, 2t+1] = the block's partial
// dot product for its own rows and its own block, and applies that block's E8M0 scale
// (and 2^-e) in f32. The k order inside a step is free as long as A and B agree:
// within every 8 values x is stored in the order (0,4,1,5,2,6,3,7), which is what the
// FP4 pair decode (nibbles j, j+4 share one shift) and the FP8 byte permute produce.
//
// Work split: a warp owns 32 rows (two m16 tiles: rows g, g+8, g+16, g+24 for lane
// group g = lane/4) and 128-byte chunks of every row (lane t = lane%4 loads two 16-byte
// pieces per row with non-caching loads, and the next chunk's while computing: up to
// 256 bytes in flight per lane). The
// block's W warps split the chunks (warp w takes w, w+W, ...); the host picks W so the
// grid is about one wave of 16 warps per SM. Partial sums are reduced over the 4
// lanes of a group with shuffles, then over the warps in shared memory.

#define TILE_ROWS 32

__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 ld_x(const void* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// E8M0 byte -> 2^(s-127); 0xFF is NaN.
__device__ __forceinline__ float e8m0f(unsigned s) {
    if (s == 0u) return __int_as_float(0x00400000);
    if (s == 255u) return __int_as_float(0x7fc00000);
    return __int_as_float((int)(s << 23));
}

__device__ __forceinline__ void mma16816(float d[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// E2M1 nibbles j and j+4 of w -> f16x2 (nibble j in the low half), value x 2^-14.
template <int J>
__device__ __forceinline__ unsigned fp4_pair(unsigned w) {
    const unsigned m = (J <= 2) ? (w << (9 - 4 * J)) : (w >> 3);
    const unsigned s = (w << (12 - 4 * J));
    return (m & 0x0e000e00u) | (s & 0x80008000u);
}

// Two E4M3 bytes (low 16 bits of v) -> f16x2, byte 0 in the low half, exact.
__device__ __forceinline__ unsigned e4m3x2(unsigned v) {
    unsigned r;
    asm("{.reg .b16 t;\n\tcvt.u16.u32 t, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, t;}" : "=r"(r) : "r"(v));
    return r;
}

// The A fragments of k-step s of one 16-byte piece of one row: (first pair, second
// pair) = permuted positions (4s, 4s+1), (4s+2, 4s+3) of the piece's values.
template <int FMT>
__device__ __forceinline__ void a_frag(const uint4& w, int s, unsigned& p0, unsigned& p1);

// FP4: 32 nibbles = one block, 8 k-steps; step s uses word s/2, pairs (0,4),(1,5) or
// (2,6),(3,7).
template <>
__device__ __forceinline__ void a_frag<4>(const uint4& w, int s, unsigned& p0, unsigned& p1) {
    const unsigned v = (s >> 1) == 0 ? w.x : (s >> 1) == 1 ? w.y : (s >> 1) == 2 ? w.z : w.w;
    if ((s & 1) == 0) {
        p0 = fp4_pair<0>(v);
        p1 = fp4_pair<1>(v);
    } else {
        p0 = fp4_pair<2>(v);
        p1 = fp4_pair<3>(v);
    }
}

// FP8: 16 bytes = half a block, 4 k-steps; step s uses words 2(s/2), 2(s/2)+1, bytes
// (0,4,1,5) or (2,6,3,7).
template <>
__device__ __forceinline__ void a_frag<8>(const uint4& w, int s, unsigned& p0, unsigned& p1) {
    const unsigned lo = (s >> 1) == 0 ? w.x : w.z, hi = (s >> 1) == 0 ? w.y : w.w;
    const unsigned v = __byte_perm(lo, hi, (s & 1) ? 0x7362 : 0x5140);
    p0 = e4m3x2(v);
    p1 = e4m3x2(v >> 16);
}

// y[rows] = W x (+ y when `accumulate`, for a residual add). xhl: per 32-value block 32
// f16 hi then 32 f16 lo (permuted order); xs: per block 2^-e. Block = W warps x 32 lanes;
// grid = ceil(rows / 32).
//
// Lane (g, t) of a warp reads, for its 4 rows and 128-byte chunk c, the two 16-byte
// pieces at c*128 + 16 t and c*128 + 64 + 16 t, so each load instruction covers whole
// 64-byte row segments (no half-used sectors). A piece is one FP4 block (8 k-steps) or
// half an FP8 block (4 k-steps); its partial sums are scaled and accumulated in f32.
// The next chunk's pieces and scales are loaded before the current chunk is computed.
template <int FMT>
__device__ __forceinline__ void gemv_mma_body(const unsigned char* __restrict__ w,
                                              const unsigned short* __restrict__ xhl,
                                              const float* __restrict__ xs,
                                              float* __restrict__ y, int rows,
                                              int data_row_bytes, long long scale_offset,
                                              int scale_row_bytes, int accumulate) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;  // k-steps per piece
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * TILE_ROWS;
    const bool act = (g >> 1) == t;  // this lane feeds B column g
    const int h = g & 1;             // hi or lo
    const unsigned char* rp[4];
    const unsigned char* sp[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = min(row0 + g + 8 * i, rows - 1);
        rp[i] = w + (long long)r * data_row_bytes + t * 16;
        sp[i] = w + scale_offset + (long long)r * scale_row_bytes;
    }
    // Block index of piece j of chunk c for this lane, and (FP8) which half.
    auto blk_of = [&](int c, int j) {
        return FMT == 4 ? c * 8 + 4 * j + t : c * 4 + 2 * j + (t >> 1);
    };
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int chunks = data_row_bytes >> 7;
    uint4 q[4][2];
    unsigned s8[4][2];
    int c = warp;
    if (c < chunks) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                q[i][j] = ld_stream(rp[i] + (c << 7) + 64 * j);
                s8[i][j] = __ldg(sp[i] + blk_of(c, j));
            }
    }
    for (; c < chunks; c += nwarps) {
        const int cn = c + nwarps;
        uint4 nq[4][2];
        unsigned ns8[4][2];
        if (cn < chunks) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    nq[i][j] = ld_stream(rp[i] + (cn << 7) + 64 * j);
                    ns8[i][j] = __ldg(sp[i] + blk_of(cn, j));
                }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int blk = blk_of(c, j);
            const float f = xs[blk] * unbias;
            uint4 bx[STEPS / 2];
            const unsigned short* xp =
                xhl + (long long)blk * 64 + h * 32 + (FMT == 8 ? (t & 1) * 16 : 0);
#pragma unroll
            for (int v = 0; v < STEPS / 2; ++v)
                bx[v] = act ? ld_x(xp + 8 * v) : make_uint4(0u, 0u, 0u, 0u);
            const unsigned* bw = reinterpret_cast<const unsigned*>(bx);
            float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < STEPS; ++s) {
                unsigned a0, a2, a1, a3, e0, e2, e1, e3;
                a_frag<FMT>(q[0][j], s, a0, a2);  // row g
                a_frag<FMT>(q[1][j], s, a1, a3);  // row g + 8
                a_frag<FMT>(q[2][j], s, e0, e2);  // row g + 16
                a_frag<FMT>(q[3][j], s, e1, e3);  // row g + 24
                mma16816(d0, a0, a1, a2, a3, bw[2 * s], bw[2 * s + 1]);
                mma16816(d1, e0, e1, e2, e3, bw[2 * s], bw[2 * s + 1]);
            }
            acc[0] = fmaf(d0[0] + d0[1], e8m0f(s8[0][j]) * f, acc[0]);
            acc[1] = fmaf(d0[2] + d0[3], e8m0f(s8[1][j]) * f, acc[1]);
            acc[2] = fmaf(d1[0] + d1[1], e8m0f(s8[2][j]) * f, acc[2]);
            acc[3] = fmaf(d1[2] + d1[3], e8m0f(s8[3][j]) * f, acc[3]);
        }
        if (cn < chunks) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    q[i][j] = nq[i][j];
                    s8[i][j] = ns8[i][j];
                }
        }
    }
    // Sum over the 4 lanes of a group (they hold different blocks of the same rows).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 1);
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 2);
    }
    __shared__ float part[16][TILE_ROWS];
    if (t == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) part[warp][g + 8 * i] = acc[i];
    }
    __syncthreads();
    if (threadIdx.x < TILE_ROWS && row0 + (int)threadIdx.x < rows) {
        float s = 0.f;
        for (int v = 0; v < nwarps; ++v) s += part[v][threadIdx.x];
        if (accumulate) s += y[row0 + threadIdx.x];
        y[row0 + threadIdx.x] = s;
    }
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp4_mma(
    const unsigned char* __restrict__ w, const unsigned short* __restrict__ xhl,
    const float* __restrict__ xs, float* __restrict__ y, int rows, int data_row_bytes,
    long long scale_offset, int scale_row_bytes, int accumulate) {
    gemv_mma_body<4>(w, xhl, xs, y, rows, data_row_bytes, scale_offset, scale_row_bytes,
                     accumulate);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp8_mma(
    const unsigned char* __restrict__ w, const unsigned short* __restrict__ xhl,
    const float* __restrict__ xs, float* __restrict__ y, int rows, int data_row_bytes,
    long long scale_offset, int scale_row_bytes, int accumulate) {
    gemv_mma_body<8>(w, xhl, xs, y, rows, data_row_bytes, scale_offset, scale_row_bytes,
                     accumulate);
}

// x (f32, n = padded cols, a multiple of 32) -> xhl (per block 32 f16 hi, 32 f16 lo, in
// the order (0,4,1,5,2,6,3,7) per 8) and xs (per block 2^-e), e chosen so the block's
// max |x| * 2^e lies in [2^14, 2^15). One warp per block of 32 values.
extern "C" __global__ void gemv_prep_x(const float* __restrict__ x,
                                       unsigned short* __restrict__ xhl,
                                       float* __restrict__ xs, int nblocks) {
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    const float v = x[(long long)blk * 32 + lane];
    float m = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int e = 0;
    if (m > 0.f && m <= 3.0e38f) {
        int ex;
        frexpf(m, &ex);  // m = f * 2^ex, f in [0.5, 1)
        e = min(15 - ex, 120);
    }
    const float sv = ldexpf(v, e);
    unsigned short hi, lo;
    float hif;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hi) : "f"(sv));
    asm("{.reg .b16 t;\n\tmov.b16 t, %1;\n\tcvt.f32.f16 %0, t;}" : "=f"(hif) : "h"(hi));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(lo) : "f"(sv - hif));
    const int j = lane & 7;
    const int pos = (lane & ~7) + ((j < 4) ? 2 * j : 2 * (j - 4) + 1);
    unsigned short* o = xhl + (long long)blk * 64;
    o[pos] = hi;
    o[32 + pos] = lo;
    if (lane == 0) xs[blk] = ldexpf(1.0f, -e);
}
