// Favlo CUDA kernels: MXFP8 (E4M3) and MXFP4 (E2M1) GEMV, y[n] = sum_k W[n,k] * x[k].
//
// Layout (favlo-mx): a data plane of `rows` rows of `data_row_bytes` each (K padded to
// 128 for FP8, 256 for FP4, zero-filled), then a scale plane at `scale_offset` of
// `rows` rows of `scale_row_bytes` E8M0 bytes, one per 32 consecutive values.
// FP4 packs two values per byte, element 0 in the low nibble.
//
// Two decode variants of each kernel (same memory path, checked by the same tests):
//   *_bits: elements decoded one by one straight to f32 bit patterns (shifts + masks);
//           the value is the true one times 2^-120 (FP8) / 2^-126 (FP4), so x is
//           pre-scaled by 2^64 on load to keep products out of the subnormal range.
//   *_h2:   default; two elements per 32-bit op: FP4 nibbles are moved into f16x2 bit
//           patterns with 2 shifts + 2 masks per pair (value times 2^-14, exact),
//           FP8 pairs use the hardware cvt.rn.f16x2.e4m3x2 (exact); then each half is
//           widened to f32 and accumulated with f32 FMAs like the CPU path.
//
// Design: one block of 4 warps computes ROWS = 4 output rows; the warps split K
// (warp w takes 512-byte chunks w, w+4, ...), each lane loads 16 bytes of every row
// per chunk with a non-caching 16-byte load, so one x value read from L1 serves 4
// rows. Elements are decoded in registers straight to f32 bit patterns (no lookup
// table, no conversion instructions): the decoded value is the true value times
// 2^-DEC_SHIFT (FP8: 2^-120, FP4: 2^-126), which is why x is pre-scaled by 2^64 on
// load and every 32-value block sum is multiplied back by 2^(DEC_SHIFT-64) before its
// E8M0 scale. All arithmetic stays f32, like the CPU path. x must hold padded_cols
// values (zero past cols).

#define ROWS 4
#define WARPS 4

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// E8M0 byte -> 2^(s-127); 0xFF is NaN.
__device__ __forceinline__ float e8m0(unsigned s) {
    if (s == 0u) return __int_as_float(0x00400000);
    if (s == 255u) return __int_as_float(0x7fc00000);
    return __int_as_float((int)(s << 23));
}

// f16x2 bit pattern -> two f32 (lo, hi).
__device__ __forceinline__ float2 h2f(unsigned v) {
    float2 r;
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
        : "=f"(r.x), "=f"(r.y) : "r"(v));
    return r;
}

// Two E4M3 bytes (low 16 bits of v) -> f16x2 (byte 0 in the low half), exact.
__device__ __forceinline__ unsigned e4m3x2(unsigned v) {
#if __CUDA_ARCH__ >= 890
    unsigned r;
    asm("{.reg .b16 t;\n\tcvt.u16.u32 t, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, t;}" : "=r"(r) : "r"(v));
    return r;
#else
    return e4m3_sw(__byte_perm(v, 0, 0x1404));
#endif
}

__device__ __forceinline__ float fp8_dot4_h2(unsigned w, float4 x) {
    float2 a = h2f(e4m3x2(w));
    float2 b = h2f(e4m3x2(w >> 16));
    float s = a.x * x.x;
    s = fmaf(a.y, x.y, s);
    s = fmaf(b.x, x.z, s);
    s = fmaf(b.y, x.w, s);
    return s;
}

// Eight E2M1 values (nibble j = element j) -> four f16x2 pairs (0,4) (1,5) (2,6) (3,7),
// each value times 2^-14.
__device__ __forceinline__ float fp4_dot8_h2(unsigned w, float4 x0, float4 x1) {
    float2 p04 = h2f(((w << 9) & 0x0e000e00u) | ((w << 12) & 0x80008000u));
    float2 p15 = h2f(((w << 5) & 0x0e000e00u) | ((w << 8) & 0x80008000u));
    float2 p26 = h2f(((w << 1) & 0x0e000e00u) | ((w << 4) & 0x80008000u));
    float2 p37 = h2f(((w >> 3) & 0x0e000e00u) | (w & 0x80008000u));
    float s = p04.x * x0.x;
    s = fmaf(p15.x, x0.y, s);
    s = fmaf(p26.x, x0.z, s);
    s = fmaf(p37.x, x0.w, s);
    s = fmaf(p04.y, x1.x, s);
    s = fmaf(p15.y, x1.y, s);
    s = fmaf(p26.y, x1.z, s);
    s = fmaf(p37.y, x1.w, s);
    return s;
}

// Four E4M3 values of one 32-bit word -> f32 times 2^-120 (exact, subnormals too).
__device__ __forceinline__ float fp8_dot4(unsigned w, float4 x) {
    float a = __int_as_float(((w << 20) & 0x07f00000u) | ((w << 24) & 0x80000000u));
    float b = __int_as_float(((w << 12) & 0x07f00000u) | ((w << 16) & 0x80000000u));
    float c = __int_as_float(((w << 4) & 0x07f00000u) | ((w << 8) & 0x80000000u));
    float d = __int_as_float(((w >> 4) & 0x07f00000u) | (w & 0x80000000u));
    float s = a * x.x;
    s = fmaf(b, x.y, s);
    s = fmaf(c, x.z, s);
    s = fmaf(d, x.w, s);
    return s;
}

// Eight E2M1 values of one 32-bit word -> f32 times 2^-126.
__device__ __forceinline__ float fp4_dot8(unsigned w, float4 x0, float4 x1) {
    float v0 = __int_as_float(((w << 22) & 0x01c00000u) | ((w << 28) & 0x80000000u));
    float v1 = __int_as_float(((w << 18) & 0x01c00000u) | ((w << 24) & 0x80000000u));
    float v2 = __int_as_float(((w << 14) & 0x01c00000u) | ((w << 20) & 0x80000000u));
    float v3 = __int_as_float(((w << 10) & 0x01c00000u) | ((w << 16) & 0x80000000u));
    float v4 = __int_as_float(((w << 6) & 0x01c00000u) | ((w << 12) & 0x80000000u));
    float v5 = __int_as_float(((w << 2) & 0x01c00000u) | ((w << 8) & 0x80000000u));
    float v6 = __int_as_float(((w >> 2) & 0x01c00000u) | ((w << 4) & 0x80000000u));
    float v7 = __int_as_float(((w >> 6) & 0x01c00000u) | (w & 0x80000000u));
    float s = v0 * x0.x;
    s = fmaf(v1, x0.y, s);
    s = fmaf(v2, x0.z, s);
    s = fmaf(v3, x0.w, s);
    s = fmaf(v4, x1.x, s);
    s = fmaf(v5, x1.y, s);
    s = fmaf(v6, x1.z, s);
    s = fmaf(v7, x1.w, s);
    return s;
}

__device__ __forceinline__ float4 ldx(const float* x, int k) {
    float4 v = __ldg(reinterpret_cast<const float4*>(x + k));
    const float up = 18446744073709551616.0f;  // 2^64
    v.x *= up; v.y *= up; v.z *= up; v.w *= up;
    return v;
}

__device__ __forceinline__ float4 ldx_plain(const float* x, int k) {
    return __ldg(reinterpret_cast<const float4*>(x + k));
}

__device__ __forceinline__ void finish(float acc[ROWS], float* y, int row0, int rows) {
    __shared__ float part[WARPS][ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        float v = acc[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) part[warp][i] = v;
    }
    __syncthreads();
    if (threadIdx.x < ROWS && row0 + (int)threadIdx.x < rows) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) s += part[w][threadIdx.x];
        y[row0 + threadIdx.x] = s;
    }
}

// One lane's chunk of an FP8 row: 16 values = half a scale block.
extern "C" __global__ void __launch_bounds__(128) gemv_mxfp8_bits(
    const unsigned char* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
    int rows, int data_row_bytes, long long scale_offset, int scale_row_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
    const unsigned char* rp[ROWS];
    const unsigned char* sp[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        acc[i] = 0.f;
        int r = min(row0 + i, rows - 1);
        rp[i] = w + (long long)r * data_row_bytes;
        sp[i] = w + scale_offset + (long long)r * scale_row_bytes;
    }
    const float back = 72057594037927936.0f;  // 2^(120-64) = 2^56
    for (int b = warp * 512 + lane * 16; b < data_row_bytes; b += WARPS * 512) {
        uint4 q[ROWS];
        unsigned char s[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            q[i] = ld_stream(reinterpret_cast<const uint4*>(rp[i] + b));
            s[i] = __ldg(sp[i] + (b >> 5));
        }
        float4 x0 = ldx(x, b), x1 = ldx(x, b + 4), x2 = ldx(x, b + 8), x3 = ldx(x, b + 12);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            float d = fp8_dot4(q[i].x, x0);
            d += fp8_dot4(q[i].y, x1);
            d += fp8_dot4(q[i].z, x2);
            d += fp8_dot4(q[i].w, x3);
            acc[i] = fmaf(d * back, e8m0(s[i]), acc[i]);
        }
    }
    finish(acc, y, row0, rows);
}

extern "C" __global__ void __launch_bounds__(128) gemv_mxfp8(
    const unsigned char* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
    int rows, int data_row_bytes, long long scale_offset, int scale_row_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
    const unsigned char* rp[ROWS];
    const unsigned char* sp[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        acc[i] = 0.f;
        int r = min(row0 + i, rows - 1);
        rp[i] = w + (long long)r * data_row_bytes;
        sp[i] = w + scale_offset + (long long)r * scale_row_bytes;
    }
    const float back = 1.0f;  // the f16 values are exact
    for (int b = warp * 512 + lane * 16; b < data_row_bytes; b += WARPS * 512) {
        uint4 q[ROWS];
        unsigned char s[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            q[i] = ld_stream(reinterpret_cast<const uint4*>(rp[i] + b));
            s[i] = __ldg(sp[i] + (b >> 5));
        }
        float4 x0 = ldx_plain(x, b), x1 = ldx_plain(x, b + 4), x2 = ldx_plain(x, b + 8), x3 = ldx_plain(x, b + 12);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            float d = fp8_dot4_h2(q[i].x, x0);
            d += fp8_dot4_h2(q[i].y, x1);
            d += fp8_dot4_h2(q[i].z, x2);
            d += fp8_dot4_h2(q[i].w, x3);
            acc[i] = fmaf(d * back, e8m0(s[i]), acc[i]);
        }
    }
    finish(acc, y, row0, rows);
}

// One lane's chunk of an FP4 row: 32 values = one scale block.
extern "C" __global__ void __launch_bounds__(128) gemv_mxfp4_bits(
    const unsigned char* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
    int rows, int data_row_bytes, long long scale_offset, int scale_row_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
    const unsigned char* rp[ROWS];
    const unsigned char* sp[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        acc[i] = 0.f;
        int r = min(row0 + i, rows - 1);
        rp[i] = w + (long long)r * data_row_bytes;
        sp[i] = w + scale_offset + (long long)r * scale_row_bytes;
    }
    const float back = 4611686018427387904.0f;  // 2^(126-64) = 2^62
    for (int b = warp * 512 + lane * 16; b < data_row_bytes; b += WARPS * 512) {
        uint4 q[ROWS];
        unsigned char s[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            q[i] = ld_stream(reinterpret_cast<const uint4*>(rp[i] + b));
            s[i] = __ldg(sp[i] + (b >> 4));
        }
        const int k = b * 2;
        float4 x0 = ldx(x, k), x1 = ldx(x, k + 4), x2 = ldx(x, k + 8), x3 = ldx(x, k + 12);
        float4 x4 = ldx(x, k + 16), x5 = ldx(x, k + 20), x6 = ldx(x, k + 24), x7 = ldx(x, k + 28);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            float d = fp4_dot8(q[i].x, x0, x1);
            d += fp4_dot8(q[i].y, x2, x3);
            d += fp4_dot8(q[i].z, x4, x5);
            d += fp4_dot8(q[i].w, x6, x7);
            acc[i] = fmaf(d * back, e8m0(s[i]), acc[i]);
        }
    }
    finish(acc, y, row0, rows);
}

extern "C" __global__ void __launch_bounds__(128) gemv_mxfp4(
    const unsigned char* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
    int rows, int data_row_bytes, long long scale_offset, int scale_row_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * ROWS;
    float acc[ROWS];
    const unsigned char* rp[ROWS];
    const unsigned char* sp[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        acc[i] = 0.f;
        int r = min(row0 + i, rows - 1);
        rp[i] = w + (long long)r * data_row_bytes;
        sp[i] = w + scale_offset + (long long)r * scale_row_bytes;
    }
    const float back = 16384.0f;  // 2^14
    for (int b = warp * 512 + lane * 16; b < data_row_bytes; b += WARPS * 512) {
        uint4 q[ROWS];
        unsigned char s[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            q[i] = ld_stream(reinterpret_cast<const uint4*>(rp[i] + b));
            s[i] = __ldg(sp[i] + (b >> 4));
        }
        const int k = b * 2;
        float4 x0 = ldx_plain(x, k), x1 = ldx_plain(x, k + 4), x2 = ldx_plain(x, k + 8), x3 = ldx_plain(x, k + 12);
        float4 x4 = ldx_plain(x, k + 16), x5 = ldx_plain(x, k + 20), x6 = ldx_plain(x, k + 24), x7 = ldx_plain(x, k + 28);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            float d = fp4_dot8_h2(q[i].x, x0, x1);
            d += fp4_dot8_h2(q[i].y, x2, x3);
            d += fp4_dot8_h2(q[i].z, x4, x5);
            d += fp4_dot8_h2(q[i].w, x6, x7);
            acc[i] = fmaf(d * back, e8m0(s[i]), acc[i]);
        }
    }
    finish(acc, y, row0, rows);
}
