// Favlo CUDA kernels: the small fused steps of a Qwen3-style decode (one token).
//
// Design: each kernel reads the token position from device memory (`pos`), so a whole
// decode step can be captured once as a CUDA graph and replayed as the position
// advances (`advance_pos` is the graph's last node). All arithmetic is f32.
//
//   qk_norm_rope_store: qkv [nh + 2 nkv heads][128] (one fused projection) ->
//       q heads: RMSNorm over the head (weight qw), NeoX RoPE at *pos -> q_out;
//       k heads: RMSNorm (weight kw), RoPE -> k cache row *pos; v heads -> v cache row.
//       Caches [max_seq][nkv][128], f16 bits (`_f16`) or f32 (`_f32`).
//       cos/sin tables [max_seq][64] (computed on the host in f64).
//   swiglu_fused: out[i] = silu(gu[i]) * gu[n + i] (gate and up from one projection).
//   advance_pos: *pos += 1.

#define HD 128

__device__ __forceinline__ unsigned short f2h(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ void store_cache(unsigned short* p, float v) { *p = f2h(v); }
__device__ __forceinline__ void store_cache(float* p, float v) { *p = v; }

template <typename T>
__device__ __forceinline__ void qk_norm_rope_store(
    const float* __restrict__ qkv, const float* __restrict__ qw, const float* __restrict__ kw,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t, const int* __restrict__ posp,
    float* __restrict__ q_out, T* __restrict__ kc, T* __restrict__ vc, int nh, int nkv,
    float eps) {
    __shared__ float buf[HD];
    __shared__ float red[4];
    pdl_trigger();
    pdl_wait();  // qkv comes from the GEMV before (programmatic dependent launch)
    const int head = blockIdx.x, d = threadIdx.x;
    const int pos = *posp;
    const float x = qkv[head * HD + d];
    if (head >= nh + nkv) {  // a v head: straight into the cache
        const int g = head - nh - nkv;
        store_cache(vc + ((long long)pos * nkv + g) * HD + d, x);
        return;
    }
    float ss = x * x;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((d & 31) == 0) red[d >> 5] = ss;
    __syncthreads();
    ss = red[0] + red[1] + red[2] + red[3];
    const float inv = 1.0f / sqrtf(ss / (float)HD + eps);
    const float* w = head < nh ? qw : kw;
    buf[d] = x * inv * w[d];
    __syncthreads();
    const int half = HD / 2, i = d < half ? d : d - half;
    const float c = cos_t[(long long)pos * half + i], s = sin_t[(long long)pos * half + i];
    const float x0 = buf[i], x1 = buf[i + half];
    const float r = d < half ? x0 * c - x1 * s : x0 * s + x1 * c;
    if (head < nh) {
        q_out[head * HD + d] = r;
    } else {
        const int g = head - nh;
        store_cache(kc + ((long long)pos * nkv + g) * HD + d, r);
    }
}

extern "C" __global__ void __launch_bounds__(128) qk_norm_rope_store_f16(
    const float* qkv, const float* qw, const float* kw, const float* cos_t, const float* sin_t,
    const int* pos, float* q_out, unsigned short* kc, unsigned short* vc, int nh, int nkv,
    float eps) {
    qk_norm_rope_store<unsigned short>(qkv, qw, kw, cos_t, sin_t, pos, q_out, kc, vc, nh, nkv,
                                       eps);
}

extern "C" __global__ void __launch_bounds__(128) qk_norm_rope_store_f32(
    const float* qkv, const float* qw, const float* kw, const float* cos_t, const float* sin_t,
    const int* pos, float* q_out, float* kc, float* vc, int nh, int nkv, float eps) {
    qk_norm_rope_store<float>(qkv, qw, kw, cos_t, sin_t, pos, q_out, kc, vc, nh, nkv, eps);
}

extern "C" __global__ void swiglu_fused(const float* __restrict__ gu, float* __restrict__ out,
                                        int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float g = gu[i];
        out[i] = g / (1.0f + expf(-g)) * gu[n + i];
    }
}

extern "C" __global__ void advance_pos(int* pos) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *pos += 1;
}

// qk_norm_rope_store for several sequences (batched decode), sequence blockIdx.z;
// SeqArgs: qkv, pos, q_out, k cache, v cache.
#define QK_NORM_ROPE_Z(SUF, T)                                                               \
    extern "C" __global__ void __launch_bounds__(128) qk_norm_rope_store_##SUF##_z(          \
        const SeqArgs s, const float* qw, const float* kw, const float* cos_t,               \
        const float* sin_t, int nh, int nkv, float eps) {                                    \
        const int z = blockIdx.z;                                                             \
        qk_norm_rope_store<T>((const float*)s.p[0][z], qw, kw, cos_t, sin_t,                 \
                              (const int*)s.p[1][z], (float*)s.p[2][z], (T*)s.p[3][z],         \
                              (T*)s.p[4][z], nh, nkv, eps);                                   \
    }
QK_NORM_ROPE_Z(f16, unsigned short)
QK_NORM_ROPE_Z(f32, float)
