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
// Design: one block of 1024 threads, no sort. Every "first element of the order where a
// cumulative count / mass reaches a target" is a radix select: a 256-bin histogram
// (count or fixed-point mass, shared-memory u64 atomics) over a linear bin of the logit
// in [floor, max] (it spreads the values, so few atomics collide), then 4 passes over
// the bytes of the logit's order-preserving 32-bit key within the chosen bin, then,
// only when several elements share the chosen key, one pass over them in id order
// (contiguous chunks per thread + a block scan), which settles ties exactly as the
// host's (logit desc, id asc) sort does. A prefix of the order is kept as a boundary
// (key, id). The logits stay in global memory (L2) and are re-read each pass.

#define SMP_T 1024
#define SMP_W (SMP_T / 32)
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

__device__ double smp_sum_d(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int j = 0; j < SMP_W; ++j) t += red[j];
    return t;
}

__device__ unsigned long long smp_sum_u(unsigned long long v, unsigned long long* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    unsigned long long t = 0;
    for (int j = 0; j < SMP_W; ++j) t += red[j];
    return t;
}

// The first element of the set (in order) at which the inclusive cumulative count
// (`counting`) or fixed-point mass reaches `need`; the last element of the set (with
// mass) when none does. Levels: a linear bin of the logit over [floor, max] (spreads
// the values, so few shared-memory atomics collide), then the 4 bytes of the key within
// that bin, then ties by id (skipped when one element has the chosen key). Must be
// called by the whole block.
__device__ SmpBound smp_select(const float* __restrict__ x, int n, const SmpSet& s,
                               bool counting, unsigned long long need) {
    __shared__ unsigned long long h_m[256];
    __shared__ unsigned h_c[256];
    __shared__ int h_id[256];
    __shared__ int sh_lb, sh_id;
    __shared__ unsigned sh_prefix;
    __shared__ unsigned long long sh_above;
    __shared__ unsigned long long scan_w[SMP_W];
    __shared__ int found, last;
    const int tid = threadIdx.x;
    unsigned prefix = 0, pmask = 0;
    int lb = 0;
    if (tid == 0) sh_above = 0;
    for (int level = 0; level < 5; ++level) {
        const int shift = level == 0 ? 0 : 32 - 8 * level;
        for (int b = tid; b < 256; b += SMP_T) {
            h_m[b] = 0;
            h_c[b] = 0;
            h_id[b] = -1;
        }
        __syncthreads();
        for (int i = tid; i < n; i += SMP_T) {
            const float l = x[i];
            const unsigned k = smp_key(l);
            float w;
            if (level > 0 && (k & pmask) != prefix) continue;
            if (!smp_in(s, i, l, k, &w)) continue;
            const int li = smp_lin(s, l);
            if (level > 0 && li != lb) continue;
            const int bin = level == 0 ? li : (int)((k >> shift) & 255u);
            const unsigned long long v = counting ? 1ull : smp_fix(w);
            if (v) atomicAdd(&h_m[bin], v);
            if (level == 4) {
                atomicAdd(&h_c[bin], 1u);
                atomicMax(&h_id[bin], i);
            }
        }
        __syncthreads();
        if (tid == 0) {
            unsigned long long cum = sh_above;
            int chosen = -1, lastb = -1;
            for (int b = 255; b >= 0; --b) {
                if (h_m[b] == 0) continue;
                lastb = b;
                if (cum + h_m[b] >= need) {
                    chosen = b;
                    break;
                }
                cum += h_m[b];
            }
            if (chosen < 0 && lastb >= 0) {
                chosen = lastb;
                cum -= h_m[lastb];
            }
            if (chosen < 0) chosen = 0;  // empty set: cannot happen (the best is in it)
            sh_above = cum;
            if (level == 0) {
                sh_lb = chosen;
            } else {
                sh_prefix = prefix | ((unsigned)chosen << shift);
            }
            if (level == 4) sh_id = h_c[chosen] == 1 ? h_id[chosen] : -1;
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
    if (r.id >= 0) {
        __syncthreads();  // sh_id / sh_above are reused by the next call
        return r;
    }
    // Ties on the full key, in id order: contiguous chunks + an exclusive block scan.
    const int chunk = (n + SMP_T - 1) / SMP_T;
    const int lo = min(n, tid * chunk), hi = min(n, lo + chunk);
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
    if (tid == 0) {
        found = 0x7fffffff;
        last = -1;
    }
    if ((tid & 31) == 31) scan_w[tid >> 5] = incl;
    __syncthreads();
    unsigned long long run = sh_above + incl - mine;
    for (int j = 0; j < (tid >> 5); ++j) run += scan_w[j];
    if (my_last >= 0) {
        atomicMax(&last, my_last);
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
    r.id = found != 0x7fffffff ? found : last;
    __syncthreads();  // `found`/`last` are reused by the next call
    return r;
}

// out[0] = token id, out[1] = the bits of its f32 log-probability.
extern "C" __global__ void __launch_bounds__(SMP_T)
    favlo_sample(const float* __restrict__ x, int n, float temp, int top_k, float top_p,
                 float min_p, double u, unsigned* __restrict__ out) {
    __shared__ float red_v[SMP_W];
    __shared__ int red_i[SMP_W];
    __shared__ double red_d[SMP_W];
    __shared__ unsigned long long red_u[SMP_W];
    const int tid = threadIdx.x;
    // 1. argmax (first id on ties, NaN never wins).
    float bv = -SMP_INF;
    int bi = 0x7fffffff;
    for (int i = tid; i < n; i += SMP_T) {
        const float v = x[i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
    if ((tid & 31) == 0) {
        red_v[tid >> 5] = bv;
        red_i[tid >> 5] = bi;
    }
    __syncthreads();
    bv = red_v[0];
    bi = red_i[0];
    for (int j = 1; j < SMP_W; ++j) {
        if (red_v[j] > bv || (red_v[j] == bv && red_i[j] < bi)) {
            bv = red_v[j];
            bi = red_i[j];
        }
    }
    const int best = bi == 0x7fffffff ? 0 : bi;
    const float maxv = bv;
    // 2. log-sum-exp of the unmodified row.
    double se = 0.0;
    if (maxv > -SMP_INF) {
        for (int i = tid; i < n; i += SMP_T) se += (double)expf(x[i] - maxv);
    }
    se = smp_sum_d(se, red_d);
    int tok = best;
    if (temp > 0.f && temp <= 3.0e38f && maxv > -SMP_INF && maxv < SMP_INF) {
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
        // 3. top_k: the k-th element of the order bounds the set.
        if (top_k > 0) s.topk = smp_select(x, n, s, true, (unsigned long long)top_k);
        // 4. Z over the top-k candidates; min_p's cut.
        unsigned long long z = 0;
        for (int i = tid; i < n; i += SMP_T) {
            const float l = x[i];
            float w;
            if (smp_in(s, i, l, smp_key(l), &w)) z += smp_fix(w);
        }
        z = smp_sum_u(z, red_u);
        const bool use_min = min_p > 0.f, use_top = top_p > 0.f && top_p < 1.f;
        if (use_min) {
            s.z = (double)z * 0x1p-44;
            s.cut = (double)min_p * (1.0 / s.z);
        }
        // 5. top_p: the shortest prefix whose mass reaches top_p Z.
        if (use_top) {
            const unsigned long long need = (unsigned long long)ceil((double)top_p * (double)z);
            s.topp = smp_select(x, n, s, false, need);
        }
        // 6. the draw over the kept mass.
        unsigned long long m = z;
        if (use_min || use_top) {
            m = 0;
            for (int i = tid; i < n; i += SMP_T) {
                const float l = x[i];
                float w;
                if (smp_in(s, i, l, smp_key(l), &w)) m += smp_fix(w);
            }
            m = smp_sum_u(m, red_u);
        }
        const unsigned long long need = (unsigned long long)floor(u * (double)m) + 1ull;
        tok = smp_select(x, n, s, false, need).id;
    }
    if (tid == 0) {
        const double lse = (double)maxv + log(se);
        out[0] = (unsigned)tok;
        out[1] = __float_as_uint((float)((double)x[tok] - lse));
    }
}
