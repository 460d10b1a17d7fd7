// Favlo CUDA kernels: causal prefill attention over the contiguous KV cache, and the
// row-batched steps around it for a prefill chunk of t tokens (prep32.cuh prepended).
//
// Attention (flash-attention style): t query tokens at positions n_past .. n_past+t-1
// against keys 0 .. n_past+token of the cache k, v [capacity, n_kv, HD] (f16 bits or
// f32); q f32 rows (token stride ldq) of [n_heads][HD], out f32 rows (stride ldo).
// Block (row tile, kv head g) takes 64 query rows r of the t·G rows of kv head g's G
// query heads (r = token·G + head-in-group, so GQA shares each K/V tile among the
// group), 16 rows per warp. (Blocks of 8 warps, sharing each tile among twice the rows,
// measured 3–11% slower on a Qwen3-8B layer: docs/CUDA.md.) Key tiles of 32 are staged in shared memory as f16 (rows
// padded by 16 bytes: conflict-free fragment loads); S = Q·Kᵀ and O += P·V run on
// `mma.sync.m16n8k16` f16 × f16 → f32 (K fragments by `ldmatrix`), with an online
// softmax in f32 between them, in base 2: q is scaled by scale·log2(e) before the split,
// so the exponentials are one `ex2.approx` each (relative error ~2^-22, below the ~22
// bits the split keeps); O is rescaled only when a row's running max moved. An f16
// cache's next tile is copied (`cp.async`) during this one's math. Precision: q·scale and p are split into f16 hi + lo (~22 bits, two mma
// each); an f32 cache is split the same way (a third mma, hi·lo), so the f32 path keeps
// ~f32 accuracy and the f16 path is exact in k and v. Query rows past t·G compute a
// clamped row and are not stored; every row sees key 0, so its max is finite after the
// first tile.

#define AP_BK 32
#define AP_NEG_INF __int_as_float(0xff800000)  // NVRTC has no INFINITY macro
#define AP_ROWS 64

__device__ __forceinline__ void ap_split(float x0, float x1, unsigned& hi, unsigned& lo) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
    float h0, h1;
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
        : "=f"(h0), "=f"(h1) : "r"(hi));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - h1), "f"(x0 - h0));
}

__device__ __forceinline__ void ap_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (approximate: relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float ap_ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void ap_ldsm4(const unsigned short* p, unsigned& r0, unsigned& r1,
                                         unsigned& r2, unsigned& r3) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

__device__ __forceinline__ void ap_ldsm_t4(const unsigned short* p, unsigned& r0, unsigned& r1,
                                           unsigned& r2, unsigned& r3) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

// One key tile (keys kb0 .. kb0+31, zero at and past kend) of kv head g of an f16 cache
// into shared memory, copied asynchronously (`cp.async`, 16-byte pieces): the caller
// waits for the group before reading.
template <int HD>
__device__ __forceinline__ void ap_load_tile_async(const unsigned short* __restrict__ kc,
                                                   const unsigned short* __restrict__ vc,
                                                   unsigned short* ks, unsigned short* vs,
                                                   int kb0, int kend, int nkv, int g) {
    constexpr int PER_ROW = HD / 8;
    for (int i = threadIdx.x; i < AP_BK * PER_ROW; i += blockDim.x) {
        const int r = i / PER_ROW, c = (i % PER_ROW) * 8;
        const int key = kb0 + r;
        const int bytes = key < kend ? 16 : 0;
        const long long off = ((long long)min(key, kend - 1) * nkv + g) * HD + c;
        const unsigned dk = (unsigned)__cvta_generic_to_shared(ks + r * (HD + 8) + c);
        const unsigned dv = (unsigned)__cvta_generic_to_shared(vs + r * (HD + 8) + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dk), "l"(kc + off),
                     "r"(bytes));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dv), "l"(vc + off),
                     "r"(bytes));
    }
    asm volatile("cp.async.commit_group;");
}

__device__ __forceinline__ void ap_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// f32 cache: each value split into f16 hi (plane 0) + lo (plane 1).
template <int HD>
__device__ __forceinline__ void ap_load_tile(const float* __restrict__ kc,
                                             const float* __restrict__ vc,
                                             unsigned short (*ks)[AP_BK * (HD + 8)],
                                             unsigned short (*vs)[AP_BK * (HD + 8)], int kb0,
                                             int kend, int nkv, int g) {
    constexpr int PER_ROW = HD / 4;
    for (int i = threadIdx.x; i < AP_BK * PER_ROW; i += blockDim.x) {
        const int r = i / PER_ROW, c = (i % PER_ROW) * 4;
        const int key = kb0 + r;
        float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
        if (key < kend) {
            const long long off = ((long long)key * nkv + g) * HD + c;
            kv = __ldg(reinterpret_cast<const float4*>(kc + off));
            vv = __ldg(reinterpret_cast<const float4*>(vc + off));
        }
        uint2 kh, kl, vh, vl;
        ap_split(kv.x, kv.y, kh.x, kl.x);
        ap_split(kv.z, kv.w, kh.y, kl.y);
        ap_split(vv.x, vv.y, vh.x, vl.x);
        ap_split(vv.z, vv.w, vh.y, vl.y);
        const int o = r * (HD + 8) + c;
        *reinterpret_cast<uint2*>(&ks[0][o]) = kh;
        *reinterpret_cast<uint2*>(&ks[1][o]) = kl;
        *reinterpret_cast<uint2*>(&vs[0][o]) = vh;
        *reinterpret_cast<uint2*>(&vs[1][o]) = vl;
    }
}

// LO: q·scale and p as f16 hi + lo (two mma each, ~22 bits: the exact prefill); without
// it, hi only (one mma each, 11 bits: the FP8 prefill, whose activations are E4M3).
template <int HD, typename T, bool LO>
__device__ __forceinline__ void attn_prefill(const float* __restrict__ q, int ldq,
                                             const T* __restrict__ kc, const T* __restrict__ vc,
                                             float* __restrict__ out, int ldo, int t, int n_past,
                                             int nh, int nkv, float scale) {
    constexpr bool SPLIT = sizeof(T) == 4;
    constexpr int NP = SPLIT ? 2 : 1;
    constexpr int KS = HD / 16;  // k steps over the head (S = Q·Kᵀ)
    constexpr int NB = HD / 8;   // n blocks of the output (O = P·V)
    constexpr int LD = HD + 8;
    // An f16 cache's tiles are double-buffered (the next tile's copy runs during this
    // tile's math); an f32 cache's are converted on the way in, one buffer.
    constexpr int NBUF = SPLIT ? 1 : 2;
    __shared__ __align__(16) unsigned short ks_all[NBUF][NP][AP_BK * LD];
    __shared__ __align__(16) unsigned short vs_all[NBUF][NP][AP_BK * LD];
    pdl_trigger();
    pdl_wait();  // q and the cache rows come from earlier kernels
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int kvh = blockIdx.y;
    const int G = nh / nkv;
    const int nrows = t * G;
    // Row tiles in reverse: the longest (latest tokens, most keys) start first, so the
    // causal grid's short blocks fill the tail instead of its long ones.
    const int r0 = (gridDim.x - 1 - blockIdx.x) * AP_ROWS;
    const int rlast = min(r0 + AP_ROWS, nrows) - 1;
    const int kend = n_past + rlast / G + 1;  // keys this block needs
    const int ra = r0 + warp * 16 + g, rb = ra + 8;
    const int toka = min(ra / G, t - 1), tokb = min(rb / G, t - 1);
    const int heada = kvh * G + ra % G, headb = kvh * G + rb % G;
    const int lima = n_past + toka, limb = n_past + tokb;  // last key each row sees

    unsigned qh[KS][4], ql[KS][4];
    {
        const float qs = scale * 1.4426950408889634f;  // scores in base 2
        const float* qa = q + (long long)toka * ldq + heada * HD + 2 * tq;
        const float* qb = q + (long long)tokb * ldq + headb * HD + 2 * tq;
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const float2 a0 = *reinterpret_cast<const float2*>(qa + s * 16);
            const float2 a1 = *reinterpret_cast<const float2*>(qb + s * 16);
            const float2 a2 = *reinterpret_cast<const float2*>(qa + s * 16 + 8);
            const float2 a3 = *reinterpret_cast<const float2*>(qb + s * 16 + 8);
            ap_split(a0.x * qs, a0.y * qs, qh[s][0], ql[s][0]);
            ap_split(a1.x * qs, a1.y * qs, qh[s][1], ql[s][1]);
            ap_split(a2.x * qs, a2.y * qs, qh[s][2], ql[s][2]);
            ap_split(a3.x * qs, a3.y * qs, qh[s][3], ql[s][3]);
        }
    }
    float o[NB][4];
#pragma unroll
    for (int n = 0; n < NB; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float ma = AP_NEG_INF, mb = AP_NEG_INF, la = 0.f, lb = 0.f;
    // The warp's own last key: tiles past it are skipped (block-uniform barriers stay).
    const int wlast = n_past + min(min(r0 + warp * 16 + 15, nrows - 1) / G, t - 1);
    const int wfirst = n_past + min((r0 + warp * 16) / G, t - 1);  // its first row's last key
    const int ntiles = (kend + AP_BK - 1) / AP_BK;
    if constexpr (!SPLIT) ap_load_tile_async<HD>(kc, vc, ks_all[0][0], vs_all[0][0], 0, kend, nkv, kvh);
    for (int kt = 0; kt < ntiles; ++kt) {
        const int kb0 = kt * AP_BK;
        unsigned short(*ks)[AP_BK * LD] = ks_all[kt % NBUF];
        unsigned short(*vs)[AP_BK * LD] = vs_all[kt % NBUF];
        if constexpr (SPLIT) {
            __syncthreads();  // the previous tile's reads are done
            ap_load_tile<HD>(kc, vc, ks, vs, kb0, kend, nkv, kvh);
        } else {
            ap_async_wait_all();  // this tile's copy (the only group in flight)
        }
        __syncthreads();  // this tile visible to all; the previous tile's reads done
        if constexpr (!SPLIT) {
            if (kt + 1 < ntiles)
                ap_load_tile_async<HD>(kc, vc, ks_all[(kt + 1) % NBUF][0],
                                       vs_all[(kt + 1) % NBUF][0], kb0 + AP_BK, kend, nkv, kvh);
        }
        if (kb0 > wlast) continue;  // warp-uniform
        float s[AP_BK / 8][4];
        // K fragments of two k steps per ldmatrix: lane l addresses key row l % 8 of the
        // n block and head columns 8 (l / 8) of the step pair.
        const int krow = lane & 7, kcol = (lane >> 3) * 8;
#pragma unroll
        for (int nb = 0; nb < AP_BK / 8; ++nb) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
            for (int st = 0; st < KS; st += 2) {
                const int off = (nb * 8 + krow) * LD + st * 16 + kcol;
                unsigned b0, b1, b2, b3;
                ap_ldsm4(&ks[0][off], b0, b1, b2, b3);
                ap_mma(s[nb], qh[st], b0, b1);
                if (LO) ap_mma(s[nb], ql[st], b0, b1);
                ap_mma(s[nb], qh[st + 1], b2, b3);
                if (LO) ap_mma(s[nb], ql[st + 1], b2, b3);
                if (SPLIT) {
                    ap_ldsm4(&ks[NP - 1][off], b0, b1, b2, b3);
                    ap_mma(s[nb], qh[st], b0, b1);
                    ap_mma(s[nb], qh[st + 1], b2, b3);
                }
            }
        }
        // Tiles wholly below the diagonal for every row of the warp need no mask.
        const bool below = kb0 + AP_BK - 1 <= wfirst;
        float mxa = AP_NEG_INF, mxb = AP_NEG_INF;
#pragma unroll
        for (int nb = 0; nb < AP_BK / 8; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = kb0 + nb * 8 + 2 * tq + e;
                if (!below) {
                    if (key > lima) s[nb][e] = AP_NEG_INF;
                    if (key > limb) s[nb][2 + e] = AP_NEG_INF;
                }
                mxa = fmaxf(mxa, s[nb][e]);
                mxb = fmaxf(mxb, s[nb][2 + e]);
            }
        }
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, x));
            mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, x));
        }
        const float mna = fmaxf(ma, mxa), mnb = fmaxf(mb, mxb);
        // A max that did not move rescales by exactly 1: skip it unless some row's moved.
        if (__any_sync(0xffffffffu, mna != ma || mnb != mb)) {
            const float aa = ap_ex2(ma - mna), ab = ap_ex2(mb - mnb);
            la *= aa;
            lb *= ab;
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                o[n][0] *= aa;
                o[n][1] *= aa;
                o[n][2] *= ab;
                o[n][3] *= ab;
            }
        }
        ma = mna;
        mb = mnb;
        // P as the A operand of P·V: the C layout of two key blocks is one k step's A.
        unsigned ph[AP_BK / 16][4], pl[AP_BK / 16][4];
#pragma unroll
        for (int nb = 0; nb < AP_BK / 8; ++nb) {
            const float pa0 = ap_ex2(s[nb][0] - ma), pa1 = ap_ex2(s[nb][1] - ma);
            const float pb0 = ap_ex2(s[nb][2] - mb), pb1 = ap_ex2(s[nb][3] - mb);
            la += pa0 + pa1;
            lb += pb0 + pb1;
            const int kk = nb >> 1, hi = (nb & 1) * 2;
            ap_split(pa0, pa1, ph[kk][hi], pl[kk][hi]);
            ap_split(pb0, pb1, ph[kk][hi + 1], pl[kk][hi + 1]);
        }
        const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8;
#pragma unroll
        for (int kk = 0; kk < AP_BK / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                const int off = (kk * 16 + lrow) * LD + np * 16 + lcol;
                unsigned b0, b1, b2, b3;
                ap_ldsm_t4(&vs[0][off], b0, b1, b2, b3);
                ap_mma(o[2 * np], ph[kk], b0, b1);
                if (LO) ap_mma(o[2 * np], pl[kk], b0, b1);
                ap_mma(o[2 * np + 1], ph[kk], b2, b3);
                if (LO) ap_mma(o[2 * np + 1], pl[kk], b2, b3);
                if (SPLIT) {
                    ap_ldsm_t4(&vs[NP - 1][off], b0, b1, b2, b3);
                    ap_mma(o[2 * np], ph[kk], b0, b1);
                    ap_mma(o[2 * np + 1], ph[kk], b2, b3);
                }
            }
        }
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, x);
        lb += __shfl_xor_sync(0xffffffffu, lb, x);
    }
    const float ia = 1.0f / la, ib = 1.0f / lb;
    if (ra < nrows) {
        float* p = out + (long long)toka * ldo + heada * HD + 2 * tq;
#pragma unroll
        for (int n = 0; n < NB; ++n)
            *reinterpret_cast<float2*>(p + n * 8) = make_float2(o[n][0] * ia, o[n][1] * ia);
    }
    if (rb < nrows) {
        float* p = out + (long long)tokb * ldo + headb * HD + 2 * tq;
#pragma unroll
        for (int n = 0; n < NB; ++n)
            *reinterpret_cast<float2*>(p + n * 8) = make_float2(o[n][2] * ib, o[n][3] * ib);
    }
}

#define ATTN_PREFILL(HD)                                                                       \
    extern "C" __global__ void __launch_bounds__(128) attn_prefill_f16_hd##HD(                 \
        const float* q, int ldq, const unsigned short* kc, const unsigned short* vc,           \
        float* out, int ldo, int t, int n_past, int nh, int nkv, float scale) {                \
        attn_prefill<HD, unsigned short, true>(q, ldq, kc, vc, out, ldo, t, n_past, nh, nkv,   \
                                               scale);                                         \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_prefill_f16h_hd##HD(                \
        const float* q, int ldq, const unsigned short* kc, const unsigned short* vc,           \
        float* out, int ldo, int t, int n_past, int nh, int nkv, float scale) {                \
        attn_prefill<HD, unsigned short, false>(q, ldq, kc, vc, out, ldo, t, n_past, nh, nkv,  \
                                                scale);                                        \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_prefill_f32_hd##HD(                 \
        const float* q, int ldq, const float* kc, const float* vc, float* out, int ldo, int t, \
        int n_past, int nh, int nkv, float scale) {                                            \
        attn_prefill<HD, float, true>(q, ldq, kc, vc, out, ldo, t, n_past, nh, nkv, scale);    \
    }

ATTN_PREFILL(64)
ATTN_PREFILL(128)

// ---- Row-batched steps of a prefill chunk -------------------------------------------

__device__ __forceinline__ unsigned short ap_f2h(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ void ap_store(unsigned short* p, float v) { *p = ap_f2h(v); }
__device__ __forceinline__ void ap_store(float* p, float v) { *p = v; }

// rope_store.cu's bias + RoPE + KV store for t tokens: grid (ceil(heads / 8), t), 256
// threads, one warp per (token, head), lane l holding values V·l .. V·l + V − 1 (V = HD /
// 32); token i (row i of qkv, stride ldqkv) is at position n_past + i; q goes to row i
// of q_out (stride ldq). With qw / kw (Qwen3; both or neither), every q and k head is
// first RMS-normalized over its HD values (weight qw or kw, epsilon eps), as decode.cu's
// qk_norm_rope_store does for one token. The NeoX partner of value d (d ± HD/2) sits in
// lane l ^ 16, the interleaved one (d ^ 1) in the same lane: no shared memory, no block
// barrier (a block per (token, head) of HD threads was latency-bound: 61 µs for 1024
// Qwen3-8B tokens).
template <int HD, typename T>
__device__ __forceinline__ void rows_bias_rope_store(
    const float* __restrict__ qkv, int ldqkv, const float* __restrict__ bias,
    const float* __restrict__ qw, const float* __restrict__ kw, float eps,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t, int n_past,
    float* __restrict__ q_out, int ldq, T* __restrict__ kc, T* __restrict__ vc, int nh, int nkv,
    int interleaved) {
    constexpr int V = HD / 32;
    constexpr int half = HD / 2;
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31;
    const int head = blockIdx.x * 8 + (threadIdx.x >> 5), tok = blockIdx.y;
    if (head >= nh + 2 * nkv) return;  // warp-uniform
    const int pos = n_past + tok, d0 = lane * V;
    const float* src = qkv + (long long)tok * ldqkv + head * HD + d0;
    float x[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
        x[v] = src[v];
        if (bias != nullptr) x[v] += bias[head * HD + d0 + v];
    }
    if (head >= nh + nkv) {
        T* dst = vc + ((long long)pos * nkv + (head - nh - nkv)) * HD + d0;
#pragma unroll
        for (int v = 0; v < V; ++v) ap_store(dst + v, x[v]);
        return;
    }
    if (qw != nullptr) {
        float ss = 0.f;
#pragma unroll
        for (int v = 0; v < V; ++v) ss = fmaf(x[v], x[v], ss);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = 1.0f / sqrtf(ss / (float)HD + eps);
        const float* w = (head < nh ? qw : kw) + d0;
#pragma unroll
        for (int v = 0; v < V; ++v) x[v] = x[v] * inv * w[v];
    }
    float r[V];
    if (interleaved) {
#pragma unroll
        for (int v = 0; v < V; v += 2) {
            const int i = (d0 + v) >> 1;
            const float c = cos_t[(long long)pos * half + i], s = sin_t[(long long)pos * half + i];
            r[v] = x[v] * c - x[v + 1] * s;
            r[v + 1] = x[v] * s + x[v + 1] * c;
        }
    } else {
        const bool first = lane < 16;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float p = __shfl_xor_sync(0xffffffffu, x[v], 16);
            const int i = first ? d0 + v : d0 + v - half;
            const float c = cos_t[(long long)pos * half + i], s = sin_t[(long long)pos * half + i];
            r[v] = first ? x[v] * c - p * s : p * s + x[v] * c;
        }
    }
    if (head < nh) {
        float* dst = q_out + (long long)tok * ldq + head * HD + d0;
#pragma unroll
        for (int v = 0; v < V; ++v) dst[v] = r[v];
    } else {
        T* dst = kc + ((long long)pos * nkv + (head - nh)) * HD + d0;
#pragma unroll
        for (int v = 0; v < V; ++v) ap_store(dst + v, r[v]);
    }
}

#define ROWS_ROPE(HD)                                                                         \
    extern "C" __global__ void __launch_bounds__(256) rows_bias_rope_store_f16_hd##HD(         \
        const float* qkv, int ldqkv, const float* bias, const float* qw, const float* kw,     \
        float eps, const float* cos_t, const float* sin_t, int n_past, float* q_out, int ldq, \
        unsigned short* kc, unsigned short* vc, int nh, int nkv, int interleaved) {           \
        rows_bias_rope_store<HD, unsigned short>(qkv, ldqkv, bias, qw, kw, eps, cos_t, sin_t, \
                                                 n_past, q_out, ldq, kc, vc, nh, nkv,         \
                                                 interleaved);                                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256) rows_bias_rope_store_f32_hd##HD(         \
        const float* qkv, int ldqkv, const float* bias, const float* qw, const float* kw,     \
        float eps, const float* cos_t, const float* sin_t, int n_past, float* q_out, int ldq, \
        float* kc, float* vc, int nh, int nkv, int interleaved) {                             \
        rows_bias_rope_store<HD, float>(qkv, ldqkv, bias, qw, kw, eps, cos_t, sin_t, n_past,  \
                                        q_out, ldq, kc, vc, nh, nkv, interleaved);            \
    }

ROWS_ROPE(64)
ROWS_ROPE(128)

// Block sum over 256 threads.
__device__ __forceinline__ float ap_block_sum(float v, float* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) s += red[w];
    return s;
}

// 1 / sqrt(mean(x²) + eps) of one row of dim values, over a block of 256 threads.
__device__ __forceinline__ float ap_row_inv_rms(const float* __restrict__ xr, int dim, float eps,
                                                float* red) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += 256) ss = fmaf(xr[i], xr[i], ss);
    ss = ap_block_sum(ss, red);
    return 1.0f / sqrtf(ss / (float)dim + eps);
}

// RMSNorm of t rows (dim values, a multiple of 32, row stride ldx) straight into the
// GEMV's x preparation: row r fills prepared blocks r·pcols/32 .. (r+1)·pcols/32, the
// blocks past dim with zeros. Grid t, 256 threads.
extern "C" __global__ void __launch_bounds__(256) rows_rms_norm_prep(
    const float* __restrict__ x, int ldx, const float* __restrict__ w, float eps, int dim,
    int pcols, unsigned short* __restrict__ xhl, float* __restrict__ xs) {
    __shared__ float red[8];
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* xr = x + (long long)blockIdx.x * ldx;
    const float inv = ap_row_inv_rms(xr, dim, eps, red);
    const int nb = pcols / 32;
    for (int b = warp; b < nb; b += 8) {
        const int i = b * 32 + lane;
        const float v = i < dim ? xr[i] * inv * w[i] : 0.f;
        prep32_store(v, lane, (long long)blockIdx.x * nb + b, xhl, xs);
    }
}

// SwiGLU over t rows of fused gate|up (row stride ldgu; gate n values then up n values)
// straight into the x preparation (pcols values per row, zeros past n). Grid t.
extern "C" __global__ void __launch_bounds__(256) rows_swiglu_prep(
    const float* __restrict__ gu, int ldgu, int n, int pcols, unsigned short* __restrict__ xhl,
    float* __restrict__ xs) {
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* r = gu + (long long)blockIdx.x * ldgu;
    const int nb = pcols / 32;
    for (int b = warp; b < nb; b += 8) {
        const int i = b * 32 + lane;
        float v = 0.f;
        if (i < n) {
            const float g = r[i];
            v = g / (1.0f + expf(-g)) * r[n + i];
        }
        prep32_store(v, lane, (long long)blockIdx.x * nb + b, xhl, xs);
    }
}

// t rows of `cols` values (stride ldx) into the x preparation (pcols per row, zeros past
// cols). Grid t.
extern "C" __global__ void __launch_bounds__(256) rows_prep(const float* __restrict__ x, int ldx,
                                                            int cols, int pcols,
                                                            unsigned short* __restrict__ xhl,
                                                            float* __restrict__ xs) {
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* r = x + (long long)blockIdx.x * ldx;
    const int nb = pcols / 32;
    for (int b = warp; b < nb; b += 8) {
        const int i = b * 32 + lane;
        prep32_store(i < cols ? r[i] : 0.f, lane, (long long)blockIdx.x * nb + b, xhl, xs);
    }
}

// The FP8 GEMM's row scale of this block's row (`gemm_row_scale`'s rule: R = 2^floor(
// log2(max |v|)), 1 for a zero or non-finite max) from each thread's max of the |v| bits,
// so the GEMM's quantization can skip its own pass over the row. 256 threads; `redm` 8
// words of shared memory; thread 0 writes *r.
__device__ __forceinline__ void ap_row_scale_store(unsigned amax, unsigned* redm, float* r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((threadIdx.x & 31) == 0) redm[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (int w = 1; w < 8; ++w) amax = max(amax, redm[w]);
        const unsigned e = amax & 0x7f800000u;
        *r = (e == 0u || e == 0x7f800000u) ? 1.0f : __uint_as_float(e);
    }
}

// RMSNorm of t rows (row stride ldx, dim values) as f32 rows (stride ldy): the input of
// the FP8 GEMM's activation quantization, and with rs its row scales (rs[row]). Grid t,
// 256 threads.
extern "C" __global__ void __launch_bounds__(256) rows_rms_norm_f32(
    const float* __restrict__ x, int ldx, const float* __restrict__ w, float eps, int dim,
    float* __restrict__ y, int ldy, float* __restrict__ rs) {
    __shared__ float red[8];
    __shared__ unsigned redm[8];
    pdl_trigger();
    pdl_wait();
    const float* xr = x + (long long)blockIdx.x * ldx;
    const float inv = ap_row_inv_rms(xr, dim, eps, red);
    float* yr = y + (long long)blockIdx.x * ldy;
    unsigned amax = 0u;
    for (int i = threadIdx.x; i < dim; i += 256) {
        const float v = xr[i] * inv * w[i];
        yr[i] = v;
        amax = max(amax, __float_as_uint(v) & 0x7fffffffu);
    }
    if (rs) ap_row_scale_store(amax, redm, rs + blockIdx.x);  // block-uniform
}

// silu(gate)·up over t rows of fused gate|up (row stride ldgu; gate n values then up n
// values) as f32 rows of n values (stride ldy), and with rs their row scales; the FP8
// prompt path's silu (silu_fp8.cuh), as the SwiGLU GEMM's. Grid t, 256 threads.
extern "C" __global__ void __launch_bounds__(256) rows_swiglu_f32(
    const float* __restrict__ gu, int ldgu, int n, float* __restrict__ y, int ldy,
    float* __restrict__ rs) {
    __shared__ unsigned redm[8];
    pdl_trigger();
    pdl_wait();
    const float* r = gu + (long long)blockIdx.x * ldgu;
    float* yr = y + (long long)blockIdx.x * ldy;
    unsigned amax = 0u;
    for (int i = threadIdx.x; i < n; i += 256) {
        const float g = r[i];
        const float v = silu_fp8(g) * r[n + i];
        yr[i] = v;
        amax = max(amax, __float_as_uint(v) & 0x7fffffffu);
    }
    if (rs) ap_row_scale_store(amax, redm, rs + blockIdx.x);  // block-uniform
}
