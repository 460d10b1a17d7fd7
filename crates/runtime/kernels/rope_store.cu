// Favlo CUDA kernels: bias + RoPE + KV-cache store for Llama / Qwen2 decode (no q/k
// norm; Qwen3's normed variant is decode.cu's qk_norm_rope_store).
//
// Design: one block per head of the fused projection qkv [nh + 2 nkv heads][HD], one
// thread per dim (HD = 64 or 128, a template parameter). The optional bias (the fused
// q|k|v bias of Qwen2, same layout; null when absent) is added first; q and k heads are
// rotated at position *pos (read on the device, so a captured CUDA graph stays valid as
// the position advances) with the pair layout `interleaved` (GGUF Llama: dims 2i, 2i+1)
// or NeoX (dims i, i + HD/2); q goes to q_out, k and v to cache row *pos. The cos/sin
// tables are [capacity][HD/2], computed on the host in f64. All arithmetic is f32.

__device__ __forceinline__ unsigned short rs_f2h(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ void rs_store(unsigned short* p, float v) { *p = rs_f2h(v); }
__device__ __forceinline__ void rs_store(float* p, float v) { *p = v; }

template <int HD, typename T>
__device__ __forceinline__ void bias_rope_store(
    const float* __restrict__ qkv, const float* __restrict__ bias,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t,
    const int* __restrict__ posp, float* __restrict__ q_out, T* __restrict__ kc,
    T* __restrict__ vc, int nh, int nkv, int interleaved) {
    __shared__ float buf[HD];
    pdl_trigger();
    pdl_wait();  // qkv comes from the GEMV before
    const int head = blockIdx.x, d = threadIdx.x;
    const int pos = *posp;
    float x = qkv[head * HD + d];
    if (bias != nullptr) x += bias[head * HD + d];
    if (head >= nh + nkv) {  // a v head: straight into the cache
        rs_store(vc + ((long long)pos * nkv + (head - nh - nkv)) * HD + d, x);
        return;
    }
    buf[d] = x;
    __syncthreads();
    constexpr int half = HD / 2;
    int i, partner;
    bool first;
    if (interleaved) {
        i = d >> 1;
        first = (d & 1) == 0;
        partner = d ^ 1;
    } else {
        first = d < half;
        i = first ? d : d - half;
        partner = first ? d + half : d - half;
    }
    const float c = cos_t[(long long)pos * half + i], s = sin_t[(long long)pos * half + i];
    const float x0 = first ? x : buf[partner], x1 = first ? buf[partner] : x;
    const float r = first ? x0 * c - x1 * s : x0 * s + x1 * c;
    if (head < nh) {
        q_out[head * HD + d] = r;
    } else {
        rs_store(kc + ((long long)pos * nkv + (head - nh)) * HD + d, r);
    }
}

#define ROPE_STORE(HD)                                                                          \
    extern "C" __global__ void __launch_bounds__(HD) bias_rope_store_f16_hd##HD(                \
        const float* qkv, const float* bias, const float* cos_t, const float* sin_t,            \
        const int* pos, float* q_out, unsigned short* kc, unsigned short* vc, int nh, int nkv,  \
        int interleaved) {                                                                      \
        bias_rope_store<HD, unsigned short>(qkv, bias, cos_t, sin_t, pos, q_out, kc, vc, nh,    \
                                            nkv, interleaved);                                  \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(HD) bias_rope_store_f32_hd##HD(                \
        const float* qkv, const float* bias, const float* cos_t, const float* sin_t,            \
        const int* pos, float* q_out, float* kc, float* vc, int nh, int nkv, int interleaved) { \
        bias_rope_store<HD, float>(qkv, bias, cos_t, sin_t, pos, q_out, kc, vc, nh, nkv,        \
                                   interleaved);                                                \
    }

ROPE_STORE(64)
ROPE_STORE(128)

// bias_rope_store for several sequences (batched decode), sequence blockIdx.z;
// SeqArgs: qkv, pos, q_out, k cache, v cache.
#define ROPE_STORE_Z(HD, SUF, T)                                                             \
    extern "C" __global__ void __launch_bounds__(HD) bias_rope_store_##SUF##_hd##HD##_z(      \
        const SeqArgs s, const float* bias, const float* cos_t, const float* sin_t, int nh,  \
        int nkv, int interleaved) {                                                           \
        const int z = blockIdx.z;                                                             \
        bias_rope_store<HD, T>((const float*)s.p[0][z], bias, cos_t, sin_t,                  \
                               (const int*)s.p[1][z], (float*)s.p[2][z], (T*)s.p[3][z],        \
                               (T*)s.p[4][z], nh, nkv, interleaved);                          \
    }
ROPE_STORE_Z(64, f16, unsigned short)
ROPE_STORE_Z(64, f32, float)
ROPE_STORE_Z(128, f16, unsigned short)
ROPE_STORE_Z(128, f32, float)
