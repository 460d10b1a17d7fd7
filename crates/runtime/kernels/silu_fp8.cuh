// Favlo CUDA: the FP8 prompt path's silu, with one special-function (MUFU) operation.
//
// silu(g) = g / (1 + e^-g) = g · r with r = 1 / d, d = 1 + 2^(-g · log2 e):
// * the power of two by `ex2.approx.ftz` (the one MUFU operation), its argument clamped
//   at 120 so that d stays finite and its reciprocal normal: for g ≤ -83.18, where silu
//   is below 1e-34 in size, the result is g · 2^-120 · (1 - 2^-120) (-inf for g = -inf,
//   where the quotient is NaN);
// * the reciprocal on the FMA pipe: the bit-pattern estimate 0x7EF311C7 - bits(d)
//   (within 5.1%), then three Newton steps r += r · (1 - d · r), each squaring the
//   error: ~1 ulp after the third.
// The SwiGLU epilogue of the prefill GEMM runs 8192 silus per 128 × 128 tile, and a
// multiprocessor's special-function units retire 16 results per clock: the IEEE
// quotient's two MUFU operations (exponential and reciprocal) take ~1000 cycles per
// tile at that rate, this one half. Error against the exact silu: the rounding of
// g · log2 e moves e^-g by up to 2^-24 · |g| · log2 e relatively (≤ 5.3e-6 at |g| = 83,
// ≤ 3.3e-7 for |g| ≤ 5.5); ex2 and the Newton steps add a few ulp. The FP8 prompt path
// quantizes this result to E4M3 (3 mantissa bits) before the down projection. Every
// kernel of that path (the SwiGLU GEMM's epilogue, `rows_swiglu_f32`) uses this
// function, so they agree bit for bit.
__device__ __forceinline__ float silu_fp8(float g) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fminf(g * -1.4426950408889634f, 120.0f)));
    const float d = 1.0f + e;
    float r = __int_as_float(0x7EF311C7 - __float_as_int(d));
#pragma unroll
    for (int i = 0; i < 3; ++i) r = __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
    return g * r;
}
