// Favlo CUDA kernels: attention decode (one query token) over a contiguous KV cache.
//
// Cache layout (the CPU `attention_causal` contract): k, v [seq, n_kv_heads, HD], f16
// (stored as raw bits) or f32; q and out f32 [n_heads, HD]; query head h reads kv head
// h / G (G = n_heads / n_kv_heads, a template parameter 1..8). HD (the head size) is a
// template parameter too: 128 (Qwen3, Llama 3) or 64 (SmolLM2, Qwen2.5-0.5B); lane d
// of a warp holds dims P*d .. P*d+P-1, P = HD / 32.
//
// The key count is read on the device (`*lenp + len_add`) so a captured CUDA graph can
// replay decode steps while the position advances; the grid covers a maximum length
// and blocks past the real one write empty partials (max = -inf, sum = 0).
//
// Split-K ("flash decoding"): block (split s, kv head g) handles keys
// [32 s, 32 s + 32) for the G query heads of kv head g, so each key and value row is
// read from memory once per token. Its 4 warps take 8 keys each, load all 8 K and V
// rows before using any, reduce the G dot products with butterfly shuffles and run an
// online softmax in f32 (precise expf). The block writes (max, sum, unnormalized
// out[HD]) per query head; `attn_decode_combine` merges the splits (one block per
// query head, one thread per dim).
//
// The `attn_decode_qkv_*` split kernels take the fused q|k|v projection instead of q:
// each warp builds its G q heads itself (+ bias, per-head RMSNorm, RoPE at *pos), and
// the one warp whose 8 keys hold position *pos also builds that key and value, stores
// them in cache row *pos and uses them from registers. That is the work of
// `qk_norm_rope_store` / `bias_rope_store`, done in the split's prologue while its K/V
// rows are in flight: one launch fewer per layer.

#define KEYS_PER_BLOCK 32
#define KEYS_PER_WARP 8

// P consecutive values of a cache or q row, widened to f32.
template <int P>
struct RowV {
    float v[P];
};

__device__ __forceinline__ void load_row(const unsigned short* p, RowV<4>& r) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    h2f2(u.x, r.v[0], r.v[1]);
    h2f2(u.y, r.v[2], r.v[3]);
}
__device__ __forceinline__ void load_row(const unsigned short* p, RowV<2>& r) {
    h2f2(__ldg(reinterpret_cast<const unsigned*>(p)), r.v[0], r.v[1]);
}
__device__ __forceinline__ void load_row(const float* p, RowV<4>& r) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = t.x; r.v[1] = t.y; r.v[2] = t.z; r.v[3] = t.w;
}
__device__ __forceinline__ void load_row(const float* p, RowV<2>& r) {
    const float2 t = __ldg(reinterpret_cast<const float2*>(p));
    r.v[0] = t.x; r.v[1] = t.y;
}

// What the fused split kernels build q, k and v from (see the header). qw / kw null: no
// q/k norm; bias null: none. kst / vst: the cache again, writable (T*).
struct QkvArgs {
    const float* qkv;
    const float* bias;
    const float* qw;
    const float* kw;
    const float* cos_t;
    const float* sin_t;
    void* kst;
    void* vst;
    float eps;
    int nh;
    int interleaved;
};

// This lane's P dims (lane * P ..) of head `head` of the q|k|v projection, + bias.
template <int HD>
__device__ __forceinline__ RowV<HD / 32> qkv_load(const QkvArgs& a, int head, int lane) {
    constexpr int P = HD / 32;
    RowV<P> r;
    load_row(a.qkv + head * HD + lane * P, r);
    if (a.bias != nullptr) {
        RowV<P> b;
        load_row(a.bias + head * HD + lane * P, b);
#pragma unroll
        for (int e = 0; e < P; ++e) r.v[e] += b.v[e];
    }
    return r;
}

// The RoPE angles of this lane's P dims at row `pos` of the tables: NeoX pairs (i, i +
// HD/2) sit in lanes l and l ^ 16 at the same element, interleaved pairs (2i, 2i + 1)
// in one lane.
template <int HD>
__device__ __forceinline__ void rope_angles(const QkvArgs& a, int pos, int lane,
                                            RowV<HD / 32>& c, RowV<HD / 32>& s) {
    constexpr int P = HD / 32, half = HD / 2;
    const float* ct = a.cos_t + (long long)pos * half;
    const float* st = a.sin_t + (long long)pos * half;
#pragma unroll
    for (int e = 0; e < P; ++e) {
        const int i = a.interleaved ? (lane * P + e) >> 1 : (lane & 15) * P + e;
        c.v[e] = ct[i];
        s.v[e] = st[i];
    }
}

// RMSNorm over the head when `norm` (x * (1 / rms) * w, as qk_norm_rope_store), then
// RoPE with the angles (c, s). Every lane of the warp must call it.
template <int HD>
__device__ __forceinline__ void norm_rope(RowV<HD / 32>& r, bool norm, const RowV<HD / 32>& w,
                                          const RowV<HD / 32>& c, const RowV<HD / 32>& s,
                                          float eps, int interleaved, int lane) {
    constexpr int P = HD / 32;
    if (norm) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < P; ++e) ss = fmaf(r.v[e], r.v[e], ss);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (int e = 0; e < P; ++e) r.v[e] = r.v[e] * inv * w.v[e];
    }
    if (interleaved) {
#pragma unroll
        for (int e = 0; e < P; e += 2) {
            const float x0 = r.v[e], x1 = r.v[e + 1];
            r.v[e] = x0 * c.v[e] - x1 * s.v[e];
            r.v[e + 1] = x0 * s.v[e] + x1 * c.v[e];
        }
    } else {
        const bool first = lane < 16;
#pragma unroll
        for (int e = 0; e < P; ++e) {
            const float p = __shfl_xor_sync(0xffffffffu, r.v[e], 16);
            const float x0 = first ? r.v[e] : p, x1 = first ? p : r.v[e];
            r.v[e] = first ? x0 * c.v[e] - x1 * s.v[e] : x0 * s.v[e] + x1 * c.v[e];
        }
    }
}

// Stores this lane's P values of a cache row and leaves r as stored (f16-rounded).
__device__ __forceinline__ void store_row(unsigned short* p, RowV<4>& r) {
    unsigned short h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[e]) : "f"(r.v[e]));
        asm("cvt.f32.f16 %0, %1;" : "=f"(r.v[e]) : "h"(h[e]));
    }
    *reinterpret_cast<uint2*>(p) = make_uint2((unsigned)h[0] | ((unsigned)h[1] << 16),
                                              (unsigned)h[2] | ((unsigned)h[3] << 16));
}
__device__ __forceinline__ void store_row(unsigned short* p, RowV<2>& r) {
    unsigned short h[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[e]) : "f"(r.v[e]));
        asm("cvt.f32.f16 %0, %1;" : "=f"(r.v[e]) : "h"(h[e]));
    }
    *reinterpret_cast<unsigned*>(p) = (unsigned)h[0] | ((unsigned)h[1] << 16);
}
__device__ __forceinline__ void store_row(float* p, RowV<4>& r) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
}
__device__ __forceinline__ void store_row(float* p, RowV<2>& r) {
    *reinterpret_cast<float2*>(p) = make_float2(r.v[0], r.v[1]);
}

// FUSED: q, the new key and value come from `qa` (see the header); `lenp` is then the
// position (len_add must be 1) and `q` is unused.
template <int HD, int G, typename T, bool FUSED>
__device__ __forceinline__ void attn_split(const float* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc, float* __restrict__ part,
                                           const int* __restrict__ lenp, int len_add, int cap,
                                           int n_kv, float scale, const QkvArgs& qa) {
    constexpr int P = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int s = blockIdx.x, g = blockIdx.y;
    const int nsplit = gridDim.x;
    pdl_trigger();
    {
        // While the kernels before finish: pull this warp's K and V rows into L2 (a hint
        // only: L2 is where every write lands, so whatever the loads below read after
        // pdl_wait is current, and a stale length only changes what gets warmed).
        const int guess = min(*(volatile const int*)lenp + len_add, cap);
        const int j = s * KEYS_PER_BLOCK + warp * KEYS_PER_WARP + (lane & 7);
        if (lane < 16 && j < guess) {
            const T* row = ((lane & 8) ? vc : kc) + ((long long)j * n_kv + g) * HD;
#if __CUDA_ARCH__ >= 900
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row),
                         "r"((unsigned)(HD * sizeof(T)))
                         : "memory");
#else
            for (int o = 0; o < HD * (int)sizeof(T); o += 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)row + o));
#endif
        }
    }
    pdl_wait();  // q, the cache row and *lenp come from earlier kernels
    const int pos = *lenp + len_add - 1;  // FUSED: the new key's position
    const int len = max(1, min(pos + 1, cap));  // never past the cache
    const int j0 = s * KEYS_PER_BLOCK + warp * KEYS_PER_WARP;
    RowV<P> kr[KEYS_PER_WARP], vr[KEYS_PER_WARP];
#pragma unroll
    for (int u = 0; u < KEYS_PER_WARP; ++u) {
        const int j = min(j0 + u, len - 1);
        const long long off = ((long long)j * n_kv + g) * HD + lane * P;
        load_row(kc + off, kr[u]);
        load_row(vc + off, vr[u]);
    }
    RowV<P> qv[G];
    RowV<P> kn, vn;  // FUSED: the new key and value
    if constexpr (FUSED) {
        // Every load first (q heads, the new k and v, norm weights, angles), then the
        // arithmetic: one round trip, with the G + 1 norms' shuffles interleaved. Every
        // warp builds k and v (a uniform path); the one holding `pos` stores them.
        RowV<P> qwv, kwv, c, sn;
        const bool norm = qa.qw != nullptr;
        if (norm) {
            load_row(qa.qw + lane * P, qwv);
            load_row(qa.kw + lane * P, kwv);
        }
        rope_angles<HD>(qa, min(pos, cap - 1), lane, c, sn);
#pragma unroll
        for (int i = 0; i < G; ++i) qv[i] = qkv_load<HD>(qa, g * G + i, lane);
        kn = qkv_load<HD>(qa, qa.nh + g, lane);
        vn = qkv_load<HD>(qa, qa.nh + n_kv + g, lane);
#pragma unroll
        for (int i = 0; i < G; ++i) norm_rope<HD>(qv[i], norm, qwv, c, sn, qa.eps, qa.interleaved, lane);
        norm_rope<HD>(kn, norm, kwv, c, sn, qa.eps, qa.interleaved, lane);
    } else {
#pragma unroll
        for (int i = 0; i < G; ++i) load_row(q + (g * G + i) * HD + lane * P, qv[i]);
    }
#pragma unroll
    for (int i = 0; i < G; ++i)
#pragma unroll
        for (int e = 0; e < P; ++e) qv[i].v[e] *= scale;
    if constexpr (FUSED) {
        // The warp holding key `pos` stores it and uses it as stored; its slots past
        // `pos` (clamped to it above) take the same row. A position past the capacity
        // stores nothing (the attention covers the capacity's keys).
        if (pos < cap && pos >= j0 && pos < j0 + KEYS_PER_WARP) {
            const long long off = ((long long)pos * n_kv + g) * HD + lane * P;
            store_row(static_cast<T*>(qa.kst) + off, kn);
            store_row(static_cast<T*>(qa.vst) + off, vn);
#pragma unroll
            for (int u = 0; u < KEYS_PER_WARP; ++u)
                if (j0 + u >= pos) {
                    kr[u] = kn;
                    vr[u] = vn;
                }
        }
    }
    // All 8 x G dot products first (independent butterfly reductions: ILP), then one
    // max, exp and weighted sum per head.
    float sc[G][KEYS_PER_WARP];
#pragma unroll
    for (int u = 0; u < KEYS_PER_WARP; ++u) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            float d = qv[i].v[0] * kr[u].v[0];
#pragma unroll
            for (int e = 1; e < P; ++e) d = fmaf(qv[i].v[e], kr[u].v[e], d);
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
    RowV<P> o[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = __int_as_float(0xff800000);
#pragma unroll
        for (int u = 0; u < KEYS_PER_WARP; ++u)
            if (j0 + u < len) m[i] = fmaxf(m[i], sc[i][u]);
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < P; ++e) o[i].v[e] = 0.f;
        if (j0 < len) {
#pragma unroll
            for (int u = 0; u < KEYS_PER_WARP; ++u) {
                const float p = (j0 + u < len) ? expf(sc[i][u] - m[i]) : 0.f;
                l[i] += p;
#pragma unroll
                for (int e = 0; e < P; ++e) o[i].v[e] = fmaf(p, vr[u].v[e], o[i].v[e]);
            }
        }
    }
    // Merge the 4 warps: shared (m, l) per warp and head, o per warp, head and dim.
    __shared__ float sm[4][G], sl[4][G];
    __shared__ RowV<P> so[4][G][32];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (lane == 0) {
            sm[warp][i] = m[i];
            sl[warp][i] = l[i];
        }
        so[warp][i][lane] = o[i];
    }
    __syncthreads();
    // Warp w merges heads w, w + 4, ...; lane d its P dims.
    for (int i = warp; i < G; i += 4) {
        float mx = __int_as_float(0xff800000);
#pragma unroll
        for (int w = 0; w < 4; ++w) mx = fmaxf(mx, sm[w][i]);
        float L = 0.f;
        RowV<P> O;
#pragma unroll
        for (int e = 0; e < P; ++e) O.v[e] = 0.f;
        if (mx != __int_as_float(0xff800000)) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const float c = expf(sm[w][i] - mx);  // 0 for an empty warp (m = -inf)
                L = fmaf(sl[w][i], c, L);
                const RowV<P> ow = so[w][i][lane];
#pragma unroll
                for (int e = 0; e < P; ++e) O.v[e] = fmaf(ow.v[e], c, O.v[e]);
            }
        }
        // part: [n_heads][nsplit][HD + 4]: out[HD], max, sum, 2 pad (16-byte rows).
        float* pp = part + ((long long)(g * G + i) * nsplit + s) * (HD + 4);
#pragma unroll
        for (int e = 0; e < P; ++e) pp[lane * P + e] = O.v[e];
        if (lane == 0) {
            pp[HD] = mx;
            pp[HD + 1] = L;
        }
    }
}

// Kernel names: attn_decode_{f16,f32}_g{G} for HD 128 (the first version's names) and
// attn_decode_{f16,f32}_g{G}_hd64; a `_z` suffix: several sequences, sequence blockIdx.z
// (SeqArgs: q, k cache, v cache, partials, length).
#define ATTN_KERNELS(HD, SUF, G)                                                                \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        attn_decode_f16_g##G##SUF(const float* q, const unsigned short* k,                     \
                                  const unsigned short* v, float* part, const int* lenp,       \
                                  int len_add, int cap, int n_kv, float scale) {                \
        attn_split<HD, G, unsigned short, false>(q, k, v, part, lenp, len_add, cap, n_kv,       \
                                                 scale, QkvArgs{});                             \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        attn_decode_f32_g##G##SUF(const float* q, const float* k, const float* v, float* part, \
                                  const int* lenp, int len_add, int cap, int n_kv,             \
                                  float scale) {                                                \
        attn_split<HD, G, float, false>(q, k, v, part, lenp, len_add, cap, n_kv, scale,         \
                                        QkvArgs{});                                             \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_qkv_f16_g##G##SUF(             \
        const float* qkv, const float* bias, const float* qw, const float* kw,                  \
        const float* cos_t, const float* sin_t, unsigned short* k, unsigned short* v,           \
        float* part, const int* posp, int cap, int n_kv, int nh, float scale, float eps,        \
        int interleaved) {                                                                      \
        const QkvArgs qa{qkv, bias, qw, kw, cos_t, sin_t, k, v, eps, nh, interleaved};          \
        attn_split<HD, G, unsigned short, true>(nullptr, k, v, part, posp, 1, cap, n_kv, scale, \
                                                qa);                                            \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_qkv_f32_g##G##SUF(             \
        const float* qkv, const float* bias, const float* qw, const float* kw,                  \
        const float* cos_t, const float* sin_t, float* k, float* v, float* part,                \
        const int* posp, int cap, int n_kv, int nh, float scale, float eps, int interleaved) {  \
        const QkvArgs qa{qkv, bias, qw, kw, cos_t, sin_t, k, v, eps, nh, interleaved};          \
        attn_split<HD, G, float, true>(nullptr, k, v, part, posp, 1, cap, n_kv, scale, qa);     \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_f16_g##G##SUF##_z(             \
        const SeqArgs a, int len_add, int cap, int n_kv, float scale) {                         \
        const int z = blockIdx.z;                                                               \
        attn_split<HD, G, unsigned short, false>(                                               \
            (const float*)a.p[0][z], (const unsigned short*)a.p[1][z],                          \
            (const unsigned short*)a.p[2][z], (float*)a.p[3][z], (const int*)a.p[4][z],         \
            len_add, cap, n_kv, scale, QkvArgs{});                                              \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_f32_g##G##SUF##_z(             \
        const SeqArgs a, int len_add, int cap, int n_kv, float scale) {                         \
        const int z = blockIdx.z;                                                               \
        attn_split<HD, G, float, false>((const float*)a.p[0][z], (const float*)a.p[1][z],       \
                                        (const float*)a.p[2][z], (float*)a.p[3][z],             \
                                        (const int*)a.p[4][z], len_add, cap, n_kv, scale,       \
                                        QkvArgs{});                                             \
    }

#define ATTN_GROUPS(HD, SUF) \
    ATTN_KERNELS(HD, SUF, 1) \
    ATTN_KERNELS(HD, SUF, 2) \
    ATTN_KERNELS(HD, SUF, 3) \
    ATTN_KERNELS(HD, SUF, 4) \
    ATTN_KERNELS(HD, SUF, 5) \
    ATTN_KERNELS(HD, SUF, 6) \
    ATTN_KERNELS(HD, SUF, 7) \
    ATTN_KERNELS(HD, SUF, 8)

ATTN_GROUPS(128, )
ATTN_GROUPS(64, _hd64)

// out[h][d] = sum_s e^(m_s - M) o_s[d] / sum_s e^(m_s - M) l_s. Grid: n_heads; block: HD.
// Each thread reads every split's (max, sum) itself (the block's threads read the same
// words: one broadcast request) together with its own dim of the split's output, 32
// splits per round, and merges them with a running max (online softmax): one dependent
// L2 round trip per 32 splits, no barrier. Empty splits (max -inf, partial 0) weigh 0.
#define COMBINE_ROUND 32
template <int HD>
__device__ __forceinline__ float combine_head(const float* __restrict__ part, int nsplit) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float* p = part + (long long)h * nsplit * (HD + 4);
    const float ninf = __int_as_float(0xff800000);
    float M = ninf, L = 0.f, O = 0.f;
    for (int s0 = 0; s0 < nsplit; s0 += COMBINE_ROUND) {
        float m[COMBINE_ROUND], l[COMBINE_ROUND], o[COMBINE_ROUND];
#pragma unroll
        for (int u = 0; u < COMBINE_ROUND; ++u) {
            const float* q = p + (long long)min(s0 + u, nsplit - 1) * (HD + 4);
            const bool in = s0 + u < nsplit;
            m[u] = in ? q[HD] : ninf;
            l[u] = q[HD + 1];
            o[u] = q[d];
        }
        float mx = M;
#pragma unroll
        for (int u = 0; u < COMBINE_ROUND; ++u) mx = fmaxf(mx, m[u]);
        if (mx == ninf) continue;  // nothing but empty splits so far (same in every thread)
        const float c0 = expf(M - mx);  // 0 while M is -inf
        L *= c0;
        O *= c0;
#pragma unroll
        for (int u = 0; u < COMBINE_ROUND; ++u) {
            const float c = expf(m[u] - mx);  // 0 for an empty split or past nsplit
            L = fmaf(l[u], c, L);
            O = fmaf(o[u], c, O);
        }
        M = mx;
    }
    return O / L;
}

template <int HD>
__device__ __forceinline__ void combine_f32(const float* __restrict__ part,
                                            float* __restrict__ out, int nsplit) {
    pdl_trigger();
    pdl_wait();
    out[blockIdx.x * HD + threadIdx.x] = combine_head<HD>(part, nsplit);
}

// As combine_f32, writing the output straight into the GEMV's x preparation (head h's
// HD values are blocks (HD/32) h ..); one warp per block of 32.
template <int HD>
__device__ __forceinline__ void combine_prep(const float* __restrict__ part, int nsplit,
                                             unsigned short* __restrict__ xhl,
                                             float* __restrict__ xs) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // the partials come from the split kernel
    const float v = combine_head<HD>(part, nsplit);
    prep32_store(v, threadIdx.x & 31,
                 (long long)blockIdx.x * (HD / 32) + (threadIdx.x >> 5), xhl, xs);
}

extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine(const float* __restrict__ part, float* __restrict__ out, int nsplit) {
    combine_f32<128>(part, out, nsplit);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_hd64(const float* __restrict__ part, float* __restrict__ out,
                             int nsplit) {
    combine_f32<64>(part, out, nsplit);
}
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine_prep(const float* __restrict__ part, int nsplit,
                             unsigned short* __restrict__ xhl, float* __restrict__ xs) {
    combine_prep<128>(part, nsplit, xhl, xs);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_prep_hd64(const float* __restrict__ part, int nsplit,
                                  unsigned short* __restrict__ xhl, float* __restrict__ xs) {
    combine_prep<64>(part, nsplit, xhl, xs);
}
// combine_prep for several sequences (SeqArgs: partials, xhl, xs), sequence blockIdx.z.
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine_prep_z(const SeqArgs a, int nsplit) {
    const int z = blockIdx.z;
    combine_prep<128>((const float*)a.p[0][z], nsplit, (unsigned short*)a.p[1][z],
                      (float*)a.p[2][z]);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_prep_hd64_z(const SeqArgs a, int nsplit) {
    const int z = blockIdx.z;
    combine_prep<64>((const float*)a.p[0][z], nsplit, (unsigned short*)a.p[1][z],
                     (float*)a.p[2][z]);
}
