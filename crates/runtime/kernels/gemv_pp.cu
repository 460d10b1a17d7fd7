// The tensor-core GEMV with register ping-pong buffers (gemv_mx*_pp, `GemvKernel::PingPong`)
// and its timing probes; part of the GEMV module after gemv_mma.cu.

// A variant of the register double-buffer kernel (gemv_mma.cu): two named register
// buffers and two chunks per loop trip, so no register moves. There, the end-of-iteration
// moves of the next chunk's registers waited for its loads before the chunk after it was
// requested, so a warp had nothing in flight while it waited; here the chunk after next
// is already requested when a warp waits for the next one.

// The partial sums of one chunk (pieces q, scales sc, x slice xb) into acc. MODE
// (timing probes only, results meaningless unless 0): 1 = raw words as A fragments (no
// decode), 2 = decode but fragments folded by XOR instead of the mma.
template <int FMT, int MODE = 0>
__device__ __forceinline__ void chunk_mma(const uint4 (&q)[8], uint2 sc,
                                          const unsigned char* xb, int t, int h, bool act,
                                          float (&acc)[4]) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;
    constexpr int XB = (FMT == 4) ? 8 : 4;
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;  // FP4 fragments are value x 2^-14
    const float* xf = reinterpret_cast<const float*>(xb + XB * 128);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int bl = FMT == 4 ? 4 * j + t : 2 * j + (t >> 1);
        const float f = xf[bl] * unbias;
        uint4 bx[STEPS / 2];
        const uint4* xp = reinterpret_cast<const uint4*>(
            xb + bl * 128 + h * 64 + (FMT == 8 ? (t & 1) * 32 : 0));
#pragma unroll
        for (int v = 0; v < STEPS / 2; ++v) bx[v] = act ? xp[v] : make_uint4(0u, 0u, 0u, 0u);
        const unsigned* bw = reinterpret_cast<const unsigned*>(bx);
        float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int st = 0; st < STEPS; ++st) {
            unsigned a0, a2, a1, a3, e0, e2, e1, e3;
            if (MODE == 1) {
                const unsigned* r0 = reinterpret_cast<const unsigned*>(&q[0 * 2 + j]);
                const unsigned* r1 = reinterpret_cast<const unsigned*>(&q[1 * 2 + j]);
                const unsigned* r2 = reinterpret_cast<const unsigned*>(&q[2 * 2 + j]);
                const unsigned* r3 = reinterpret_cast<const unsigned*>(&q[3 * 2 + j]);
                a0 = r0[st & 3]; a2 = r0[(st + 1) & 3];
                a1 = r1[st & 3]; a3 = r1[(st + 1) & 3];
                e0 = r2[st & 3]; e2 = r2[(st + 1) & 3];
                e1 = r3[st & 3]; e3 = r3[(st + 1) & 3];
            } else {
                a_frag<FMT>(q[0 * 2 + j], st, a0, a2);
                a_frag<FMT>(q[1 * 2 + j], st, a1, a3);
                a_frag<FMT>(q[2 * 2 + j], st, e0, e2);
                a_frag<FMT>(q[3 * 2 + j], st, e1, e3);
            }
            if (MODE == 2) {
                d0[st & 3] = __uint_as_float(__float_as_uint(d0[st & 3]) ^ a0 ^ a1 ^ a2 ^ a3 ^ bw[2 * st]);
                d1[st & 3] = __uint_as_float(__float_as_uint(d1[st & 3]) ^ e0 ^ e1 ^ e2 ^ e3 ^ bw[2 * st + 1]);
            } else {
                mma16816(d0, a0, a1, a2, a3, bw[2 * st], bw[2 * st + 1]);
                mma16816(d1, e0, e1, e2, e3, bw[2 * st], bw[2 * st + 1]);
            }
        }
        const unsigned lo = sc.x, hi = sc.y;
        acc[0] = fmaf(d0[0] + d0[1], e8m0_sel((lo >> (8 * j)) & 0xffu) * f, acc[0]);
        acc[1] = fmaf(d0[2] + d0[3], e8m0_sel((lo >> (16 + 8 * j)) & 0xffu) * f, acc[1]);
        acc[2] = fmaf(d1[0] + d1[1], e8m0_sel((hi >> (8 * j)) & 0xffu) * f, acc[2]);
        acc[3] = fmaf(d1[2] + d1[3], e8m0_sel((hi >> (16 + 8 * j)) & 0xffu) * f, acc[3]);
    }
}

// Timing probe of the ping-pong loop (MODE 3 below): every loaded word and one word of
// the chunk's x slice are folded into acc with two instructions per word, so the loads
// stay live but nothing is decoded or multiplied.
__device__ __forceinline__ void chunk_touch(const uint4 (&q)[8], uint2 sc,
                                            const unsigned char* xb, float (&acc)[4]) {
    unsigned s = sc.x ^ sc.y ^ reinterpret_cast<const unsigned*>(xb)[threadIdx.x & 31];
#pragma unroll
    for (int p = 0; p < 8; ++p) s ^= q[p].x ^ q[p].y ^ q[p].z ^ q[p].w;
    acc[0] += __int_as_float(s & 0x007fffffu);
}

// PD > 0: when a chunk's loads are issued, the chunk PD loop steps later is prefetched
// into L2 (one 128-byte line per lane covers its 4 KB), so more of the warp's stream is
// in flight without holding registers. MODE: `chunk_mma`'s timing probes, and 3 = loads
// only (`chunk_touch`). PRE (timing probe of the decode step): which warps request their
// first chunk before the PDL wait: 0 all (the kernel), 1 none, 2 the even warps.
template <int FMT, int PD = 0, int MODE = 0, int PRE = 0>
__device__ __forceinline__ void gemv_pp_body(const unsigned char* __restrict__ wd,
                                             const unsigned char* __restrict__ ws,
                                             const unsigned short* __restrict__ xhl,
                                             const float* __restrict__ xs,
                                             float* __restrict__ y, int rows, int chunks,
                                             const GemvEpi e) {
    constexpr int XB = (FMT == 4) ? 8 : 4;
    constexpr int SB = (FMT == 4) ? 256 : 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x;
    const bool act = (g >> 1) == t;
    const int h = g & 1;
    __shared__ __align__(16) unsigned char xst[16][2][XB * 128 + XB * 4];
    const unsigned char* dbase = wd + (long long)tile * chunks * 4096 + lane * 16;
    const unsigned char* sbase =
        ws + (long long)tile * chunks * SB + (FMT == 4 ? lane : (lane >> 1)) * 8;
    auto stage_x = [&](int c, int buf) {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(xhl) + (long long)c * XB * 128;
#pragma unroll
        for (int o = lane * 16; o < XB * 128; o += 512) cp_async16(&xst[warp][buf][o], src + o);
        if (lane < XB / 4)
            cp_async16(&xst[warp][buf][XB * 128 + lane * 16], xs + c * XB + lane * 4);
    };
    const unsigned char* tbase = wd + (long long)tile * chunks * 4096 + lane * 128;
    auto prefetch = [&](int c) {
        if (c < chunks)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(tbase + (long long)c * 4096));
    };
    auto load = [&](int c, uint4 (&q)[8], uint2& sc) {
        if (PD > 0) prefetch(c + PD * nwarps);
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = ld_stream(dbase + (long long)c * 4096 + p * 512);
        sc = ld_scales(sbase + (long long)c * SB);
    };
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint4 qa[8], qb[8];
    uint2 sa = make_uint2(0u, 0u), sb = make_uint2(0u, 0u);
    int c = warp;
    // The first chunk's weights do not depend on the previous kernel: request them
    // before waiting for it (programmatic dependent launch).
    pdl_trigger();  // all blocks started: the next kernel may be scheduled
    if (PD > 0) {
#pragma unroll
        for (int k = 1; k < PD; ++k) prefetch(c + k * nwarps);
    }
    if (c < chunks && (PRE == 0 || (PRE == 2 && (warp & 1) == 0))) load(c, qa, sa);
    pdl_wait();
    if (c < chunks && (PRE == 1 || (PRE == 2 && (warp & 1) == 1))) load(c, qa, sa);
    if (c < chunks) stage_x(c, 0);
    cp_async_commit();
    EpiEarly pre = epi_none();
    if (warp == 0) pre = epi_early(e, y, rows, blockIdx.x);
    for (; c < chunks; c += 2 * nwarps) {
        const int c1 = c + nwarps, c2 = c + 2 * nwarps;
        if (c1 < chunks) {
            stage_x(c1, 1);
            load(c1, qb, sb);
        }
        cp_async_commit();
        cp_async_wait1();
        __syncwarp();
        if (MODE == 3) chunk_touch(qa, sa, xst[warp][0], acc);
        else chunk_mma<FMT, MODE>(qa, sa, xst[warp][0], t, h, act, acc);
        __syncwarp();
        if (c1 >= chunks) break;
        if (c2 < chunks) {
            stage_x(c2, 0);
            load(c2, qa, sa);
        }
        cp_async_commit();
        cp_async_wait1();
        __syncwarp();
        if (MODE == 3) chunk_touch(qb, sb, xst[warp][1], acc);
        else chunk_mma<FMT, MODE>(qb, sb, xst[warp][1], t, h, act, acc);
        __syncwarp();
    }
    gemv_finish(acc, y, rows, e, blockIdx.x, 0, pre);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp4_pp(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_pp_body<4>(wd, ws, xhl, xs, y, rows, chunks, e);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp8_pp(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_pp_body<8>(wd, ws, xhl, xs, y, rows, chunks, e);
}

#define GEMV_PP_PF(NAME, FMT, PD)                                                            \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_pp_body<FMT, PD>(wd, ws, xhl, xs, y, rows, chunks, e);                \
    }
GEMV_PP_PF(gemv_mxfp4_pp_pf2, 4, 2)
GEMV_PP_PF(gemv_mxfp4_pp_pf3, 4, 3)
GEMV_PP_PF(gemv_mxfp8_pp_pf2, 8, 2)
GEMV_PP_PF(gemv_mxfp8_pp_pf3, 8, 3)

// Timing probes, results meaningless: the ping-pong loop without decode (1), without
// mma (2), with loads only (3).
#define GEMV_PP_PROBE(NAME, FMT, MODE)                                                       \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_pp_body<FMT, 0, MODE>(wd, ws, xhl, xs, y, rows, chunks, e);                    \
    }
GEMV_PP_PROBE(gemv_mxfp4_pp_probe1, 4, 1)
GEMV_PP_PROBE(gemv_mxfp4_pp_probe2, 4, 2)
GEMV_PP_PROBE(gemv_mxfp4_pp_probe3, 4, 3)
GEMV_PP_PROBE(gemv_mxfp8_pp_probe1, 8, 1)
GEMV_PP_PROBE(gemv_mxfp8_pp_probe2, 8, 2)
GEMV_PP_PROBE(gemv_mxfp8_pp_probe3, 8, 3)

// Timing probes of the decode step, results exact: the ping-pong kernel with its first
// chunk requested after the PDL wait by every warp (late) or by the odd warps (half).
#define GEMV_PP_PRE(NAME, FMT, PRE)                                                          \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_pp_body<FMT, 0, 0, PRE>(wd, ws, xhl, xs, y, rows, chunks, e);                  \
    }
GEMV_PP_PRE(gemv_mxfp4_pp_late, 4, 1)
GEMV_PP_PRE(gemv_mxfp4_pp_half, 4, 2)
GEMV_PP_PRE(gemv_mxfp8_pp_late, 8, 1)
GEMV_PP_PRE(gemv_mxfp8_pp_half, 8, 2)
