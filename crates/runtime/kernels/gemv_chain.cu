// Favlo CUDA kernels: a chain of dependent MX GEMVs in one launch (experiment).
//
// Stage s computes y = s_prev * (W_s x_s) over N x N matrices, where x_s is the
// RMSNorm-style preparation of stage s-1's rows (the norm producer/consumer epilogues
// of gemv_common.cuh: stage s-1 writes x_s without 1/rms and its partial sums of squares,
// stage s applies 1/rms to its rows). The same arithmetic as launching the ping-pong
// GEMV once per stage with those epilogues, so the results are bit-identical; what
// changes is the boundary between stages: instead of a kernel exit and a launch, every
// block meets the others at a grid barrier, and each warp has already requested its
// first chunk of the next stage's weights (which depend on nothing) while it computed
// its last chunk of this one. The whole grid must be resident (one wave; the host
// checks it).

// A grid barrier over a counter that only grows (launches go on from the value the
// last one left, `base`): every block adds one, then waits until the counter reaches
// `target` = base + (barriers so far) x gridDim.x (wrapping compare).
__device__ __forceinline__ void chain_barrier(unsigned* bar, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // this block's rows, x preparation and partials
        atomicAdd(bar, 1u);
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
        } while ((int)(v - target) < 0);
    }
    __syncthreads();
}

// One launch, `stages` GEMVs: wd[s] / ws[s] the tiled planes of stage s (all of one
// shape, rows = chunks * values per chunk), x preparations xhl[s & 1] / xs[s & 1] in
// (stage 0's prepared by the caller), partial sums ss[s & 1] out, nw the norm weight,
// bar the barrier counter (at `base` when the launch starts).
template <int FMT>
__device__ __forceinline__ void gemv_chain_body(const unsigned long long* __restrict__ wds,
                                                const unsigned long long* __restrict__ wss,
                                                int stages, unsigned short* xhl0, float* xs0,
                                                unsigned short* xhl1, float* xs1, float* ss0,
                                                float* ss1, const float* __restrict__ nw,
                                                float* __restrict__ y, int rows, int chunks,
                                                unsigned* bar, unsigned base, float eps) {
    constexpr int XB = (FMT == 4) ? 8 : 4;
    constexpr int SB = (FMT == 4) ? 256 : 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x;
    const bool act = (g >> 1) == t;
    const int h = g & 1;
    __shared__ __align__(16) unsigned char xst[16][2][XB * 128 + XB * 4];
    uint4 qa[8], qb[8];
    uint2 sa = make_uint2(0u, 0u), sb = make_uint2(0u, 0u);
    auto load = [&](int s, int c, uint4 (&q)[8], uint2& sc) {
        const unsigned char* d = reinterpret_cast<const unsigned char*>(wds[s]) +
                                 ((long long)tile * chunks + c) * 4096 + lane * 16;
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = ld_stream(d + p * 512);
        const unsigned char* sp = reinterpret_cast<const unsigned char*>(wss[s]) +
                                  ((long long)tile * chunks + c) * SB +
                                  (FMT == 4 ? lane : (lane >> 1)) * 8;
        sc = __ldg(reinterpret_cast<const uint2*>(sp));
    };
    if (warp < chunks) load(0, warp, qa, sa);
    for (int s = 0; s < stages; ++s) {
        const unsigned short* xhl = (s & 1) ? xhl1 : xhl0;
        const float* xsv = (s & 1) ? xs1 : xs0;
        auto stage_x = [&](int c, int buf) {
            const unsigned char* src =
                reinterpret_cast<const unsigned char*>(xhl) + (long long)c * XB * 128;
#pragma unroll
            for (int o = lane * 16; o < XB * 128; o += 512) cp_async16(&xst[warp][buf][o], src + o);
            if (lane < XB / 4)
                cp_async16(&xst[warp][buf][XB * 128 + lane * 16], xsv + c * XB + lane * 4);
        };
        const bool more = s + 1 < stages;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        int c = warp;
        if (c < chunks) stage_x(c, 0);
        cp_async_commit();
        for (; c < chunks; c += 2 * nwarps) {
            const int c1 = c + nwarps, c2 = c + 2 * nwarps;
            if (c1 < chunks) {
                stage_x(c1, 1);
                load(s, c1, qb, sb);
            }
            cp_async_commit();
            cp_async_wait1();
            __syncwarp();
            chunk_mma<FMT>(qa, sa, xst[warp][0], t, h, act, acc);
            __syncwarp();
            if (c1 >= chunks) break;
            if (c2 < chunks) {
                stage_x(c2, 0);
                load(s, c2, qa, sa);
            } else if (more && warp < chunks) {
                load(s + 1, warp, qa, sa);  // qa is free: the next stage's first chunk
            }
            cp_async_commit();
            cp_async_wait1();
            __syncwarp();
            chunk_mma<FMT>(qb, sb, xst[warp][1], t, h, act, acc);
            __syncwarp();
        }
        // A warp whose last chunk was in qa requests the next stage's first one now.
        if (more && warp < chunks && ((chunks - 1 - warp) / nwarps) % 2 == 0) load(s + 1, warp, qa, sa);
        GemvEpi e = {};
        e.ss_in = s > 0 ? ((s & 1) ? ss0 : ss1) : nullptr;
        e.ss_n = rows / 32;
        e.dim = (float)rows;
        e.eps = eps;
        e.nw = nw;
        e.xhl = (s & 1) ? xhl0 : xhl1;
        e.xs = (s & 1) ? xs0 : xs1;
        e.ss_out = (s & 1) ? ss1 : ss0;
        gemv_finish(acc, y, rows, e, tile, s & 1);
        if (more) chain_barrier(bar, base + (unsigned)(s + 1) * gridDim.x);
    }
}

#define GEMV_CHAIN(NAME, FMT)                                                                \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned long long* __restrict__ wds, const unsigned long long* __restrict__ wss, \
        int stages, unsigned short* xhl0, float* xs0, unsigned short* xhl1, float* xs1,     \
        float* ss0, float* ss1, const float* __restrict__ nw, float* __restrict__ y,        \
        int rows, int chunks, unsigned* bar, unsigned base, float eps) {                    \
        gemv_chain_body<FMT>(wds, wss, stages, xhl0, xs0, xhl1, xs1, ss0, ss1, nw, y, rows, \
                             chunks, bar, base, eps);                                             \
    }
GEMV_CHAIN(gemv_mxfp4_chain, 4)
GEMV_CHAIN(gemv_mxfp8_chain, 8)
