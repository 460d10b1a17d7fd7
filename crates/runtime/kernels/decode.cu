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

// L2 warm-up (a timing probe, `cuda_decode_bench --l2-warm`): the first `warm[r]` chunks
// of every row tile of up to two tiled GEMV matrices (src/cuda/gemv_tile.rs: per (tile,
// chunk) 4096 data bytes, and `sb[r]` scale bytes at the scale plane), asked of L2 with one
// bulk prefetch per chunk and plane. A hint only: nothing reads it back here.
struct WarmArgs {
    const char* data[2];
    const char* scales[2];
    int tiles[2];
    int chunks[2];
    int warm[2];
    int sb[2];
    // When: 0 all blocks right after the PDL wait, 1 all blocks after their stores,
    // 2 only the v heads' blocks, after their store.
    int when;
};

// Items t0, t0 + n, ... of the regions' chunks.
__device__ __forceinline__ void l2_warm(const WarmArgs& w, int t0, int n) {
#if __CUDA_ARCH__ >= 900
    for (int r = 0; r < 2; ++r) {
        if (w.data[r] == nullptr || w.warm[r] <= 0) continue;
        const int items = w.tiles[r] * w.warm[r];
        for (int i = t0; i < items; i += n) {
            const long long c = (long long)(i / w.warm[r]) * w.chunks[r] + i % w.warm[r];
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], 4096;" ::"l"(w.data[r] + c * 4096)
                         : "memory");
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w.scales[r] + c * w.sb[r]),
                         "r"(w.sb[r])
                         : "memory");
        }
    }
#endif
}

template <typename T, bool WARM = false>
__device__ __forceinline__ void qk_norm_rope_store(
    const float* __restrict__ qkv, const float* __restrict__ qw, const float* __restrict__ kw,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t, const int* __restrict__ posp,
    float* __restrict__ q_out, T* __restrict__ kc, T* __restrict__ vc, int nh, int nkv,
    float eps, const WarmArgs* warm = nullptr) {
    __shared__ float buf[HD];
    __shared__ float red[4];
    pdl_trigger();
    pdl_wait();  // qkv comes from the GEMV before (programmatic dependent launch)
    // After the wait: the q|k|v GEMV's stream is over, and DRAM idles through the
    // attention's chain of small kernels.
    const int all = gridDim.x * blockDim.x, me = blockIdx.x * blockDim.x + threadIdx.x;
    if (WARM && warm->when == 0) l2_warm(*warm, me, all);
    const int head = blockIdx.x, d = threadIdx.x;
    const int pos = *posp;
    const float x = qkv[head * HD + d];
    if (head >= nh + nkv) {  // a v head: straight into the cache
        const int g = head - nh - nkv;
        store_cache(vc + ((long long)pos * nkv + g) * HD + d, x);
        if (WARM && warm->when == 1) l2_warm(*warm, me, all);
        if (WARM && warm->when == 2) l2_warm(*warm, g * blockDim.x + d, nkv * blockDim.x);
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
    if (WARM && warm->when == 1) l2_warm(*warm, me, all);
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

// qk_norm_rope_store_f16 that also warms L2 (`WarmArgs`; the bench's probe only).
extern "C" __global__ void __launch_bounds__(128) qk_norm_rope_store_f16_warm(
    const float* qkv, const float* qw, const float* kw, const float* cos_t, const float* sin_t,
    const int* pos, float* q_out, unsigned short* kc, unsigned short* vc, int nh, int nkv,
    float eps, const WarmArgs warm) {
    qk_norm_rope_store<unsigned short, true>(qkv, qw, kw, cos_t, sin_t, pos, q_out, kc, vc, nh,
                                             nkv, eps, &warm);
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
