// Favlo CUDA kernels: attention decode in one launch, one thread-block cluster per kv
// head merging through distributed shared memory (Hopper and later; part of the
// attention module after attention.cu, whose row types and length helpers it uses).
//
// The two-pass attention (attention.cu) spends a second launch and a round trip through
// L2 on its combine; the one-pass kernel (attention_onepass.cu) spends fences, a
// counter and a serial merge by the last block. Here the CS blocks of a cluster share a
// kv head: block c takes the rounds of 64 keys c, c + CS, c + 2 CS, ... (8 warps of 8
// keys, a row over 16 lanes as in the split kernel: the half-warps take alternate
// keys), runs an online softmax across its rounds, merges its 16 half-warps (shuffles,
// then shared memory), and leaves (max, sum, out[HD]) per query head in its own shared
// memory. After a cluster barrier every warp of the cluster reads one 32-dim slice of
// one head from all CS blocks' shared memory (`mapa` + `ld.shared::cluster`), merges it
// and writes it (f32, or the o GEMV's x preparation); a second barrier keeps each
// block's shared memory alive until its peers have read it. No partials buffer, no
// counter, no fence; the grid (CS, n_kv) does not depend on the cache's capacity.

#define CL_WARPS 8
#define CL_KEYS (CL_WARPS * KEYS_PER_WARP)  // keys per block per round

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ unsigned cl_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
}

// The f32 at `local` (this block's shared memory) in the shared memory of block `rank`
// of the cluster.
__device__ __forceinline__ float cl_load(const float* local, unsigned rank) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
    return v;
}

// PREP: write the output into the next GEMV's x preparation (xhl, xs) instead of out.
template <int CS, int G, typename T, bool PREP>
__device__ __forceinline__ void attn_cluster(const float* __restrict__ q,
                                             const T* __restrict__ kc,
                                             const T* __restrict__ vc, float* __restrict__ out,
                                             unsigned short* __restrict__ xhl,
                                             float* __restrict__ xs,
                                             const int* __restrict__ lenp, int len_add, int cap,
                                             int n_kv, float scale) {
    constexpr int HD = 128;
    constexpr int P = HD / 16;
    constexpr int NEG = 0xff800000;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int half = lane >> 4, hl = lane & 15;
    const int c = (int)cl_rank(), g = blockIdx.y;
    // Block c's result per head: out[HD], max, sum (read by the whole cluster).
    __shared__ __align__(16) float res[G][HD + 2];
    __shared__ float sm[CL_WARPS][G], sl[CL_WARPS][G];
    __shared__ RowV<P> so[CL_WARPS][G][16];
    pdl_trigger();
    {
        // While the kernels before finish: this warp's first-round rows into L2 (a hint;
        // see attn_split).
        const int guess = min(*(volatile const int*)lenp + len_add, cap);
        const int j = c * CL_KEYS + warp * KEYS_PER_WARP + (lane & 7);
        if (lane < 16 && j < guess) {
            const T* row = ((lane & 8) ? vc : kc) + ((long long)j * n_kv + g) * HD;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row),
                         "r"((unsigned)(HD * sizeof(T)))
                         : "memory");
        }
    }
    pdl_wait();  // q, the cache row and *lenp come from earlier kernels
    const int len = attn_len(lenp, len_add, cap);
    float m[G], l[G];
    RowV<P> o[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = __int_as_float(NEG);
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < P; ++e) o[i].v[e] = 0.f;
    }
    RowV<P> qv[G];
#pragma unroll 1
    for (int base = c * CL_KEYS; base < len; base += CS * CL_KEYS) {
        // Half-warp h of warp w takes keys j0 + 2 u + h, u < KEYS_PER_HALF.
        const int j0 = base + warp * KEYS_PER_WARP + half;
        Raw<T, P> kr[KEYS_PER_HALF], vr[KEYS_PER_HALF];
#pragma unroll
        for (int u = 0; u < KEYS_PER_HALF; ++u) {
            const int j = min(j0 + 2 * u, len - 1);
            const long long off = ((long long)j * n_kv + g) * HD + hl * P;
            kr[u].load(kc + off);
            vr[u].load(vc + off);
        }
        if (base == c * CL_KEYS) {
#pragma unroll
            for (int i = 0; i < G; ++i) {
                Raw<float, P> r;
                r.load(q + (g * G + i) * HD + hl * P);
                r.widen(qv[i]);
#pragma unroll
                for (int e = 0; e < P; ++e) qv[i].v[e] *= scale;
            }
        }
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
                for (int i = 0; i < G; ++i)
                    sc[i][u] += __shfl_xor_sync(0xffffffffu, sc[i][u], x);
        if (j0 < len) {  // half-warp uniform
#pragma unroll
            for (int i = 0; i < G; ++i) {
                float mn = m[i];
#pragma unroll
                for (int u = 0; u < KEYS_PER_HALF; ++u)
                    if (j0 + 2 * u < len) mn = fmaxf(mn, sc[i][u]);
                const float cf = expf(m[i] - mn);  // 0 on the first round (m = -inf)
                l[i] *= cf;
#pragma unroll
                for (int e = 0; e < P; ++e) o[i].v[e] *= cf;
                m[i] = mn;
            }
#pragma unroll
            for (int u = 0; u < KEYS_PER_HALF; ++u) {
                RowV<P> v;
                vr[u].widen(v);
#pragma unroll
                for (int i = 0; i < G; ++i) {
                    const float p = (j0 + 2 * u < len) ? expf(sc[i][u] - m[i]) : 0.f;
                    l[i] += p;
#pragma unroll
                    for (int e = 0; e < P; ++e) o[i].v[e] = fmaf(p, v.v[e], o[i].v[e]);
                }
            }
        }
    }
    // The two half-warps of each warp hold the same dims for different keys: merge them
    // by shuffles (an empty half has m = -inf and weighs 0).
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[i], 16);
        const float lo = __shfl_xor_sync(0xffffffffu, l[i], 16);
        const float mx = fmaxf(m[i], mo);
        const float ca = mx == __int_as_float(NEG) ? 0.f : expf(m[i] - mx);
        const float cb = mx == __int_as_float(NEG) ? 0.f : expf(mo - mx);
        l[i] = fmaf(l[i], ca, lo * cb);
#pragma unroll
        for (int e = 0; e < P; ++e) {
            const float ov = __shfl_xor_sync(0xffffffffu, o[i].v[e], 16);
            o[i].v[e] = fmaf(o[i].v[e], ca, ov * cb);
        }
        m[i] = mx;
    }
    if (half == 0) {
#pragma unroll
        for (int i = 0; i < G; ++i) {
            if (hl == 0) {
                sm[warp][i] = m[i];
                sl[warp][i] = l[i];
            }
            so[warp][i][hl] = o[i];
        }
    }
    __syncthreads();
    // The block's warps merged into res: thread t takes head t / 32's dims 4 (t % 32)...
    for (int x = threadIdx.x; x < G * (HD / 4); x += blockDim.x) {
        const int i = x / (HD / 4), d4 = (x % (HD / 4)) * 4;
        float mx = __int_as_float(NEG);
#pragma unroll
        for (int w = 0; w < CL_WARPS; ++w) mx = fmaxf(mx, sm[w][i]);
        float L = 0.f, O[4] = {0.f, 0.f, 0.f, 0.f};
        if (mx != __int_as_float(NEG)) {
#pragma unroll
            for (int w = 0; w < CL_WARPS; ++w) {
                const float cf = expf(sm[w][i] - mx);
                L = fmaf(sl[w][i], cf, L);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    O[e] = fmaf(so[w][i][(d4 + e) / P].v[(d4 + e) % P], cf, O[e]);
            }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) res[i][d4 + e] = O[e];
        if (d4 == 0) {
            res[i][HD] = mx;
            res[i][HD + 1] = L;
        }
    }
    cl_sync();  // every block's res is written
    // Warp w of block c merges slice (c * CL_WARPS + w) of the G * HD / 32 slices: head
    // i, dims 32 b + lane, across the CS blocks.
    for (int sl_ = c * CL_WARPS + warp; sl_ < G * (HD / 32); sl_ += CS * CL_WARPS) {
        const int i = sl_ / (HD / 32), b = sl_ % (HD / 32), d = 32 * b + lane;
        float mb[CS], ob[CS];
#pragma unroll
        for (int r = 0; r < CS; ++r) {
            mb[r] = cl_load(&res[i][HD], (unsigned)r);
            ob[r] = cl_load(&res[i][d], (unsigned)r);
        }
        float mx = __int_as_float(NEG);
#pragma unroll
        for (int r = 0; r < CS; ++r) mx = fmaxf(mx, mb[r]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int r = 0; r < CS; ++r) {
            const float cf = mb[r] == __int_as_float(NEG) ? 0.f : expf(mb[r] - mx);
            L = fmaf(cl_load(&res[i][HD + 1], (unsigned)r), cf, L);
            O = fmaf(ob[r], cf, O);
        }
        const float v = O / L;
        const int h = g * G + i;
        if (PREP) {
            prep32_store(v, lane, (long long)h * (HD / 32) + b, xhl, xs);
        } else {
            out[h * HD + d] = v;
        }
    }
    cl_sync();  // no block leaves while its peers may still read its res
}

// Kernel names: attn_cluster{CS}_{f16,f32}_g{G} (f32 out) and ..._prep (the o GEMV's x
// preparation); grid (CS, n_kv), 256 threads, cluster (CS, 1, 1). CS 16 needs the
// non-portable cluster size allowed on the function.
#define CL_KERNEL(CS, G, TN, T)                                                               \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(256)              \
        attn_cluster##CS##_##TN##_g##G(const float* q, const T* k, const T* v, float* out,    \
                                       const int* lenp, int len_add, int cap, int n_kv,       \
                                       float scale) {                                          \
        attn_cluster<CS, G, T, false>(q, k, v, out, nullptr, nullptr, lenp, len_add, cap,     \
                                      n_kv, scale);                                           \
    }                                                                                         \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(256)              \
        attn_cluster##CS##_##TN##_g##G##_prep(const float* q, const T* k, const T* v,         \
                                              unsigned short* xhl, float* xs,                 \
                                              const int* lenp, int len_add, int cap,          \
                                              int n_kv, float scale) {                         \
        attn_cluster<CS, G, T, true>(q, k, v, nullptr, xhl, xs, lenp, len_add, cap, n_kv,     \
                                     scale);                                                  \
    }
#define CL_GROUPS(CS, TN, T) \
    CL_KERNEL(CS, 1, TN, T)  \
    CL_KERNEL(CS, 2, TN, T)  \
    CL_KERNEL(CS, 3, TN, T)  \
    CL_KERNEL(CS, 4, TN, T)  \
    CL_KERNEL(CS, 5, TN, T)  \
    CL_KERNEL(CS, 6, TN, T)  \
    CL_KERNEL(CS, 7, TN, T)  \
    CL_KERNEL(CS, 8, TN, T)
CL_GROUPS(8, f16, unsigned short)
CL_GROUPS(8, f32, float)
CL_GROUPS(16, f16, unsigned short)
CL_GROUPS(16, f32, float)

#endif
