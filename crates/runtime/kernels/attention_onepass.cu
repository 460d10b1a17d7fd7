// Favlo CUDA kernels: one-launch attention decode (one query token), optionally fused
// with the q/k RMSNorm, bias, RoPE and KV-cache store that precede it.
//
// Appended to attention.cu (same module; prep32.cuh in front). Layouts as there: k, v
// caches [cap, n_kv, HD] f16 (raw bits) or f32, q and out f32 [n_heads, HD], query
// head h reads kv head h / G. HD = 64 or 128 and G = 1..8 are template parameters.
//
// Grid (S, n_kv), 256 threads (8 warps). The key count len = *lenp + len_add is read on
// the device (graph replay); min(S, len / min_keys) blocks per kv head take equal key
// ranges (split s: keys [s·chunk, (s+1)·chunk)), the rest exit at once, so short
// contexts use few blocks. The linear block id runs kv head fastest, so the active
// blocks are dispatched first, one per SM. Each warp loads K
// and V rows with 16-byte loads (a row spans HD·sizeof(T)/16 lanes, so a warp load
// covers 32 / that many keys), U rows of each in flight per lane before any is used,
// and keeps an online softmax per lane group for all G query heads of the kv head, so
// every K/V byte is read once per token. The warps' states merge in shared memory.
// With one active block it writes the output directly; otherwise every block writes
// its (max, sum, unnormalized out) partial, and the last block to finish (a device
// counter per kv head, `atomicInc` wraps it back to 0 so a captured graph replays)
// merges them. Output f32 or straight into the next GEMV's x preparation.
//
// Fused prologue (qkv != null): every block RMSNorms (qw / kw, when non-null) and
// rotates its G q heads from the fused q|k|v projection (+ bias when non-null; NeoX or
// interleaved pairs, cos/sin tables [cap, HD/2]); the block holding the new key
// (position len - 1) also builds k and v, stores them in cache row len - 1 and uses the
// stored (rounded) values for that key from shared memory. All arithmetic is f32; the
// softmax runs in base 2 (q is scaled by scale·log2(e), exp2f: MUFU.EX2, ~2 ulp).
//
// Latency: the block's first K/V loads are issued before the prologue (they depend only
// on the length), and kernels whose state fits 128 registers ask for 2 blocks per SM
// (A1_MINB), so one block's loads overlap another's arithmetic.
//
// The tensor-core loop (f16 caches, sm_80+; `a1_tc_run`; the default since session 28)
// replaces the per-lane FMA loop: each warp takes 16-key tiles and runs q·Kᵀ and P·V as
// mma.sync m16n8k16 with f16 hi/lo splits of q and p; the prologue, the block merge and
// the last-block merge are the same. f32 caches and older archs run the FMA loop, and
// the module `attention_onepass_fma` (A1_TC_WANTED 0) runs it for f16 caches too, for
// comparisons and as a fallback.

#define A1_WARPS 8
#define A1_THREADS 256
#define A1_MAX_SPLITS 64
#define A1_LOG2E 1.4426950408889634f
// FMA loop: K (and V) loads in flight per lane.
#define A1_LOADS 4

// 16 bytes of a cache row, kept raw until used (f16: 8 values in 4 words).
__device__ __forceinline__ void a1_ld16(unsigned (&w)[4], const unsigned short* p) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
}
template <typename T>
struct A1Raw;
template <>
struct A1Raw<unsigned short> {
    unsigned w[4];
    __device__ __forceinline__ void load(const unsigned short* p) { a1_ld16(w, p); }
    __device__ __forceinline__ void zero() { w[0] = w[1] = w[2] = w[3] = 0u; }
    __device__ __forceinline__ void widen(float* v) const {
#pragma unroll
        for (int e = 0; e < 4; ++e) h2f2(w[e], v[2 * e], v[2 * e + 1]);
    }
};
template <>
struct A1Raw<float> {
    float w[4];
    __device__ __forceinline__ void load(const float* p) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(w[0]), "=f"(w[1]), "=f"(w[2]), "=f"(w[3]) : "l"(p));
    }
    __device__ __forceinline__ void zero() { w[0] = w[1] = w[2] = w[3] = 0.f; }
    __device__ __forceinline__ void widen(float* v) const {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = w[e];
    }
};

// The default module (`attention_onepass`) runs the tensor-core loop (`a1_tc_run`) for
// f16 caches on sm_80 and later; f32 caches, older archs and the module built with
// A1_TC_WANTED 0 (`attention_onepass_fma`) run the FMA loop.
#ifndef A1_TC_WANTED
#define A1_TC_WANTED 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && A1_TC_WANTED
#define A1_TC_ARCH 1
#else
#define A1_TC_ARCH 0
#endif
template <typename T>
struct A1Tc {
    static constexpr bool on = A1_TC_ARCH && sizeof(T) == 2;
};
// Blocks per SM the kernel is built for: the FMA loop 2 when the q and accumulator
// registers (2·G·16/sizeof(T) floats) leave room under 128 registers, else 1; the
// tensor-core loop 1 (about 200 registers at head size 128).
#define A1_MINB(G, T) \
    (A1Tc<T>::on ? 1 : ((G) * (16 / (int)sizeof(T)) <= 32 && (G) <= 5 ? 2 : 1))

// Keys per warp tile of the tensor-core loop (two mma n-tiles of 8 keys).
#define A1_TC_KEYS 16
// The probabilities go to f16 scaled by 2^14 (p <= 1, so at most 16384), which keeps
// them normal down to p ~ 4e-9; the output is scaled back exactly.
#define A1_PSCALE 16384.f

// One warp's tile of 16 keys for the tensor-core loop, in registers, f16 bits. With
// gq = lane / 4 and c = lane % 4: K rows of keys gq and 8 + gq, physical dims
// 32 t + 8 c .. + 8 (the mma's B fragments for two k-steps per 16-byte load: the dims
// of a k-step are permuted alike in q and K, so the dot products are unchanged); V rows
// of keys 2c, 2c + 1, 8 + 2c, 9 + 2c, dims 64 h + 8 gq .. + 8 (paired per key by
// `prmt` into the B fragments of the P·V mma, whose output dims are permuted the same
// way: n-tile j, column n is dim 64 (j / 8) + 8 n + j % 8).
template <int HD>
struct A1Tile {
    static constexpr int KL = HD / 32, VL = HD / 64;
    unsigned k[2][KL][4];
    unsigned v[4][VL][4];
    // Keys at or past kend read row k0 instead (finite; their scores are masked).
    __device__ __forceinline__ void load_k(const unsigned short* base, long long rs, int kt,
                                           int k0, int kend, int gq, int c) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            int j = kt + 8 * n + gq;
            if (j >= kend) j = k0;
            const unsigned short* p = base + j * rs + 8 * c;
#pragma unroll
            for (int t = 0; t < KL; ++t) a1_ld16(k[n][t], p + 32 * t);
        }
    }
    __device__ __forceinline__ void load_v(const unsigned short* base, long long rs, int kt,
                                           int k0, int kend, int gq, int c) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            int j = kt + 2 * c + (kk & 1) + 8 * (kk >> 1);
            if (j >= kend) j = k0;
            const unsigned short* p = base + j * rs + 8 * gq;
#pragma unroll
            for (int h = 0; h < VL; ++h) a1_ld16(v[kk][h], p + 64 * h);
        }
    }
};

#if A1_TC_ARCH
// d += a·b, m16n8k16, f16 inputs, f32 accumulators.
__device__ __forceinline__ void a1_mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                       unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// x0 (low half) and x1 rounded to f16 (hi), and what that left, rounded again (lo):
// x = hi + lo within f16's rounding of the residual (~2^-22 relative).
__device__ __forceinline__ void a1_split(float x0, float x1, unsigned& hi, unsigned& lo) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
    float h0, h1;
    h2f2(hi, h0, h1);
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - h1), "f"(x0 - h0));
}
__device__ __forceinline__ unsigned a1_prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// The tensor-core loop of one warp over its tiles (kt, kt + 16·NW, ... < kend; the first
// tile already in `tl`), then its state (max, sum, out) into wm / wl / wo[warp].
// The mma's A rows 0..7 hold the G query heads rounded to f16 and rows 8..15 their
// residuals, so S = Q·Kᵀ comes out as two halves whose sum is the f32-accurate score;
// likewise P (scaled by 2^14) and its residual in rows 0..7 and 8..15 of the P·V mma,
// whose output rows are summed at the end. A score tile's C fragment (head gq, keys
// 2c, 2c + 1, 8 + 2c, 9 + 2c) is exactly the P·V mma's A fragment, so p never leaves
// the thread; the online softmax's max needs two shuffles per tile. Each tile's next K
// loads are issued as soon as its scores are out, and its next V loads after P·V.
template <int HD, int G>
__device__ __forceinline__ void a1_tc_run(A1Tile<HD>& tl, const float (*qs)[HD],
                                          const unsigned short* kb, const unsigned short* vb,
                                          long long rs, int kt, int k0, int kend, int lane,
                                          int warp, float (*wo)[G][HD], float (*wm)[G],
                                          float (*wl)[G]) {
    constexpr int KS = HD / 16, NT = HD / 8;
    constexpr int STEP = A1_TC_KEYS * A1_WARPS;
    const float NEG_INF = __int_as_float(0xff800000);
    const int gq = lane >> 2, c = lane & 3;
    unsigned qa[KS][4];
#pragma unroll
    for (int s = 0; s < KS; ++s) {
        const int d = 32 * (s >> 1) + 8 * c + 4 * (s & 1);
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = gq < G ? qs[gq][d + e] : 0.f;
        a1_split(x[0], x[1], qa[s][0], qa[s][1]);
        a1_split(x[2], x[3], qa[s][2], qa[s][3]);
    }
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m = NEG_INF, l = 0.f;
    for (; kt < kend; kt += STEP) {
        float sa[2][4];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            sa[n][0] = sa[n][1] = sa[n][2] = sa[n][3] = 0.f;
#pragma unroll
            for (int s = 0; s < KS; ++s)
                a1_mma(sa[n], qa[s][0], qa[s][1], qa[s][2], qa[s][3], tl.k[n][s >> 1][2 * (s & 1)],
                       tl.k[n][s >> 1][2 * (s & 1) + 1]);
        }
        const int nx = kt + STEP;
        if (nx < kend) tl.load_k(kb, rs, nx, k0, kend, gq, c);
        float sc[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = e >> 1, i = e & 1;
            sc[e] = kt + 8 * n + 2 * c + i < kend ? sa[n][i] + sa[n][i + 2] : NEG_INF;
        }
        float mt = fmaxf(fmaxf(sc[0], sc[1]), fmaxf(sc[2], sc[3]));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        // The tile's first key is below kend, so mn is finite; corr is 0 while m = -inf.
        const float mn = fmaxf(m, mt);
        const float corr = exp2f(m - mn);
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) p[e] = exp2f(sc[e] - mn);
        l = fmaf(l, corr, (p[0] + p[1]) + (p[2] + p[3]));
        m = mn;
        unsigned pa[4];
        a1_split(p[0] * A1_PSCALE, p[1] * A1_PSCALE, pa[0], pa[1]);
        a1_split(p[2] * A1_PSCALE, p[3] * A1_PSCALE, pa[2], pa[3]);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int h = j >> 3, w = (j & 7) >> 1;
            const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;
            const unsigned b0 = a1_prmt(tl.v[0][h][w], tl.v[1][h][w], sel);
            const unsigned b1 = a1_prmt(tl.v[2][h][w], tl.v[3][h][w], sel);
            o[j][0] *= corr;
            o[j][1] *= corr;
            o[j][2] *= corr;
            o[j][3] *= corr;
            a1_mma(o[j], pa[0], pa[1], pa[2], pa[3], b0, b1);
        }
        if (nx < kend) tl.load_v(vb, rs, nx, k0, kend, gq, c);
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (gq < G) {
        const float inv = 1.f / A1_PSCALE;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int d = 64 * (j >> 3) + (j & 7) + 16 * c;
            wo[warp][gq][d] = (o[j][0] + o[j][2]) * inv;
            wo[warp][gq][d + 8] = (o[j][1] + o[j][3]) * inv;
        }
        if (c == 0) {
            wm[warp][gq] = m;
            wl[warp][gq] = l;
        }
    }
}
#else
template <int HD, int G>
__device__ __forceinline__ void a1_tc_run(A1Tile<HD>&, const float (*)[HD], const unsigned short*,
                                          const unsigned short*, long long, int, int, int, int,
                                          int, float (*)[G][HD], float (*)[G], float (*)[G]) {}
#endif

// Stores v in the cache and returns the value the cache now holds.
__device__ __forceinline__ float a1_store(unsigned short* p, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    *p = h;
    float r;
    asm("{.reg .b16 t;\n\tmov.b16 t, %1;\n\tcvt.f32.f16 %0, t;}" : "=f"(r) : "h"(h));
    return r;
}
__device__ __forceinline__ float a1_store(float* p, float v) {
    *p = v;
    return v;
}

// The tensor-core loop's new key (fused, last block; warp 0 after a block barrier): it
// joins warp 0's state in shared memory.
template <int HD, int G>
__device__ __forceinline__ void a1_tc_new_key(const float (*qs)[HD], const float* knew,
                                              const float* vnew, int lane,
                                              float (*wo)[G][HD], float (*wm)[G],
                                              float (*wl)[G]) {
    for (int i = 0; i < G; ++i) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < HD / 32; ++e)
            d = fmaf(qs[i][lane + 32 * e], knew[lane + 32 * e], d);
#pragma unroll
        for (int x = 16; x > 0; x >>= 1) d += __shfl_xor_sync(0xffffffffu, d, x);
        const float mo = wm[0][i], mn = fmaxf(mo, d);
        const float c = exp2f(mo - mn), p = exp2f(d - mn);
#pragma unroll
        for (int e = 0; e < HD / 32; ++e) {
            float* w = &wo[0][i][lane + 32 * e];
            *w = fmaf(p, vnew[lane + 32 * e], *w * c);
        }
        __syncwarp();
        if (lane == 0) {
            wm[0][i] = mn;
            wl[0][i] = fmaf(wl[0][i], c, p);
        }
        __syncwarp();
    }
}

// The FMA loop of one warp: U slots of KPW keys per load, the first tile already in
// kr / vr / valid (from key wb); lane group `sub` (LPR lanes, this lane the li-th) holds
// one key's row. Then the
// new key (fused, last block: warp 0) and the warp's state into wm / wl / wo[warp].
template <int HD, int G, typename T>
__device__ __forceinline__ void a1_fma_run(A1Raw<T> (&kr)[A1_LOADS], A1Raw<T> (&vr)[A1_LOADS],
                                           bool (&valid)[A1_LOADS], int wb,
                                           const float (*qs)[HD], const T* kb, const T* vb,
                                           long long rstride, int k0, int kend, int sub,
                                           int li, int warp, bool owns_new, const float* knew,
                                           const float* vnew, float (*wo)[G][HD],
                                           float (*wm)[G], float (*wl)[G]) {
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int LPR = HD / VEC;
    constexpr int KPW = 32 / LPR;
    constexpr int U = A1_LOADS;
    constexpr int STEP = A1_WARPS * KPW;
    const float NEG_INF = __int_as_float(0xff800000);
    float qr[G][VEC];
#pragma unroll
    for (int i = 0; i < G; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e) qr[i][e] = qs[i][li * VEC + e];
    float m[G], l[G], o[G][VEC];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = NEG_INF;
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[i][e] = 0.f;
    }
    for (; wb < kend; wb += U * STEP) {
        if (wb != k0 + warp * KPW) {  // the first tile is loaded
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int j = wb + u * STEP + sub;
                valid[u] = j < kend;
                if (valid[u]) {
                    kr[u].load(kb + j * rstride);
                    vr[u].load(vb + j * rstride);
                }
            }
        }
        float sc[G][U];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
        {
            float kf[VEC];
            kr[u].widen(kf);
#pragma unroll
            for (int i = 0; i < G; ++i) {
                float d = qr[i][0] * kf[0];
#pragma unroll
                for (int e = 1; e < VEC; ++e) d = fmaf(qr[i][e], kf[e], d);
                sc[i][u] = d;
            }
        }
#pragma unroll
        for (int x = LPR / 2; x > 0; x >>= 1)
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int i = 0; i < G; ++i) sc[i][u] += __shfl_xor_sync(0xffffffffu, sc[i][u], x);
#pragma unroll
        for (int i = 0; i < G; ++i) {
            float mt = m[i];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (valid[u]) mt = fmaxf(mt, sc[i][u]);
            if (mt != NEG_INF) {
                const float corr = exp2f(m[i] - mt);  // 0 while m = -inf
                l[i] *= corr;
#pragma unroll
                for (int e = 0; e < VEC; ++e) o[i][e] *= corr;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const float p = valid[u] ? exp2f(sc[i][u] - mt) : 0.f;
                    l[i] += p;
                    float vf[VEC];
                    vr[u].widen(vf);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) o[i][e] = fmaf(p, vf[e], o[i][e]);
                }
                m[i] = mt;
            }
        }
    }
    // Merge the warp's lane groups (they hold different keys).
#pragma unroll
    for (int x = LPR; x < 32; x <<= 1) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[i], x);
            const float lo = __shfl_xor_sync(0xffffffffu, l[i], x);
            float oo[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) oo[e] = __shfl_xor_sync(0xffffffffu, o[i][e], x);
            const float mn = fmaxf(m[i], mo);
            if (mn != NEG_INF) {
                const float c1 = exp2f(m[i] - mn), c2 = exp2f(mo - mn);
                l[i] = l[i] * c1 + lo * c2;
#pragma unroll
                for (int e = 0; e < VEC; ++e) o[i][e] = o[i][e] * c1 + oo[e] * c2;
                m[i] = mn;
            }
        }
    }
    // The new key (fused, last block): warp 0 takes it from shared memory.
    if (owns_new && warp == 0) {
        float kk[VEC], vv[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            kk[e] = knew[li * VEC + e];
            vv[e] = vnew[li * VEC + e];
        }
#pragma unroll
        for (int i = 0; i < G; ++i) {
            float d = qr[i][0] * kk[0];
#pragma unroll
            for (int e = 1; e < VEC; ++e) d = fmaf(qr[i][e], kk[e], d);
#pragma unroll
            for (int x = LPR / 2; x > 0; x >>= 1) d += __shfl_xor_sync(0xffffffffu, d, x);
            const float mn = fmaxf(m[i], d);
            const float c = exp2f(m[i] - mn), p = exp2f(d - mn);
            l[i] = l[i] * c + p;
#pragma unroll
            for (int e = 0; e < VEC; ++e) o[i][e] = fmaf(p, vv[e], o[i][e] * c);
            m[i] = mn;
        }
    }
    if (sub == 0) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) wo[warp][i][li * VEC + e] = o[i][e];
            if (li == 0) {
                wm[warp][i] = m[i];
                wl[warp][i] = l[i];
            }
        }
    }
}

template <int HD, int G, typename T>
__device__ __forceinline__ void attn_onepass(
    const float* __restrict__ q, const float* __restrict__ qkv, const float* __restrict__ bias,
    const float* __restrict__ qw, const float* __restrict__ kw, const float* __restrict__ cos_t,
    const float* __restrict__ sin_t, T* __restrict__ kc, T* __restrict__ vc,
    float* __restrict__ part, unsigned* __restrict__ cnt, const int* __restrict__ lenp,
    int len_add, int cap, int n_kv, int interleaved, int min_keys, int light, float eps,
    float scale, float* __restrict__ out, unsigned short* __restrict__ xhl,
    float* __restrict__ xs) {
    constexpr int NW = A1_WARPS;
    constexpr int VEC = 16 / (int)sizeof(T);  // values per 16-byte load
    constexpr int LPR = HD / VEC;             // lanes per cache row
    constexpr int KPW = 32 / LPR;             // keys per warp load
    constexpr int U = A1_LOADS;
    constexpr int STEP = NW * KPW;            // keys per block per load slot
    constexpr int P = HD / 32;                // prologue: dims per lane
    __shared__ __align__(16) float qs[G][HD];
    __shared__ __align__(16) float knew[HD];
    __shared__ __align__(16) float vnew[HD];
    __shared__ float wm[NW][G], wl[NW][G];
    __shared__ __align__(16) float wo[NW][G][HD];
    __shared__ __align__(16) float fo[G * HD];
    __shared__ float cw[G][A1_MAX_SPLITS];
    __shared__ float cinv[G];
    __shared__ int last_flag;
    const float NEG_INF = __int_as_float(0xff800000);

    pdl_trigger();
    pdl_wait();  // q / qkv, the cache and *lenp come from earlier kernels
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Split s of kv head g from the linear block id, kv head fastest: the active
    // blocks (s < nact) are the first nact·n_kv ids, so the scheduler spreads them one
    // per SM before doubling any up.
    const int S = gridDim.x;
    const int bid = blockIdx.y * S + blockIdx.x;
    const int s = bid / n_kv, g = bid % n_kv;
    const int len = max(1, min(*lenp + len_add, cap));
    // Blocks per kv head: one per min_keys keys, at most S; then equal key ranges.
    const int want = min(S, max(1, len / max(min_keys, 1)));
    int chunk = (len + want - 1) / want;
    constexpr int CR = A1Tc<T>::on ? A1_TC_KEYS : KPW;  // keys per block rounded to this
    chunk = (chunk + CR - 1) / CR * CR;
    const int nact = (len + chunk - 1) / chunk;
    if (s >= nact) return;
    const int k0 = s * chunk, k1 = min(len, k0 + chunk);
    const bool fused = qkv != nullptr;
    const int pos = len - 1;
    const bool owns_new = fused && s == nact - 1;
    const int kend = owns_new ? k1 - 1 : k1;
    const int nh = n_kv * G;

    // The first K/V tile, in flight during the prologue (rows < kend only: the new
    // key's row is written below).
    const int sub = lane / LPR, li = lane % LPR;
    const long long rstride = (long long)n_kv * HD;
    const T* kg = kc + (long long)g * HD;  // kv head g's row 0
    const T* vg = vc + (long long)g * HD;
    const T* kb = kg + li * VEC;
    const T* vb = vg + li * VEC;
    // A slot past kend keeps its previous (finite) row: its score is masked out and
    // its weight is 0.
    A1Raw<T> kr[U], vr[U];
    bool valid[U];
    int wb = k0 + warp * KPW;
    A1Tile<HD> tl;
    const int kt0 = k0 + warp * A1_TC_KEYS;
    if constexpr (A1Tc<T>::on) {
        if (kt0 < kend) {
            const int gq = lane >> 2, c4 = lane & 3;
            tl.load_k(kg, rstride, kt0, k0, kend, gq, c4);
            tl.load_v(vg, rstride, kt0, k0, kend, gq, c4);
        }
    } else {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            kr[u].zero();
            vr[u].zero();
            const int j = wb + u * STEP + sub;
            valid[u] = j < kend;
            if (valid[u]) {
                kr[u].load(kb + j * rstride);
                vr[u].load(vb + j * rstride);
            }
        }
    }
    scale *= A1_LOG2E;

    if (fused) {
        // Virtual heads: i < G the q heads, G the k head, G + 1 the v head.
        const int nvh = owns_new ? G + 2 : G;
        for (int i = warp; i < nvh; i += NW) {
            const int hab = i < G ? g * G + i : (i == G ? nh + g : nh + n_kv + g);
            const float* w = i < G ? qw : kw;
            constexpr int half = HD / 2;
            // Every input of the head first (one round of loads), then the arithmetic.
            float x[P], wv[P], cv[P], sv[P];
#pragma unroll
            for (int e = 0; e < P; ++e) {
                const int d = lane * P + e;
                const int ti = interleaved ? d >> 1 : d & (half - 1);
                x[e] = qkv[hab * HD + d];
                if (bias != nullptr) x[e] += bias[hab * HD + d];
                wv[e] = w != nullptr ? w[d] : 1.f;
                cv[e] = cos_t[(long long)pos * half + ti];
                sv[e] = sin_t[(long long)pos * half + ti];
            }
            if (i == G + 1) {
                T* row = vc + ((long long)pos * n_kv + g) * HD;
#pragma unroll
                for (int e = 0; e < P; ++e) vnew[lane * P + e] = a1_store(row + lane * P + e, x[e]);
                continue;
            }
            if (w != nullptr) {
                float ss = 0.f;
#pragma unroll
                for (int e = 0; e < P; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
                const float inv = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
                for (int e = 0; e < P; ++e) x[e] = x[e] * inv * wv[e];
            }
            float r[P];
            if (interleaved) {
#pragma unroll
                for (int e = 0; e < P; e += 2) {
                    r[e] = x[e] * cv[e] - x[e + 1] * sv[e];
                    r[e + 1] = x[e] * sv[e] + x[e + 1] * cv[e];
                }
            } else {
                const bool first = lane < 16;  // dims < HD/2; the partner is lane ^ 16
#pragma unroll
                for (int e = 0; e < P; ++e) {
                    const float xo = __shfl_xor_sync(0xffffffffu, x[e], 16);
                    const float x0 = first ? x[e] : xo, x1 = first ? xo : x[e];
                    r[e] = first ? x0 * cv[e] - x1 * sv[e] : x0 * sv[e] + x1 * cv[e];
                }
            }
            if (i < G) {
#pragma unroll
                for (int e = 0; e < P; ++e) qs[i][lane * P + e] = r[e] * scale;
            } else {
                T* row = kc + ((long long)pos * n_kv + g) * HD;
#pragma unroll
                for (int e = 0; e < P; ++e) knew[lane * P + e] = a1_store(row + lane * P + e, r[e]);
            }
        }
    } else {
        for (int t = threadIdx.x; t < G * HD; t += A1_THREADS)
            qs[t / HD][t % HD] = q[(long long)g * G * HD + t] * scale;
    }
    __syncthreads();

    if constexpr (A1Tc<T>::on) {
        a1_tc_run<HD, G>(tl, qs, kg, vg, rstride, kt0, k0, kend, lane, warp, wo, wm, wl);
        if (owns_new) {
            __syncthreads();
            if (warp == 0) a1_tc_new_key<HD, G>(qs, knew, vnew, lane, wo, wm, wl);
        }
    } else {
        a1_fma_run<HD, G, T>(kr, vr, valid, wb, qs, kb, vb, rstride, k0, kend, sub, li, warp,
                             owns_new, knew, vnew, wo, wm, wl);
    }
    __syncthreads();
    // The block's result per (head, dim): out directly, or this block's partial.
    // part: [n_heads][S][HD + 4]: out[HD], max, sum, 2 pad (16-byte rows).
    for (int t = threadIdx.x; t < G * HD; t += A1_THREADS) {
        const int i = t / HD, d = t % HD;
        float M = NEG_INF;
#pragma unroll
        for (int w = 0; w < NW; ++w) M = fmaxf(M, wm[w][i]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float c = exp2f(wm[w][i] - M);  // 0 for a warp without keys
            L = fmaf(wl[w][i], c, L);
            O = fmaf(wo[w][i][d], c, O);
        }
        if (nact == 1) {
            fo[t] = O / L;
        } else {
            float* pp = part + ((long long)(g * G + i) * S + s) * (HD + 4);
            pp[d] = O;
            if (d == 0) {
                pp[HD] = M;
                pp[HD + 1] = L;
            }
        }
    }
    if (nact > 1) {
        // This block's partial is visible before the count; the last block sees all.
        // light = 0: every thread fences (__threadfence: MEMBAR.SC.GPU, what was
        // measured); light = 1: the barrier, then thread 0 alone releases / acquires
        // at gpu scope (fence.acq_rel.gpu is cumulative over what the barrier ordered
        // before it: the grid-sync pattern).
        if (!light) __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (light) asm volatile("fence.acq_rel.gpu;" ::: "memory");
            last_flag = atomicInc(cnt + g, (unsigned)(nact - 1)) == (unsigned)(nact - 1);
            if (light && last_flag) asm volatile("fence.acq_rel.gpu;" ::: "memory");
        }
        __syncthreads();
        if (!last_flag) return;
        if (!light) __threadfence();
        for (int i = warp; i < G; i += NW) {
            const float* ph = part + (long long)(g * G + i) * S * (HD + 4);
            float mv[2], lv[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int si = lane + 32 * r;
                mv[r] = si < nact ? __ldcg(ph + si * (HD + 4) + HD) : NEG_INF;
                lv[r] = si < nact ? __ldcg(ph + si * (HD + 4) + HD + 1) : 0.f;
            }
            float M = fmaxf(mv[0], mv[1]);
#pragma unroll
            for (int x = 16; x > 0; x >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, x));
            float L = 0.f;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int si = lane + 32 * r;
                const float c = si < nact ? exp2f(mv[r] - M) : 0.f;
                if (si < nact) cw[i][si] = c;
                L = fmaf(lv[r], c, L);
            }
#pragma unroll
            for (int x = 16; x > 0; x >>= 1) L += __shfl_xor_sync(0xffffffffu, L, x);
            if (lane == 0) cinv[i] = 1.0f / L;
        }
        __syncthreads();
        for (int t = threadIdx.x; t < G * HD / 4; t += A1_THREADS) {
            const int i = t / (HD / 4), d4 = t % (HD / 4);
            const float* pb = part + (long long)(g * G + i) * S * (HD + 4) + d4 * 4;
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            int si = 0;
            for (; si + 8 <= nact; si += 8) {
                float4 v[8];
#pragma unroll
                for (int r = 0; r < 8; ++r)
                    v[r] = __ldcg(reinterpret_cast<const float4*>(pb + (si + r) * (HD + 4)));
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const float c = cw[i][si + r];
                    acc.x = fmaf(v[r].x, c, acc.x);
                    acc.y = fmaf(v[r].y, c, acc.y);
                    acc.z = fmaf(v[r].z, c, acc.z);
                    acc.w = fmaf(v[r].w, c, acc.w);
                }
            }
            for (; si < nact; ++si) {
                const float4 v = __ldcg(reinterpret_cast<const float4*>(pb + si * (HD + 4)));
                const float c = cw[i][si];
                acc.x = fmaf(v.x, c, acc.x);
                acc.y = fmaf(v.y, c, acc.y);
                acc.z = fmaf(v.z, c, acc.z);
                acc.w = fmaf(v.w, c, acc.w);
            }
            const float iv = cinv[i];
            float* f = fo + i * HD + d4 * 4;
            f[0] = acc.x * iv;
            f[1] = acc.y * iv;
            f[2] = acc.z * iv;
            f[3] = acc.w * iv;
        }
    }
    __syncthreads();
    if (xhl == nullptr) {
        for (int t = threadIdx.x; t < G * HD; t += A1_THREADS)
            out[(long long)g * G * HD + t] = fo[t];
    } else {
        // Head h's HD values are the x preparation's blocks (HD/32)·h ..
        for (int b = warp; b < G * HD / 32; b += NW)
            prep32_store(fo[b * 32 + lane], lane, (long long)g * G * HD / 32 + b, xhl, xs);
    }
}

// Kernel names: attn1_{f16,f32}_g{G}_hd{HD}.
#define A1_KERNEL(HD, G, TN, T)                                                                \
    extern "C" __global__ void __launch_bounds__(A1_THREADS, A1_MINB(G, T))                    \
        attn1_##TN##_g##G##_hd##HD(                                                            \
        const float* q, const float* qkv, const float* bias, const float* qw, const float* kw, \
        const float* cos_t, const float* sin_t, T* kc, T* vc, float* part, unsigned* cnt,      \
        const int* lenp, int len_add, int cap, int n_kv, int interleaved, int min_keys,        \
        int light, float eps, float scale, float* out, unsigned short* xhl, float* xs) {       \
        attn_onepass<HD, G, T>(q, qkv, bias, qw, kw, cos_t, sin_t, kc, vc, part, cnt, lenp,    \
                               len_add, cap, n_kv, interleaved, min_keys, light, eps, scale,   \
                               out, xhl, xs);                                                  \
    }

#define A1_GROUPS(HD, TN, T) \
    A1_KERNEL(HD, 1, TN, T)  \
    A1_KERNEL(HD, 2, TN, T)  \
    A1_KERNEL(HD, 3, TN, T)  \
    A1_KERNEL(HD, 4, TN, T)  \
    A1_KERNEL(HD, 5, TN, T)  \
    A1_KERNEL(HD, 6, TN, T)  \
    A1_KERNEL(HD, 7, TN, T)  \
    A1_KERNEL(HD, 8, TN, T)

A1_GROUPS(128, f16, unsigned short)
A1_GROUPS(128, f32, float)
A1_GROUPS(64, f16, unsigned short)
A1_GROUPS(64, f32, float)
