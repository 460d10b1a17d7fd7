// Favlo CUDA kernels: attention decode (one query token) over a contiguous KV cache.
//
// Cache layout (the CPU `attention_causal` contract): k, v [seq, n_kv_heads, HD], f16
// (stored as raw bits) or f32; q and out f32 [n_heads, HD]; query head h reads kv head
// h / G (G = n_heads / n_kv_heads, a template parameter 1..8). HD (the head size) is a
// template parameter too: 128 (Qwen3, Llama 3) or 64 (SmolLM2, Qwen2.5-0.5B).
//
// The key count is read on the device (`*lenp + len_add`) so a captured CUDA graph can
// replay decode steps while the position advances; the grid covers a maximum length
// (the capacity), blocks past the real one return at once, and the combine reads only
// the splits that hold keys (`splits_used`, the same count from the same length), so a
// step's cost follows its keys rather than its bucket's capacity.
//
// Split-K ("flash decoding"): block (split s, kv head g) handles keys
// [32 s, 32 s + 32) for the G query heads of kv head g, so each key and value row is
// read from memory once per token. Its 4 warps take 8 keys each; a row spans 16 lanes
// (lane d of a half-warp holds dims P d .. P d + P - 1, P = HD / 16), so the two
// half-warps take alternate keys and every shuffle of the butterfly reduces two keys'
// dot products at once (4 rounds over 16 lanes: 64 shuffles per warp for G = 4, where
// a row over 32 lanes needed 160). All 4 K and V rows of a half-warp are loaded before
// any is used (kept in their storage type, widened at use), the G dot products reduced,
// and an online softmax run in f32 in base 2 (q scaled by scale·log2(e), exp2f:
// MUFU.EX2, ~2 ulp), so the partials' maxima are base-2 too. The block writes (max, sum,
// unnormalized out[HD]) per query head; `attn_decode_combine` merges the splits (one
// block per query head, one thread per dim).

#define KEYS_PER_BLOCK 32
#define KEYS_PER_WARP 8
#define KEYS_PER_HALF (KEYS_PER_WARP / 2)

// The keys a step attends to: `*lenp + len_add` clamped to 1..=cap (never past the
// cache). Read after the PDL wait: the position comes from earlier kernels.
__device__ __forceinline__ int attn_len(const int* __restrict__ lenp, int len_add, int cap) {
    return max(1, min(*lenp + len_add, cap));
}

// Splits of KEYS_PER_BLOCK keys that hold any of the step's keys (at most nsplit).
__device__ __forceinline__ int splits_used(const int* __restrict__ lenp, int len_add, int cap,
                                           int nsplit) {
    return min(nsplit, (attn_len(lenp, len_add, cap) + KEYS_PER_BLOCK - 1) / KEYS_PER_BLOCK);
}

// FAVLO_KV_EVICT_FIRST (a module compiled with it defined to 1; a timing probe of the
// decode step): the split's K/V row loads and L2 prefetches carry an evict-first policy,
// since every cache row is read once per token.
#ifndef FAVLO_KV_EVICT_FIRST
#define FAVLO_KV_EVICT_FIRST 0
#endif

// P consecutive values of a q row or cache row, widened to f32.
template <int P>
struct RowV {
    float v[P];
};

// P consecutive values of a cache row in its storage type: one 16-byte load (f16, P 8),
// 8 bytes (f16, P 4) or 16 / 32 bytes (f32), widened with `widen`.
template <typename T, int P>
struct Raw;
template <>
struct Raw<unsigned short, 8> {
    uint4 w;
    __device__ __forceinline__ void load(const unsigned short* p) {
#if FAVLO_KV_EVICT_FIRST
        asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                     : "l"(p), "l"(l2_evict_first_policy()));
#else
        w = __ldg(reinterpret_cast<const uint4*>(p));
#endif
    }
    __device__ __forceinline__ void widen(RowV<8>& r) const {
        h2f2(w.x, r.v[0], r.v[1]);
        h2f2(w.y, r.v[2], r.v[3]);
        h2f2(w.z, r.v[4], r.v[5]);
        h2f2(w.w, r.v[6], r.v[7]);
    }
};
template <>
struct Raw<unsigned short, 4> {
    uint2 w;
    __device__ __forceinline__ void load(const unsigned short* p) {
#if FAVLO_KV_EVICT_FIRST
        asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"
                     : "=r"(w.x), "=r"(w.y)
                     : "l"(p), "l"(l2_evict_first_policy()));
#else
        w = __ldg(reinterpret_cast<const uint2*>(p));
#endif
    }
    __device__ __forceinline__ void widen(RowV<4>& r) const {
        h2f2(w.x, r.v[0], r.v[1]);
        h2f2(w.y, r.v[2], r.v[3]);
    }
};
template <int P>
struct Raw<float, P> {
    float4 w[P / 4];
    __device__ __forceinline__ void load(const float* p) {
#pragma unroll
        for (int c = 0; c < P / 4; ++c) w[c] = __ldg(reinterpret_cast<const float4*>(p) + c);
    }
    __device__ __forceinline__ void widen(RowV<P>& r) const {
#pragma unroll
        for (int c = 0; c < P / 4; ++c) {
            r.v[4 * c] = w[c].x;
            r.v[4 * c + 1] = w[c].y;
            r.v[4 * c + 2] = w[c].z;
            r.v[4 * c + 3] = w[c].w;
        }
    }
};

// MODE (timing probes only, partials meaningless unless 0): 1 = the loads, folded into
// the partials with no scores, softmax or merge; 2 = no merge of the half-warps (each of
// the first G writes its own head's values unmerged); 3 = the merge's shared-memory
// writes and barrier but not its reads and arithmetic (each of the first G half-warps
// then writes its own head's values, as 2).
template <int HD, int G, typename T, int MODE = 0>
__device__ __forceinline__ void attn_split(const float* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc, float* __restrict__ part,
                                           const int* __restrict__ lenp, int len_add, int cap,
                                           int n_kv, float scale) {
    constexpr int P = HD / 16;
    constexpr int NH = 2 * (KEYS_PER_BLOCK / KEYS_PER_WARP);  // half-warps per block
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int half = lane >> 4, hl = lane & 15;
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
#if FAVLO_KV_EVICT_FIRST
            asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(row),
                         "r"((unsigned)(HD * sizeof(T))), "l"(l2_evict_first_policy())
                         : "memory");
#else
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row),
                         "r"((unsigned)(HD * sizeof(T)))
                         : "memory");
#endif
#else
            for (int o = 0; o < HD * (int)sizeof(T); o += 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"((const char*)row + o));
#endif
        }
    }
    pdl_wait();  // q, the cache row and *lenp come from earlier kernels
    const int len = attn_len(lenp, len_add, cap);
    // Past the keys: nothing to write, the combine reads splits_used() splits only.
    if (s * KEYS_PER_BLOCK >= len) return;
    // Half-warp h of warp w takes keys j0 + 2 u + h, u < KEYS_PER_HALF.
    const int j0 = s * KEYS_PER_BLOCK + warp * KEYS_PER_WARP + half;
    Raw<T, P> kr[KEYS_PER_HALF], vr[KEYS_PER_HALF];
#pragma unroll
    for (int u = 0; u < KEYS_PER_HALF; ++u) {
        const int j = min(j0 + 2 * u, len - 1);
        const long long off = ((long long)j * n_kv + g) * HD + hl * P;
        kr[u].load(kc + off);
        vr[u].load(vc + off);
    }
    const float scale2 = scale * 1.4426950408889634f;  // log2(e): the softmax in base 2
    RowV<P> qv[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        Raw<float, P> r;
        r.load(q + (g * G + i) * HD + hl * P);
        r.widen(qv[i]);
#pragma unroll
        for (int e = 0; e < P; ++e) qv[i].v[e] *= scale2;
    }
    const int hw = 2 * warp + half;
    if (MODE == 1) {
        // Every loaded value kept live at one add each, in P independent sums (short
        // chains); the values written stay small, so the steps after see sane inputs.
        float f[P];
#pragma unroll
        for (int e = 0; e < P; ++e) f[e] = 0.f;
#pragma unroll
        for (int u = 0; u < KEYS_PER_HALF; ++u) {
            RowV<P> k, v;
            kr[u].widen(k);
            vr[u].widen(v);
#pragma unroll
            for (int e = 0; e < P; ++e) f[e] += k.v[e] + v.v[e];
        }
#pragma unroll
        for (int i = 0; i < G; ++i)
#pragma unroll
            for (int e = 0; e < P; ++e) f[e] += qv[i].v[e];
        if (hw >= G) return;
        float* pp = part + ((long long)(g * G + hw) * nsplit + s) * (HD + 4);
#pragma unroll
        for (int e = 0; e < P; ++e) pp[hl * P + e] = f[e] * 0x1p-10f;
        if (hl == 0) {
            pp[HD] = 0.f;
            pp[HD + 1] = 1.f;
        }
        return;
    }
    // All KEYS_PER_HALF x G dot products first (independent butterfly reductions within
    // the half-warp: ILP), then one max, exp and weighted sum per head.
    float sc[G][KEYS_PER_HALF];
#pragma unroll
    for (int u = 0; u < KEYS_PER_HALF; ++u) {
        RowV<P> k;
        kr[u].widen(k);
#pragma unroll
        for (int i = 0; i < G; ++i) {
            float d = qv[i].v[0] * k.v[0];
#pragma unroll
            for (int e = 1; e < P; ++e) d = fmaf(qv[i].v[e], k.v[e], d);
            sc[i][u] = d;
        }
    }
#pragma unroll
    for (int x = 8; x > 0; x >>= 1)
#pragma unroll
        for (int u = 0; u < KEYS_PER_HALF; ++u)
#pragma unroll
            for (int i = 0; i < G; ++i) sc[i][u] += __shfl_xor_sync(0xffffffffu, sc[i][u], x);
    float m[G], l[G];
    RowV<P> o[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = __int_as_float(0xff800000);
#pragma unroll
        for (int u = 0; u < KEYS_PER_HALF; ++u)
            if (j0 + 2 * u < len) m[i] = fmaxf(m[i], sc[i][u]);
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < P; ++e) o[i].v[e] = 0.f;
    }
    if (j0 < len) {
#pragma unroll
        for (int u = 0; u < KEYS_PER_HALF; ++u) {
            RowV<P> v;
            vr[u].widen(v);
#pragma unroll
            for (int i = 0; i < G; ++i) {
                const float p = (j0 + 2 * u < len) ? exp2f(sc[i][u] - m[i]) : 0.f;
                l[i] += p;
#pragma unroll
                for (int e = 0; e < P; ++e) o[i].v[e] = fmaf(p, v.v[e], o[i].v[e]);
            }
        }
    }
    // The merge's inputs: (m, l) per half-warp and head, o per half-warp, head and dim.
    __shared__ float sm[NH][G], sl[NH][G];
    __shared__ __align__(16) RowV<P> so[NH][G][16];
    if (MODE != 2) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            if (hl == 0) {
                sm[hw][i] = m[i];
                sl[hw][i] = l[i];
            }
            so[hw][i][hl] = o[i];
        }
        __syncthreads();
    }
    if (MODE == 3) {
        // Never true (scale > 0): keeps the stores above from being dropped as unread.
        if (scale == -1.f) part[threadIdx.x] = sm[0][0] + sl[0][0] + so[0][0][hl].v[0];
    }
    if (MODE == 2 || MODE == 3) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            if (i != hw) continue;  // register arrays indexed by constants only
            float* pp = part + ((long long)(g * G + i) * nsplit + s) * (HD + 4);
#pragma unroll
            for (int e = 0; e < P; ++e) pp[hl * P + e] = o[i].v[e];
            if (hl == 0) {
                pp[HD] = m[i];
                pp[HD + 1] = l[i];
            }
        }
        return;
    }
    // Every half-warp merges: SPLIT half-warps per head (when G divides the 8), each
    // taking PD of lane d's P dims, so the merge's reads and multiply-adds spread over
    // the block's four warps instead of G / 2 of them.
    constexpr int SPLIT = (NH % G == 0) ? ((NH / G) < P ? (NH / G) : P) : 1;
    constexpr int PD = P / SPLIT;
    if (hw >= G * SPLIT) return;
    const int i = hw % G, piece = hw / G;
    float mx = __int_as_float(0xff800000);
#pragma unroll
    for (int w = 0; w < NH; ++w) mx = fmaxf(mx, sm[w][i]);
    float L = 0.f;
    float O[PD];
#pragma unroll
    for (int e = 0; e < PD; ++e) O[e] = 0.f;
    if (mx != __int_as_float(0xff800000)) {
#pragma unroll
        for (int w = 0; w < NH; ++w) {
            const float c = exp2f(sm[w][i] - mx);  // 0 for an empty half-warp (m = -inf)
            L = fmaf(sl[w][i], c, L);
            const float* ow = so[w][i][hl].v + piece * PD;
#pragma unroll
            for (int e = 0; e < PD; ++e) O[e] = fmaf(ow[e], c, O[e]);
        }
    }
    // part: [n_heads][nsplit][HD + 4]: out[HD], max, sum, 2 pad (16-byte rows).
    float* pp = part + ((long long)(g * G + i) * nsplit + s) * (HD + 4);
    float* po = pp + hl * P + piece * PD;
    if constexpr (PD % 4 == 0) {
#pragma unroll
        for (int e = 0; e < PD; e += 4)
            *reinterpret_cast<float4*>(po + e) = make_float4(O[e], O[e + 1], O[e + 2], O[e + 3]);
    } else {
#pragma unroll
        for (int e = 0; e < PD; ++e) po[e] = O[e];
    }
    if (hl == 0 && piece == 0) {
        pp[HD] = mx;
        pp[HD + 1] = L;
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
        attn_split<HD, G, unsigned short>(q, k, v, part, lenp, len_add, cap, n_kv, scale);      \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128)                                           \
        attn_decode_f32_g##G##SUF(const float* q, const float* k, const float* v, float* part, \
                                  const int* lenp, int len_add, int cap, int n_kv,             \
                                  float scale) {                                                \
        attn_split<HD, G, float>(q, k, v, part, lenp, len_add, cap, n_kv, scale);               \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_f16_g##G##SUF##_z(             \
        const SeqArgs a, int len_add, int cap, int n_kv, float scale) {                         \
        const int z = blockIdx.z;                                                               \
        attn_split<HD, G, unsigned short>(                                                      \
            (const float*)a.p[0][z], (const unsigned short*)a.p[1][z],                          \
            (const unsigned short*)a.p[2][z], (float*)a.p[3][z], (const int*)a.p[4][z],         \
            len_add, cap, n_kv, scale);                                                         \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_f32_g##G##SUF##_z(             \
        const SeqArgs a, int len_add, int cap, int n_kv, float scale) {                         \
        const int z = blockIdx.z;                                                               \
        attn_split<HD, G, float>((const float*)a.p[0][z], (const float*)a.p[1][z],              \
                                 (const float*)a.p[2][z], (float*)a.p[3][z],                    \
                                 (const int*)a.p[4][z], len_add, cap, n_kv, scale);             \
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

// The split's timing probes (`AttentionDecode::ablate` bits 2, 3 and 4), for the shape of
// Qwen3-8B only (f16 cache, HD 128, G 4).
#define ATTN_PROBE(MODE)                                                                    \
    extern "C" __global__ void __launch_bounds__(128) attn_decode_f16_g4_probe##MODE(       \
        const float* q, const unsigned short* k, const unsigned short* v, float* part,      \
        const int* lenp, int len_add, int cap, int n_kv, float scale) {                     \
        attn_split<128, 4, unsigned short, MODE>(q, k, v, part, lenp, len_add, cap, n_kv,   \
                                                 scale);                                    \
    }
ATTN_PROBE(1)
ATTN_PROBE(2)
ATTN_PROBE(3)

// out[h][d] = sum_s 2^(m_s - M) o_s[d] / sum_s 2^(m_s - M) l_s (the split's maxima are
// base 2). Grid: n_heads; block: HD.
// 64 splits per round, one L2 round trip each and no barrier: every thread reads its own
// dim of the 64 outputs, and lane j of each warp the (max, sum) of splits j and j + 32;
// the warp's shuffles give the round's max, sum and weights (each thread takes split
// s's weight from the lane that read it), merged with a running max (online softmax).
// Only the first `used` splits are read (those holding keys; the row stride stays
// nsplit); an empty warp's share within them (max -inf, partial 0) weighs 0.
template <int HD>
__device__ __forceinline__ float combine_head(const float* __restrict__ part, int nsplit,
                                              int used) {
    constexpr int R = 64;  // two splits per lane
    const int h = blockIdx.x, d = threadIdx.x, lane = d & 31;
    const float* p = part + (long long)h * nsplit * (HD + 4);
    const float ninf = __int_as_float(0xff800000);
    float M = ninf, L = 0.f, O = 0.f;
    for (int s0 = 0; s0 < used; s0 += R) {
        float o[R];
#pragma unroll
        for (int u = 0; u < R; ++u) o[u] = p[(long long)min(s0 + u, used - 1) * (HD + 4) + d];
        const int sa = s0 + lane, sb = s0 + 32 + lane;
        const float* qa = p + (long long)min(sa, used - 1) * (HD + 4);
        const float* qb = p + (long long)min(sb, used - 1) * (HD + 4);
        const float ma = sa < used ? qa[HD] : ninf, la = qa[HD + 1];
        const float mb = sb < used ? qb[HD] : ninf, lb = qb[HD + 1];
        float mx = fmaxf(ma, mb);
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
        mx = fmaxf(mx, M);
        if (mx == ninf) continue;  // nothing but empty splits so far (same in every thread)
        const float ca = exp2f(ma - mx), cb = exp2f(mb - mx);  // 0 when empty or past used
        float ls = fmaf(lb, cb, la * ca);
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, x);
        const float c0 = exp2f(M - mx);  // 0 while M is -inf
        L = fmaf(L, c0, ls);
        O *= c0;
#pragma unroll
        for (int u = 0; u < R; ++u)  // split s0 + u's weight, from the lane that read it
            O = fmaf(o[u], __shfl_sync(0xffffffffu, u < 32 ? ca : cb, u & 31), O);
        M = mx;
    }
    return O / L;
}

template <int HD>
__device__ __forceinline__ void combine_f32(const float* __restrict__ part,
                                            float* __restrict__ out, int nsplit,
                                            const int* __restrict__ lenp, int len_add, int cap) {
    pdl_trigger();
    pdl_wait();
    const int used = splits_used(lenp, len_add, cap, nsplit);
    out[blockIdx.x * HD + threadIdx.x] = combine_head<HD>(part, nsplit, used);
}

// As combine_f32, writing the output straight into the GEMV's x preparation (head h's
// HD values are blocks (HD/32) h ..); one warp per block of 32.
template <int HD>
__device__ __forceinline__ void combine_prep(const float* __restrict__ part, int nsplit,
                                             unsigned short* __restrict__ xhl,
                                             float* __restrict__ xs,
                                             const int* __restrict__ lenp, int len_add,
                                             int cap) {
    pdl_trigger();  // the GEMV that reads xhl / xs may start streaming its weights
    pdl_wait();     // the partials come from the split kernel
    const int used = splits_used(lenp, len_add, cap, nsplit);
    const float v = combine_head<HD>(part, nsplit, used);
    prep32_store(v, threadIdx.x & 31,
                 (long long)blockIdx.x * (HD / 32) + (threadIdx.x >> 5), xhl, xs);
}

// The combines take the split kernel's length arguments (lenp, len_add, cap) to read
// the same splits it wrote.
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine(const float* __restrict__ part, float* __restrict__ out, int nsplit,
                        const int* __restrict__ lenp, int len_add, int cap) {
    combine_f32<128>(part, out, nsplit, lenp, len_add, cap);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_hd64(const float* __restrict__ part, float* __restrict__ out,
                             int nsplit, const int* __restrict__ lenp, int len_add, int cap) {
    combine_f32<64>(part, out, nsplit, lenp, len_add, cap);
}
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine_prep(const float* __restrict__ part, int nsplit,
                             unsigned short* __restrict__ xhl, float* __restrict__ xs,
                             const int* __restrict__ lenp, int len_add, int cap) {
    combine_prep<128>(part, nsplit, xhl, xs, lenp, len_add, cap);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_prep_hd64(const float* __restrict__ part, int nsplit,
                                  unsigned short* __restrict__ xhl, float* __restrict__ xs,
                                  const int* __restrict__ lenp, int len_add, int cap) {
    combine_prep<64>(part, nsplit, xhl, xs, lenp, len_add, cap);
}
// combine_prep for several sequences (SeqArgs: partials, xhl, xs, length), sequence
// blockIdx.z.
extern "C" __global__ void __launch_bounds__(128)
    attn_decode_combine_prep_z(const SeqArgs a, int nsplit, int len_add, int cap) {
    const int z = blockIdx.z;
    combine_prep<128>((const float*)a.p[0][z], nsplit, (unsigned short*)a.p[1][z],
                      (float*)a.p[2][z], (const int*)a.p[3][z], len_add, cap);
}
extern "C" __global__ void __launch_bounds__(64)
    attn_decode_combine_prep_hd64_z(const SeqArgs a, int nsplit, int len_add, int cap) {
    const int z = blockIdx.z;
    combine_prep<64>((const float*)a.p[0][z], nsplit, (unsigned short*)a.p[1][z],
                     (float*)a.p[2][z], (const int*)a.p[3][z], len_add, cap);
}
