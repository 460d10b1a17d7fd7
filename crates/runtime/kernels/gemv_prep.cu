// The GEMV's x preparations (gemv_prep_x, rms_norm_prep, swiglu_prep, norm_parts_prep);
// part of the GEMV module after gemv_ring.cu.

// x (f32, nblocks * 32 values) -> xhl / xs (see prep32.cuh). One warp per block.
extern "C" __global__ void gemv_prep_x(const float* __restrict__ x,
                                       unsigned short* __restrict__ xhl,
                                       float* __restrict__ xs, int nblocks) {
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    prep32_store(x[(long long)blk * 32 + lane], lane, blk, xhl, xs);
}

// RMSNorm of one row (dim a multiple of 32) straight into the GEMV's x preparation:
// v = x / sqrt(mean(x^2) + eps) * w, never stored as f32. Grid: ceil(dim / 128) blocks
// of 128 threads; every block computes the (same) sum of squares with all its loads in
// flight, then its 4 warps prepare blocks 4 b .. 4 b + 3 of 32 values (warps past dim
// write nothing: a padded K's tail blocks keep what the buffer holds, zeros).
__device__ __forceinline__ void rms_norm_prep_body(const float* __restrict__ x,
                                                   const float* __restrict__ w, float eps,
                                                   int dim, unsigned short* __restrict__ xhl,
                                                   float* __restrict__ xs) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // x was written by the previous kernel
    __shared__ float red[4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n4 = dim >> 2;
    float ss = 0.f;
#pragma unroll 16
    for (int i = threadIdx.x; i < n4; i += 128) {
        const float4 v = __ldg(x4 + i);
        ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    ss = red[0] + red[1] + red[2] + red[3];
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    const int b = blockIdx.x * 4 + warp;
    if (b * 32 >= dim) return;  // warp-uniform, after the block's last barrier
    const int i = b * 32 + lane;
    prep32_store(x[i] * inv * w[i], lane, b, xhl, xs);
}
extern "C" __global__ void __launch_bounds__(128) rms_norm_prep(
    const float* __restrict__ x, const float* __restrict__ w, float eps, int dim,
    unsigned short* __restrict__ xhl, float* __restrict__ xs) {
    rms_norm_prep_body(x, w, eps, dim, xhl, xs);
}
// The same for several sequences' rows (SeqArgs: x, xhl, xs), one per blockIdx.z.
extern "C" __global__ void __launch_bounds__(128) rms_norm_prep_z(const SeqArgs s,
                                                                  const float* __restrict__ w,
                                                                  float eps, int dim) {
    const int z = blockIdx.z;
    rms_norm_prep_body((const float*)s.p[0][z], w, eps, dim, (unsigned short*)s.p[1][z],
                       (float*)s.p[2][z]);
}

// SwiGLU over a fused gate|up vector (n a multiple of 32) straight into the x
// preparation: v = silu(gu[i]) * gu[n + i]. One warp per block of 32.
__device__ __forceinline__ void swiglu_prep_body(const float* __restrict__ gu, int n,
                                                 unsigned short* __restrict__ xhl,
                                                 float* __restrict__ xs) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // gate|up was written by the previous kernel
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n / 32) return;
    const int i = blk * 32 + lane;
    const float g = gu[i];
    prep32_store(g / (1.0f + expf(-g)) * gu[n + i], lane, blk, xhl, xs);
}
extern "C" __global__ void swiglu_prep(const float* __restrict__ gu, int n,
                                       unsigned short* __restrict__ xhl,
                                       float* __restrict__ xs) {
    swiglu_prep_body(gu, n, xhl, xs);
}
// The same for several sequences (SeqArgs: gu, xhl, xs), one per blockIdx.z.
extern "C" __global__ void swiglu_prep_z(const SeqArgs s, int n) {
    const int z = blockIdx.z;
    swiglu_prep_body((const float*)s.p[0][z], n, (unsigned short*)s.p[1][z], (float*)s.p[2][z]);
}

// The norm producer's epilogue as a kernel of its own, for an RMSNorm whose input no
// GEMV produced (the first of a decode step): per 32-value block b of x, the x
// preparation of x * w and ss_out[b] = the sum of x^2 over the block; the GEMV that
// reads the preparation applies 1 / rms (a norm consumer, see `GemvEpi`). One warp per
// block.
extern "C" __global__ void norm_parts_prep(const float* __restrict__ x,
                                           const float* __restrict__ w, int nblocks,
                                           unsigned short* __restrict__ xhl,
                                           float* __restrict__ xs, float* __restrict__ ss_out) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // x was written by the previous kernel
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    const int i = blk * 32 + lane;
    const float v = x[i];
    const float sq = warp_sum(v * v);
    prep32_store(v * w[i], lane, blk, xhl, xs);
    if (lane == 0) ss_out[blk] = sq;
}
