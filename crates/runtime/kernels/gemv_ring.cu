// The tensor-core GEMV through per-warp shared-memory rings (gemv_mx*_ring*, filled by
// cp.async; gemv_mx*_tma*, by bulk copies) and its timing probes; part of the GEMV
// module after gemv_read_probe.cu.

// Ring variant: the same tiles, fragments and arithmetic, but every warp streams its
// chunks (weights 4 KB + scales + x slice) through a private ring of D shared-memory
// stages with cp.async, D - 1 chunks ahead of the one it computes. The register double
// buffer (gemv_mma.cu) could only have one chunk in flight per warp, and its
// end-of-iteration register moves waited for the next chunk's loads, so every warp
// alternated between waiting and computing. Dynamic shared memory: warps * D * STAGE bytes.

__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
#if FAVLO_W_EVICT_FIRST
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 8, %2;" ::"r"(sa),
                 "l"(gmem), "l"(l2_evict_first_policy()));
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(sa), "l"(gmem));
#endif
}
// A 16-byte piece of a weight chunk (the x slices keep cp_async16): evict-first in L2
// under FAVLO_W_EVICT_FIRST, as the register kernels' ld_stream.
__device__ __forceinline__ void cp_async16_w(void* smem, const void* gmem) {
#if FAVLO_W_EVICT_FIRST
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(sa),
                 "l"(gmem), "l"(l2_evict_first_policy()));
#else
    cp_async16(smem, gmem);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
// Bulk copies (the Hopper copy engine, `cp.async.bulk`) completing on an mbarrier: one
// lane moves a whole stage with four instructions instead of 11 per lane. sm_90 only:
// built for Ada (sm_89) these trap, and the host never launches the bulk-copy (TMA)
// kernels there (`GemvMma` refuses `GemvKernel::Tma` below sm_90).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
#else
    __trap();
#endif
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, unsigned bytes,
                                         unsigned long long* bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    unsigned done;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(smem_u32(bar)), "r"(parity)
            : "memory");
    } while (!done);
#else
    __trap();
#endif
}

template <int FMT>
struct RingStage {
    static constexpr int SB = (FMT == 4) ? 256 : 128;  // scale bytes per tile chunk
    static constexpr int XB = (FMT == 4) ? 8 : 4;      // x blocks per chunk
    static constexpr int BYTES = 4096 + SB + XB * 128 + XB * 4;
};

// MODE (timing probes only, results meaningless unless 0): 1 = no FP4/FP8 decode (raw
// words as A fragments), 2 = decode but no mma, 3 = loads and shared-memory reads only.
// TMA: the stages are filled by bulk copies issued by lane 0 (else cp.async per lane).
// A block computes tiles blockIdx.x, blockIdx.x + gridDim.x, ... (one when the grid has
// a block per tile): a warp's items run on across its tiles, so the ring keeps loading
// the next tile's chunks while this tile is reduced, and a grid of one wave streams the
// whole matrix without the ramp of a new block at every tile.
template <int FMT, int D, int MODE = 0, bool TMA = false>
__device__ __forceinline__ void gemv_ring_body(const unsigned char* __restrict__ wd,
                                               const unsigned char* __restrict__ ws,
                                               const unsigned short* __restrict__ xhl,
                                               const float* __restrict__ xs,
                                               float* __restrict__ y, int rows, int chunks,
                                               const GemvEpi e) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;
    constexpr int SB = RingStage<FMT>::SB;
    constexpr int XB = RingStage<FMT>::XB;
    constexpr int STAGE = RingStage<FMT>::BYTES;
    static_assert(STAGE % 16 == 0, "stage alignment");
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;  // FP4 fragments are value x 2^-14
    extern __shared__ __align__(16) unsigned char ring_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const bool act = (g >> 1) == t;
    const int h = g & 1;
    unsigned char* ring = ring_smem + warp * (D * STAGE);
    const unsigned char* xsrc = reinterpret_cast<const unsigned char*>(xhl);
    // Items per tile of this warp (chunks warp, warp + nwarps, ...), this block's tiles.
    const int mine = warp < chunks ? (chunks - warp + nwarps - 1) / nwarps : 0;
    const int ntiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    const int my_tiles =
        (int)blockIdx.x < ntiles ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int total = mine * my_tiles;
    // Item k of this warp (tile k / mine, chunk warp + (k % mine) * nwarps) into ring
    // slot `slot`.
    __shared__ unsigned long long mbar[16][4];
    if (TMA) {
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < D; ++i) mbar_init(&mbar[warp][i], 1);
#if __CUDA_ARCH__ >= 900
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
        }
        __syncwarp();
    }
    // part 1: weights and scales; 2: the x slice; 3: both.
    auto stage = [&](int k, int slot, int part) {
        const int tile = (int)blockIdx.x + (k / mine) * (int)gridDim.x;
        const int c = warp + (k % mine) * nwarps;
        unsigned char* s = ring + slot * STAGE;
        if (TMA) {
            if (lane == 0) {
#if __CUDA_ARCH__ >= 900
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
                unsigned long long* bar = &mbar[warp][slot];
                mbar_expect_tx(bar, STAGE);
                bulk_g2s(s, wd + ((long long)tile * chunks + c) * 4096, 4096, bar);
                bulk_g2s(s + 4096, ws + ((long long)tile * chunks + c) * SB, SB, bar);
                bulk_g2s(s + 4096 + SB, xsrc + (long long)c * XB * 128, XB * 128, bar);
                bulk_g2s(s + 4096 + SB + XB * 128, xs + c * XB, XB * 4, bar);
            }
            return;
        }
        const long long tc = (long long)tile * chunks + c;
        const unsigned char* src = wd + tc * 4096 + lane * 16;
        if (part & 1) {
#pragma unroll
            for (int p = 0; p < 8; ++p) cp_async16_w(s + p * 512 + lane * 16, src + p * 512);
            if (FMT == 4 || lane < 16) cp_async8(s + 4096 + lane * 8, ws + tc * SB + lane * 8);
        }
        if (!(part & 2)) return;
        const unsigned char* xsl = xsrc + (long long)c * XB * 128;
#pragma unroll
        for (int o = lane * 16; o < XB * 128; o += 512) cp_async16(s + 4096 + SB + o, xsl + o);
        if (lane < XB / 4)
            cp_async16(s + 4096 + SB + XB * 128 + lane * 16, xs + c * XB + lane * 4);
    };
    // The first stages' weights do not depend on the previous kernel: request them
    // before waiting for it (programmatic dependent launch), then their x slices.
    pdl_trigger();  // all blocks started: the next kernel may be scheduled
    if (!TMA) {
#pragma unroll
        for (int k = 0; k < D - 1; ++k)
            if (k < total) stage(k, k, 1);
    }
    pdl_wait();
#pragma unroll
    for (int k = 0; k < D - 1; ++k) {
        if (k < total) stage(k, k, TMA ? 3 : 2);
        if (!TMA) cp_async_commit();
    }
    EpiEarly pre = epi_none();
    if (warp == 0) pre = epi_early(e, y, rows, blockIdx.x);
    int slot = 0, k = 0;
    for (int ti = 0; ti < my_tiles; ++ti) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int kk = 0; kk < mine; ++kk, ++k) {
        // Refill the slot computed in the previous iteration (D - 1 chunks ahead).
        if (k + D - 1 < total) stage(k + D - 1, slot == 0 ? D - 1 : slot - 1, 3);
        if (TMA) {
            mbar_wait(&mbar[warp][slot], (unsigned)(k / D) & 1u);
        } else {
            cp_async_commit();
            cp_async_wait<D - 1>();
            __syncwarp();
        }
        const unsigned char* s = ring + slot * STAGE;
        const uint2 sc = *reinterpret_cast<const uint2*>(s + 4096 + (FMT == 4 ? lane : (lane >> 1)) * 8);
        const unsigned char* xb = s + 4096 + SB;
        const float* xf = reinterpret_cast<const float*>(xb + XB * 128);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            uint4 q[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                q[i] = *reinterpret_cast<const uint4*>(s + (i * 2 + j) * 512 + lane * 16);
            const int bl = FMT == 4 ? 4 * j + t : 2 * j + (t >> 1);
            const float f = xf[bl] * unbias;
            uint4 bx[STEPS / 2];
            const uint4* xp = reinterpret_cast<const uint4*>(
                xb + bl * 128 + h * 64 + (FMT == 8 ? (t & 1) * 32 : 0));
#pragma unroll
            for (int v = 0; v < STEPS / 2; ++v) bx[v] = act ? xp[v] : make_uint4(0u, 0u, 0u, 0u);
            const unsigned* bw = reinterpret_cast<const unsigned*>(bx);
            float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
            if (MODE == 3) {
                d0[0] = __uint_as_float(q[0].x ^ q[1].y ^ q[2].z ^ q[3].w ^ bw[0]);
            } else {
#pragma unroll
            for (int st = 0; st < STEPS; ++st) {
                unsigned a0, a2, a1, a3, e0, e2, e1, e3;
                if (MODE == 1) {
                    const unsigned* r0 = reinterpret_cast<const unsigned*>(&q[0]);
                    const unsigned* r1 = reinterpret_cast<const unsigned*>(&q[1]);
                    const unsigned* r2 = reinterpret_cast<const unsigned*>(&q[2]);
                    const unsigned* r3 = reinterpret_cast<const unsigned*>(&q[3]);
                    a0 = r0[st & 3]; a2 = r0[(st + 1) & 3];
                    a1 = r1[st & 3]; a3 = r1[(st + 1) & 3];
                    e0 = r2[st & 3]; e2 = r2[(st + 1) & 3];
                    e1 = r3[st & 3]; e3 = r3[(st + 1) & 3];
                } else {
                    a_frag<FMT>(q[0], st, a0, a2);
                    a_frag<FMT>(q[1], st, a1, a3);
                    a_frag<FMT>(q[2], st, e0, e2);
                    a_frag<FMT>(q[3], st, e1, e3);
                }
                if (MODE == 2) {
                    d0[st & 3] = __uint_as_float(__float_as_uint(d0[st & 3]) ^ a0 ^ a1 ^ a2 ^ a3 ^ bw[2 * st]);
                    d1[st & 3] = __uint_as_float(__float_as_uint(d1[st & 3]) ^ e0 ^ e1 ^ e2 ^ e3 ^ bw[2 * st + 1]);
                } else {
                    mma16816(d0, a0, a1, a2, a3, bw[2 * st], bw[2 * st + 1]);
                    mma16816(d1, e0, e1, e2, e3, bw[2 * st], bw[2 * st + 1]);
                }
            }
            }
            const unsigned lo = sc.x, hi = sc.y;
            acc[0] = fmaf(d0[0] + d0[1], e8m0_sel((lo >> (8 * j)) & 0xffu) * f, acc[0]);
            acc[1] = fmaf(d0[2] + d0[3], e8m0_sel((lo >> (16 + 8 * j)) & 0xffu) * f, acc[1]);
            acc[2] = fmaf(d1[0] + d1[1], e8m0_sel((hi >> (8 * j)) & 0xffu) * f, acc[2]);
            acc[3] = fmaf(d1[2] + d1[3], e8m0_sel((hi >> (16 + 8 * j)) & 0xffu) * f, acc[3]);
        }
        __syncwarp();  // this slot is refilled at the top of the next iteration
        slot = (slot + 1 == D) ? 0 : slot + 1;
    }
    gemv_finish(acc, y, rows, e, (int)blockIdx.x + ti * (int)gridDim.x, ti & 1, pre);
    }
}

#define GEMV_RING(NAME, FMT, D)                                                              \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_ring_body<FMT, D>(wd, ws, xhl, xs, y, rows, chunks, e);               \
    }
GEMV_RING(gemv_mxfp4_ring2, 4, 2)
GEMV_RING(gemv_mxfp4_ring3, 4, 3)
GEMV_RING(gemv_mxfp4_ring4, 4, 4)
GEMV_RING(gemv_mxfp8_ring2, 8, 2)
GEMV_RING(gemv_mxfp8_ring3, 8, 3)
GEMV_RING(gemv_mxfp8_ring4, 8, 4)

// Timing probes (see MODE above), ring depth 2.
#define GEMV_PROBE(NAME, FMT, MODE)                                                          \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_ring_body<FMT, 2, MODE>(wd, ws, xhl, xs, y, rows, chunks, e);         \
    }
GEMV_PROBE(gemv_mxfp4_probe1, 4, 1)
GEMV_PROBE(gemv_mxfp4_probe2, 4, 2)
GEMV_PROBE(gemv_mxfp4_probe3, 4, 3)
GEMV_PROBE(gemv_mxfp8_probe1, 8, 1)
GEMV_PROBE(gemv_mxfp8_probe2, 8, 2)
GEMV_PROBE(gemv_mxfp8_probe3, 8, 3)

#define GEMV_TMA(NAME, FMT, D, MODE)                                                         \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        gemv_ring_body<FMT, D, MODE, true>(wd, ws, xhl, xs, y, rows, chunks, e);   \
    }
GEMV_TMA(gemv_mxfp4_tma2, 4, 2, 0)
GEMV_TMA(gemv_mxfp4_tma3, 4, 3, 0)
GEMV_TMA(gemv_mxfp4_tma4, 4, 4, 0)
GEMV_TMA(gemv_mxfp8_tma2, 8, 2, 0)
GEMV_TMA(gemv_mxfp8_tma3, 8, 3, 0)
GEMV_TMA(gemv_mxfp8_tma4, 8, 4, 0)
GEMV_TMA(gemv_mxfp4_tmaprobe3, 4, 3, 3)
GEMV_TMA(gemv_mxfp8_tmaprobe3, 8, 3, 3)
