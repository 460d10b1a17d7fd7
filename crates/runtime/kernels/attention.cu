// Favlo CUDA kernels: attention decode (one query token) over a contiguous KV cache.
//
// Cache layout (the CPU `attention_causal` contract): k, v [seq, n_kv_heads, 128], f16
// (stored as raw bits) or f32; q and out f32 [n_heads, 128]; query head h reads kv head
// h / G (G = n_heads / n_kv_heads, a template parameter 1, 2, 4 or 8).
//
// The key count is read on the device (`*lenp + len_add`) so a captured CUDA graph can
// replay decode steps while the position advances; the grid covers a maximum length
// and blocks past the real one write empty partials (max = -inf, sum = 0).
//
// Split-K ("flash decoding"): block (split s, kv head g) handles keys
// [32 s, 32 s + 32) for the G query heads of kv head g, so each key and value row is
// read from memory once per token. Its 4 warps take 8 keys each, load all 8 K and V
// rows (lane d holds dims 4d..4d+3) before using any, reduce the G dot products with
// butterfly shuffles and run an online softmax in f32 (precise expf). The block writes
// (max, sum, unnormalized out[128]) per query head; `attn_decode_combine` merges the
// splits (one block per query head, one thread per dim).

#define HD 128
#define KEYS_PER_BLOCK 32
#define KEYS_PER_WARP 8

__device__ __forceinline__ float4 load_row4(const unsigned short* p) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    float4 r;
    asm("{.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;}"
        : "=f"(r.x), "=f"(r.y) : "r"(u.x));
    asm("{.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;}"
        : "=f"(r.z), "=f"(r.w) : "r"(u.y));
    return r;
}

__device__ __forceinline__ float4 load_row4(const float* p) {
    return __ldg(reinterpret_cast<const float4*>(p));
}

template <int G, typename T>
__device__ __forceinline__ void attn_split(const float* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc, float* __restrict__ part,
                                           const int* __restrict__ lenp, int len_add, int cap,
                                           int n_kv, float scale) {
    pdl_trigger();
    pdl_wait();  // q, the cache row and *lenp come from earlier kernels
    const int len = max(1, min(*lenp + len_add, cap));  // never past the cache
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int s = blockIdx.x, g = blockIdx.y;
    const int nsplit = gridDim.x;
    float4 qv[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        qv[i] = __ldg(reinterpret_cast<const float4*>(q + (g * G + i) * HD + lane * 4));
        qv[i].x *= scale; qv[i].y *= scale; qv[i].z *= scale; qv[i].w *= scale;
    }
    const int j0 = s * KEYS_PER_BLOCK + warp * KEYS_PER_WARP;
    float4 kr[KEYS_PER_WARP], vr[KEYS_PER_WARP];
#pragma unroll
    for (int u = 0; u < KEYS_PER_WARP; ++u) {
        const int j = min(j0 + u, len - 1);
        const long long off = ((long long)j * n_kv + g) * HD + lane * 4;
        kr[u] = load_row4(kc + off);
        vr[u] = load_row4(vc + off);
    }
    // All 8 x G dot products first (independent butterfly reductions: ILP), then one
    // max, exp and weighted sum per head.
    float sc[G][KEYS_PER_WARP];
#pragma unroll
    for (int u = 0; u < KEYS_PER_WARP; ++u) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            float d = qv[i].x * kr[u].x;
            d = fmaf(qv[i].y, kr[u].y, d);
            d = fmaf(qv[i].z, kr[u].z, d);
            d = fmaf(qv[i].w, kr[u].w, d);
            sc[i][u] = d;
        }
    }
#pragma unroll
    for (int x = 16; x > 0; x >>= 1)
#pragma unroll
        for (int u = 0; u < KEYS_PER_WARP; ++u)
#pragma unroll
            for (int i = 0; i < G; ++i) sc[i][u] += __shfl_xor_sync(0xffffffffu, sc[i][u], x);
    float m[G], l[G];
    float4 o[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = __int_as_float(0xff800000);
#pragma unroll
        for (int u = 0; u < KEYS_PER_WARP; ++u)
            if (j0 + u < len) m[i] = fmaxf(m[i], sc[i][u]);
        l[i] = 0.f;
        o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j0 < len) {
#pragma unroll
            for (int u = 0; u < KEYS_PER_WARP; ++u) {
                const float p = (j0 + u < len) ? expf(sc[i][u] - m[i]) : 0.f;
                l[i] += p;
                o[i].x = fmaf(p, vr[u].x, o[i].x);
                o[i].y = fmaf(p, vr[u].y, o[i].y);
                o[i].z = fmaf(p, vr[u].z, o[i].z);
                o[i].w = fmaf(p, vr[u].w, o[i].w);
            }
        }
    }
    // Merge the 4 warps: shared (m, l) per warp and head, o per warp, head and dim.
    __shared__ float sm[4][G], sl[4][G];
    __shared__ float4 so[4][G][32];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (lane == 0) {
            sm[warp][i] = m[i];
            sl[warp][i] = l[i];
        }
        so[warp][i][lane] = o[i];
    }
    __syncthreads();
    // Thread t: head i = t / 32 (looping when G > 4), dims 4*(t%32)...
    for (int i = warp; i < G; i += 4) {
        float mx = __int_as_float(0xff800000);
#pragma unroll
        for (int w = 0; w < 4; ++w) mx = fmaxf(mx, sm[w][i]);
        float L = 0.f;
        float4 O = make_float4(0.f, 0.f, 0.f, 0.f);
        if (mx != __int_as_float(0xff800000)) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const float c = expf(sm[w][i] - mx);  // 0 for an empty warp (m = -inf)
                L = fmaf(sl[w][i], c, L);
                const float4 ow = so[w][i][lane];
                O.x = fmaf(ow.x, c, O.x);
                O.y = fmaf(ow.y, c, O.y);
                O.z = fmaf(ow.z, c, O.z);
                O.w = fmaf(ow.w, c, O.w);
            }
        }
        // part: [n_heads][nsplit][HD + 4]: out[HD], max, sum, 2 pad (16-byte rows).
        float* pp = part + ((long long)(g * G + i) * nsplit + s) * (HD + 4);
        reinterpret_cast<float4*>(pp)[lane] = O;
        if (lane == 0) {
            pp[HD] = mx;
            pp[HD + 1] = L;
        }
    }
}

#define ATTN_KERNELS(G)                                                                         \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        attn_decode_f16_g##G(const float* q, const unsigned short* k, const unsigned short* v,  \
                             float* part, const int* lenp, int len_add, int cap, int n_kv,       \
                             float scale) {                                                     \
        attn_split<G, unsigned short>(q, k, v, part, lenp, len_add, cap, n_kv, scale);          \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        attn_decode_f32_g##G(const float* q, const float* k, const float* v, float* part,       \
                             const int* lenp, int len_add, int cap, int n_kv, float scale) {    \
        attn_split<G, float>(q, k, v, part, lenp, len_add, cap, n_kv, scale);                   \
    }

ATTN_KERNELS(1)
ATTN_KERNELS(2)
ATTN_KERNELS(4)
ATTN_KERNELS(8)

// out[h][d] = sum_s e^(m_s - M) o_s[d] / sum_s e^(m_s - M) l_s. Grid: n_heads; block: 128.
// The split weights are computed once per head in shared memory (threads over splits),
// then each thread sums its dim over the splits with many loads in flight.
__device__ __forceinline__ float combine_head(const float* __restrict__ part, int nsplit) {
    __shared__ float cw[1024];
    __shared__ float red[4];
    const int h = blockIdx.x, d = threadIdx.x, lane = d & 31, warp = d >> 5;
    const float* p = part + (long long)h * nsplit * (HD + 4);
    float mx = __int_as_float(0xff800000);
    for (int s = d; s < nsplit; s += HD) mx = fmaxf(mx, p[s * (HD + 4) + HD]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    __syncthreads();
    float L = 0.f;
    for (int s = d; s < nsplit; s += HD) {
        const float c = expf(p[s * (HD + 4) + HD] - mx);  // 0 for an empty split
        cw[s] = c;
        L = fmaf(p[s * (HD + 4) + HD + 1], c, L);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    if (lane == 0) red[warp] = L;
    __syncthreads();
    L = red[0] + red[1] + red[2] + red[3];
    float O = 0.f;
#pragma unroll 16
    for (int s = 0; s < nsplit; ++s) O = fmaf(p[s * (HD + 4) + d], cw[s], O);
    return O / L;
}

extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine(const float* __restrict__ part, float* __restrict__ out, int nsplit) {
    pdl_trigger();
    pdl_wait();
    out[blockIdx.x * HD + threadIdx.x] = combine_head(part, nsplit);
}

// As attn_decode_combine, writing the output straight into the GEMV's x preparation
// (head h's 128 values are blocks 4h..4h+3); one warp per block of 32.
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine_prep(const float* __restrict__ part, int nsplit,
                             unsigned short* __restrict__ xhl, float* __restrict__ xs) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // the partials come from the split kernel
    const float v = combine_head(part, nsplit);
    prep32_store(v, threadIdx.x & 31, (long long)blockIdx.x * 4 + (threadIdx.x >> 5), xhl, xs);
}
