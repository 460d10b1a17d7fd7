// Favlo CUDA kernel: one token sampled from a [n] f32 logits row on the device, so a
// decode step copies back 8 bytes (token id, log-probability) instead of n x 4.
//
// Semantics are those of the host sampler (pipelines/llama/src/sampler.rs), given its
// uniform u in [0, 1): greedy (temperature <= 0 or not finite) = argmax, first id on
// ties, NaN never wins. Otherwise candidates are the logits >= max - 30 T (f32, NaN
// excluded) in the order (logit desc, id asc); top_k (> 0) keeps the first k; weights
// w = exp((l - max) / T) (the quotient rounded in f32, as on the host); Z = sum w over
// those; min_p (> 0) keeps the prefix with w / Z >= min_p / Z (the first always);
// top_p (in (0, 1)) keeps the shortest prefix whose mass reaches top_p Z (the first
// always); the token is the first of the kept prefix whose inclusive cumulative mass
// exceeds u M (M = the kept mass), or the last kept one. The log-probability is
// log_softmax of the unmodified logits at that token. Weights are exp in f32, summed
// exactly in 2^-44 fixed point (u64; vocab <= 2^19), so only a u within ~1e-6 of a CDF
// boundary can choose differently from an f64 reference, and the result is
// deterministic.
//
// Design: no sort. Every "first element of the order where a cumulative count / mass
// reaches a target" is a radix select: a 256-bin histogram (count or fixed-point mass)
// over a linear bin of the logit in [floor, max] (it spreads the values), then 4 passes
// over the bytes of the logit's order-preserving 32-bit key within the chosen bin, then,
// only when several elements share the chosen key, one pass over them in id order,
// which settles ties exactly as the host's (logit desc, id asc) sort does. A prefix of
// the order is kept as a boundary (key, id). The passes run on a grid of blocks, each
// over its own contiguous slice of the row, meeting at grid barriers (below).

#define SMP_INF __int_as_float(0x7f800000)  // NVRTC has no INFINITY macro

__device__ __forceinline__ unsigned smp_key(float v) {
    const unsigned b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct SmpBound {
    int on;
    unsigned key;
    int id;
};

__device__ __forceinline__ bool smp_before(const SmpBound& b, unsigned k, int i) {
    return !b.on || k > b.key || (k == b.key && i <= b.id);
}

struct SmpSet {
    float maxv, temp, floor, lscale;
    int best;
    SmpBound topk, topp;
    double z, cut;  // min_p: keep w / z >= cut (cut < 0: off)
};

__device__ __forceinline__ float smp_w(const SmpSet& s, float l) {
    return expf(__fdiv_rn(__fsub_rn(l, s.maxv), s.temp));
}

// A weight in fixed point (2^44 = 1): exact, order-independent u64 sums.
__device__ __forceinline__ unsigned long long smp_fix(float w) {
    return __float2ull_rn(w * 17592186044416.0f);
}

// Linear bin of a candidate over [floor, max]: non-decreasing in l (first radix level).
__device__ __forceinline__ int smp_lin(const SmpSet& s, float l) {
    if (s.lscale == 0.f) return 0;
    const int b = (int)__fmul_rn(__fsub_rn(l, s.floor), s.lscale);
    return min(255, max(0, b));
}

// Whether element i (logit l, key k) is in the set; its weight in *w.
__device__ __forceinline__ bool smp_in(const SmpSet& s, int i, float l, unsigned k, float* w) {
    if (!(l >= s.floor)) return false;
    if (!smp_before(s.topk, k, i) || !smp_before(s.topp, k, i)) return false;
    *w = smp_w(s, l);
    if (s.cut >= 0.0 && i != s.best && !((double)*w / s.z >= s.cut)) return false;
    return true;
}

// ---------------------------------------------------------------------------------
// The grid: NB blocks (one per multiprocessor at most) each own a contiguous slice of the
// row; every pass over the row is split among them, and the passes meet at a grid
// barrier in `scratch` (all NB blocks are resident: NB <= the multiprocessor count, one
// block each). After a barrier every block reads the same global partials and takes the
// same decisions, so no result is broadcast. One block walking the whole row (~8 passes
// with expf over 152k logits on one multiprocessor) took ~415 us at T = 1.
//
// scratch (u32 words, zero on allocation; `SMP_SCRATCH` in sample.rs):
//   [0] barrier count, [1] barrier generation (only grows),
//   then 8-byte aligned at word 2: per-block partials and the histograms below.

#define SMP_NB 256   // most blocks
#define SMP_BT 512   // threads per block
#define SMP_BW (SMP_BT / 32)
#define SMP_CALLS 3  // selects per sample: top-k, top-p, the draw

struct SmpScratch {
    unsigned bar[2];
    float amax_v[SMP_NB];
    int amax_i[SMP_NB];
    double lse[SMP_NB];
    unsigned long long part[SMP_NB];       // Z
    unsigned long long kept[SMP_NB];       // the kept mass (min-p / top-p)
    unsigned long long tie_m[SMP_CALLS][SMP_NB];
    int tie_last[SMP_CALLS][SMP_NB];
    int tie_found[SMP_CALLS];
    unsigned long long h_m[SMP_CALLS][5][256];
    unsigned h_c[SMP_CALLS][5][256];
    int h_id[SMP_CALLS][5][256];
};

// The scratch words `SMP_SCRATCH` (sample.rs) must hold it.
static_assert(sizeof(SmpScratch) <= 20480 * 4, "sample scratch");

__device__ __forceinline__ void smp_grid_sync(unsigned* bar, unsigned nb, unsigned& gen) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&bar[0], 1u) == nb - 1) {
            atomicExch(&bar[0], 0u);
            __threadfence();
            atomicAdd(&bar[1], 1u);
        } else {
            // Poll with plain acquire loads: read-modify-writes from every block on
            // one word serialize in L2 and made each barrier ~25 us.
            unsigned g;
            do {
                __nanosleep(32);
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                             : "=r"(g)
                             : "l"(&bar[1])
                             : "memory");
            } while (g == gen);
        }
        __threadfence();
    }
    gen += 1;
    __syncthreads();
}

// Sum over a block of W warps (every thread gets it; red holds W values).
template <int W, typename T>
__device__ T smp_block_sum(T v, T* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = 0;
    for (int j = 0; j < W; ++j) t += red[j];
    __syncthreads();
    return t;
}

// (bv, bi) <- (ov, oi) when that comes first: larger value, then smaller id.
__device__ __forceinline__ void smp_arg_merge(float& bv, int& bi, float ov, int oi) {
    if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
    }
}

// The argmax of x[lo..hi) over a block of W warps (first id on ties, NaN never wins;
// (-inf, INT_MAX) for an empty range); every thread gets it.
template <int W>
__device__ void smp_block_argmax(const float* __restrict__ x, int lo, int hi, float& bv,
                                 int& bi, float* red_v, int* red_i) {
    bv = -SMP_INF;
    bi = 0x7fffffff;
    for (int i = lo + (int)threadIdx.x; i < hi; i += W * 32) {
        const float v = x[i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        smp_arg_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o),
                      __shfl_xor_sync(0xffffffffu, bi, o));
    if ((threadIdx.x & 31) == 0) {
        red_v[threadIdx.x >> 5] = bv;
        red_i[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    bv = red_v[0];
    bi = red_i[0];
    for (int j = 1; j < W; ++j) smp_arg_merge(bv, bi, red_v[j], red_i[j]);
    __syncthreads();
}

struct SmpGrid {
    SmpScratch* sc;
    unsigned nb;
    unsigned gen;
    int lo, hi;  // this block's slice of the row
};

// The grid version of the select (see the single-pass description at the top): the same
// levels, each a block histogram over the block's slice added into the call's global
// histogram, a barrier, and the same choice in every block; ties on the full key by id
// across the blocks' slices (in block order) with a second barrier.
__device__ SmpBound smp_gselect(const float* __restrict__ x, const SmpSet& s, bool counting,
                                unsigned long long need, int call, SmpGrid& gd) {
    __shared__ unsigned long long b_m[256];
    __shared__ unsigned b_c[256];
    __shared__ int b_id[256];
    __shared__ int sh_lb, sh_id;
    __shared__ unsigned sh_prefix;
    __shared__ unsigned long long sh_above;
    __shared__ unsigned long long scan_w[SMP_BW];
    __shared__ int found;
    SmpScratch* sc = gd.sc;
    const int tid = threadIdx.x;
    unsigned prefix = 0, pmask = 0;
    int lb = 0;
    if (tid == 0) sh_above = 0;
    for (int level = 0; level < 5; ++level) {
        const int shift = level == 0 ? 0 : 32 - 8 * level;
        for (int b = tid; b < 256; b += SMP_BT) {
            b_m[b] = 0;
            b_c[b] = 0;
            b_id[b] = -1;
        }
        __syncthreads();
        for (int i = gd.lo + tid; i < gd.hi; i += SMP_BT) {
            const float l = x[i];
            const unsigned k = smp_key(l);
            const int li = smp_lin(s, l);
            float w;
            if (level > 0 && ((k & pmask) != prefix || li != lb)) continue;
            if (!smp_in(s, i, l, k, &w)) continue;
            const int bin = level == 0 ? li : (int)((k >> shift) & 255u);
            const unsigned long long v = counting ? 1ull : smp_fix(w);
            if (v) atomicAdd(&b_m[bin], v);
            if (level == 4) {
                atomicAdd(&b_c[bin], 1u);
                atomicMax(&b_id[bin], i);
            }
        }
        __syncthreads();
        for (int b = tid; b < 256; b += SMP_BT) {
            if (b_m[b]) atomicAdd(&sc->h_m[call][level][b], b_m[b]);
            if (level == 4 && b_c[b]) {
                atomicAdd(&sc->h_c[call][level][b], b_c[b]);
                atomicMax(&sc->h_id[call][level][b], b_id[b]);
            }
        }
        smp_grid_sync(sc->bar, gd.nb, gd.gen);
        if (tid == 0) {
            const unsigned long long* hm = sc->h_m[call][level];
            unsigned long long cum = sh_above;
            int chosen = -1, lastb = -1;
            unsigned long long lastm = 0;
            for (int b = 255; b >= 0; --b) {
                const unsigned long long m = __ldcg(hm + b);
                if (m == 0) continue;
                lastb = b;
                lastm = m;
                if (cum + m >= need) {
                    chosen = b;
                    break;
                }
                cum += m;
            }
            if (chosen < 0 && lastb >= 0) {
                chosen = lastb;
                cum -= lastm;
            }
            if (chosen < 0) chosen = 0;  // empty set: cannot happen (the best is in it)
            sh_above = cum;
            if (level == 0) {
                sh_lb = chosen;
            } else {
                sh_prefix = prefix | ((unsigned)chosen << shift);
            }
            if (level == 4) {
                const unsigned c = __ldcg(&sc->h_c[call][level][chosen]);
                sh_id = c == 1 ? __ldcg(&sc->h_id[call][level][chosen]) : -1;
            }
        }
        __syncthreads();
        if (level == 0) {
            lb = sh_lb;
        } else {
            prefix = sh_prefix;
            pmask |= 255u << shift;
        }
    }
    SmpBound r;
    r.on = 1;
    r.key = prefix;
    r.id = sh_id;
    const unsigned long long above = sh_above;
    __syncthreads();  // the shared choice is reused by the next call
    if (r.id >= 0) return r;
    // Ties on the full key, in id order: each block's mass of them (its slice is
    // contiguous), a barrier, then the block where the running mass reaches `need`
    // walks its slice in id order (contiguous chunks per thread + a block scan).
    const int b = blockIdx.x;
    const int chunk = (gd.hi - gd.lo + SMP_BT - 1) / SMP_BT;
    const int lo = min(gd.hi, gd.lo + tid * chunk), hi = min(gd.hi, lo + chunk);
    unsigned long long mine = 0;
    int my_last = -1;
    for (int i = lo; i < hi; ++i) {
        const float l = x[i];
        float w;
        if (smp_key(l) != prefix || !smp_in(s, i, l, prefix, &w)) continue;
        mine += counting ? 1ull : smp_fix(w);
        my_last = i;
    }
    unsigned long long incl = mine;
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, o);
        if ((tid & 31) >= o) incl += t;
    }
    if ((tid & 31) == 31) scan_w[tid >> 5] = incl;
    __syncthreads();
    unsigned long long total = 0;
    for (int j = 0; j < SMP_BW; ++j) total += scan_w[j];
    unsigned long long run = incl - mine;
    for (int j = 0; j < (tid >> 5); ++j) run += scan_w[j];
    int blk_last = my_last;
    for (int o = 16; o > 0; o >>= 1) blk_last = max(blk_last, __shfl_xor_sync(0xffffffffu, blk_last, o));
    if (tid == 0) found = 0x7fffffff;
    __syncthreads();
    if ((tid & 31) == 0 && blk_last >= 0) atomicMax(&sc->tie_last[call][b], blk_last);
    if (tid == 0) sc->tie_m[call][b] = total;
    smp_grid_sync(sc->bar, gd.nb, gd.gen);
    unsigned long long before = above;
    for (int j = 0; j < b; ++j) before += __ldcg(&sc->tie_m[call][j]);
    if (before < need && need <= before + total && my_last >= 0) {
        run += before;
        for (int i = lo; i < hi; ++i) {
            const float l = x[i];
            float w;
            if (smp_key(l) != prefix || !smp_in(s, i, l, prefix, &w)) continue;
            run += counting ? 1ull : smp_fix(w);
            if (run >= need) {
                atomicMin(&found, i);
                break;
            }
        }
    }
    __syncthreads();
    if (tid == 0 && found != 0x7fffffff) sc->tie_found[call] = found;
    smp_grid_sync(sc->bar, gd.nb, gd.gen);
    int id = __ldcg(&sc->tie_found[call]);
    if (id < 0) {
        // The mass never reached `need` (rounding): the last tied element.
        for (unsigned j = 0; j < gd.nb; ++j) id = max(id, __ldcg(&sc->tie_last[call][j]));
    }
    r.id = id;
    return r;
}

// out[0] = token id, out[1] = the bits of its f32 log-probability; out[2..] = scratch.
// Grid: nb blocks of SMP_BT threads, nb <= the multiprocessor count and SMP_NB.
extern "C" __global__ void __launch_bounds__(SMP_BT, 1)
    favlo_sample(const float* __restrict__ x, int n, float temp, int top_k, float top_p,
                 float min_p, double u, unsigned* __restrict__ out) {
    __shared__ float red_v[SMP_BW];
    __shared__ int red_i[SMP_BW];
    __shared__ double red_d[SMP_BW];
    __shared__ unsigned long long red_u[SMP_BW];
    __shared__ unsigned sh_gen;
    SmpScratch* sc = reinterpret_cast<SmpScratch*>(out + 2);
    const int tid = threadIdx.x;
    const unsigned nb = gridDim.x;
    const int b = blockIdx.x;
    SmpGrid gd;
    gd.sc = sc;
    gd.nb = nb;
    const int per = (n + (int)nb - 1) / (int)nb;
    gd.lo = min(n, b * per);
    gd.hi = min(n, gd.lo + per);
    if (tid == 0) sh_gen = atomicAdd(&sc->bar[1], 0u);
    // Reset this launch's histograms and tie slots (grid-stride over the blocks).
    {
        const int gt = b * SMP_BT + tid, gs = (int)nb * SMP_BT;
        unsigned long long* hm = &sc->h_m[0][0][0];
        unsigned* hc = &sc->h_c[0][0][0];
        int* hid = &sc->h_id[0][0][0];
        for (int i = gt; i < SMP_CALLS * 5 * 256; i += gs) {
            hm[i] = 0;
            hc[i] = 0;
            hid[i] = -1;
        }
        for (int i = gt; i < SMP_CALLS * SMP_NB; i += gs) {
            (&sc->tie_m[0][0])[i] = 0;
            (&sc->tie_last[0][0])[i] = -1;
        }
        if (gt < SMP_CALLS) sc->tie_found[gt] = -1;
    }
    __syncthreads();
    gd.gen = sh_gen;
    // 1. argmax (first id on ties, NaN never wins): the block's, then the grid's.
    float bv;
    int bi;
    smp_block_argmax<SMP_BW>(x, gd.lo, gd.hi, bv, bi, red_v, red_i);
    if (tid == 0) {
        sc->amax_v[b] = bv;
        sc->amax_i[b] = bi;
    }
    smp_grid_sync(sc->bar, nb, gd.gen);
    bv = -SMP_INF;
    bi = 0x7fffffff;
    for (unsigned j = 0; j < nb; ++j)
        smp_arg_merge(bv, bi, __ldcg(&sc->amax_v[j]), __ldcg(&sc->amax_i[j]));
    const int best = bi == 0x7fffffff ? 0 : bi;
    const float maxv = bv;
    const bool sampling = temp > 0.f && temp <= 3.0e38f && maxv > -SMP_INF && maxv < SMP_INF;
    SmpSet s;
    s.maxv = maxv;
    s.temp = temp;
    s.floor = __fsub_rn(maxv, __fmul_rn(30.f, temp));
    const float span = __fsub_rn(maxv, s.floor);
    s.lscale = (span > 0.f && span <= 3.0e38f) ? 256.f / span : 0.f;
    s.best = best;
    s.topk.on = 0;
    s.topp.on = 0;
    s.z = 1.0;
    s.cut = -1.0;
    // 2. top_k: the k-th element of the order bounds the set.
    if (sampling && top_k > 0) s.topk = smp_gselect(x, s, true, (unsigned long long)top_k, 0, gd);
    // 3. The log-sum-exp of the unmodified row and Z over the top-k candidates.
    double se = 0.0;
    unsigned long long z = 0;
    for (int i = gd.lo + tid; i < gd.hi; i += SMP_BT) {
        const float l = x[i];
        if (maxv > -SMP_INF) se += (double)expf(l - maxv);
        float w;
        if (sampling && smp_in(s, i, l, smp_key(l), &w)) z += smp_fix(w);
    }
    se = smp_block_sum<SMP_BW>(se, red_d);
    z = smp_block_sum<SMP_BW>(z, red_u);
    if (tid == 0) {
        sc->lse[b] = se;
        sc->part[b] = z;
    }
    smp_grid_sync(sc->bar, nb, gd.gen);
    se = 0.0;
    z = 0;
    for (unsigned j = 0; j < nb; ++j) {
        se += __ldcg(&sc->lse[j]);
        z += __ldcg(&sc->part[j]);
    }
    int tok = best;
    if (sampling) {
        const bool use_min = min_p > 0.f, use_top = top_p > 0.f && top_p < 1.f;
        if (use_min) {
            s.z = (double)z * 0x1p-44;
            s.cut = (double)min_p * (1.0 / s.z);
        }
        // 4. top_p: the shortest prefix whose mass reaches top_p Z.
        if (use_top) {
            const unsigned long long need = (unsigned long long)ceil((double)top_p * (double)z);
            s.topp = smp_gselect(x, s, false, need, 1, gd);
        }
        // 5. The draw over the kept mass.
        unsigned long long m = z;
        if (use_min || use_top) {
            m = 0;
            for (int i = gd.lo + tid; i < gd.hi; i += SMP_BT) {
                const float l = x[i];
                float w;
                if (smp_in(s, i, l, smp_key(l), &w)) m += smp_fix(w);
            }
            m = smp_block_sum<SMP_BW>(m, red_u);
            if (tid == 0) sc->kept[b] = m;
            smp_grid_sync(sc->bar, nb, gd.gen);
            m = 0;
            for (unsigned j = 0; j < nb; ++j) m += __ldcg(&sc->kept[j]);
        }
        const unsigned long long need = (unsigned long long)floor(u * (double)m) + 1ull;
        tok = smp_gselect(x, s, false, need, 2, gd).id;
    }
    if (b == 0 && tid == 0) {
        const double lse = (double)maxv + log(se);
        out[0] = (unsigned)tok;
        out[1] = __float_as_uint((float)((double)x[tok] - lse));
    }
}

// Greedy alone (temperature <= 0 or not finite): one block of 1024 threads, the argmax
// and the log-sum-exp, no barrier or scratch (the grid kernel takes ~4x longer here).
extern "C" __global__ void __launch_bounds__(1024)
    favlo_sample_greedy(const float* __restrict__ x, int n, unsigned* __restrict__ out) {
    __shared__ float red_v[32];
    __shared__ int red_i[32];
    __shared__ double red_d[32];
    float bv;
    int bi;
    smp_block_argmax<32>(x, 0, n, bv, bi, red_v, red_i);
    const int best = bi == 0x7fffffff ? 0 : bi;
    double se = 0.0;
    if (bv > -SMP_INF) {
        for (int i = threadIdx.x; i < n; i += 1024) se += (double)expf(x[i] - bv);
    }
    se = smp_block_sum<32>(se, red_d);
    if (threadIdx.x == 0) {
        const double lse = (double)bv + log(se);
        out[0] = (unsigned)best;
        out[1] = __float_as_uint((float)((double)x[best] - lse));
    }
}
