// The prefill GEMM's grouped consumer loop (`gm_group_steps`, two temporaries, one
// promotion per 128-k stage) with no loads and no epilogue, built up element by element
// to see what each costs the tensor cores: the bare loop with constant factors, the
// stage's factors read from shared memory, the ring's full/empty mbarriers (polling or
// sleeping) with a producer thread that only arrives, other placements of the waits and
// factor reads, and the kernel's own `gm_group_steps`. 384 threads per block as the
// kernel (producer warpgroup with setmaxnreg), one block per multiprocessor, ~20 ms per
// launch; "% of the peak at that clock" as in wgmma_ceiling.cu.
//
// With FILL_ONLY=1 it runs instead the loops beside the copy engine's fills (`fill_probe`,
// `w3_probe`): whether the fills slow the tensor cores, how fast they land when every
// multiprocessor fills at once, and the same for a block of three consumer warpgroups.
//
// Build and run (CUDA 12.3+ for sm_90a; on an H100 or H200), from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/gemm_loop_probe \
//       tools/cuda/gemm_loop_probe.cu && /tmp/gemm_loop_probe && FILL_ONLY=1 /tmp/gemm_loop_probe
// Figures (H100, H200, 2026-12-06): docs/CUDA-JOURNAL.md, "Session 33" and "Session 34".
#include "probe_timing.cuh"
// The GEMM module, as NVRTC compiles it (src/cuda/gemm.rs).
// clang-format off
#include "../../crates/runtime/kernels/silu_fp8.cuh"
#include "../../crates/runtime/kernels/gemm_common.cuh"
#include "../../crates/runtime/kernels/gemm_epilogue.cuh"
#include "../../crates/runtime/kernels/gemm_mx.cu"
// clang-format on

// BAR 1: the consumers wait on `full` and release `empty` per stage, and the producer
// thread waits on `empty` before re-arming `full` (no copies); BAR 2 (`fill_probe`): the
// consumers never wait and count their finished stages in `prog` (one count per warpgroup);
// HINT: the waits sleep (suspend hint);
// SCALES: each stage's two factors read from its scales and C (else constants).
// SCALES 2: the call's factors loaded from global memory (ws, xc) as it starts; 3: loaded
// one call ahead (pf); 4: constant factors and three dummy shared-memory loads per stage.
// 5: both factors precomputed in the stage (a float pair per thread), one 8-byte load.
// WAITALL: the call's four full waits all at its start. DLY: a spin of DLY cycles just
// before each stage's issue (POS 0) or just before each promotion (POS 1).
__device__ float g_sink;
__device__ __forceinline__ void spin(int cycles) {
    const long long t = clock64();
    while (clock64() - t < cycles) {
    }
}
template <int BAR, int HINT, int SCALES, int WAITALL = 0, int DLY = 0, int POS = 0>
__device__ __forceinline__ void steps(float* acc, float* ta, float* tb, u8* ring, u64* full,
                                      u64* empty, int kb, int c, int r0, int lane,
                                      const u8* __restrict__ ws = nullptr,
                                      const float* __restrict__ xc = nullptr,
                                      float* pf = nullptr, volatile u32* prog = nullptr) {
    constexpr int NS = 5, NST = 4;
    const u32 ring0 = gm_smem(ring);
    float f0[2], f1[2];
    const int s0 = kb % NS;
    const u32 ph0 = (u32)(kb / NS) & 1u;
    auto slot = [&](int st) -> int { return s0 + st >= NS ? s0 + st - NS : s0 + st; };
    auto phase = [&](int st) -> u32 { return s0 + st >= NS ? ph0 ^ 1u : ph0; };
    float g0[4], g1[4];
    if (SCALES == 2 || SCALES == 3) {
        const int kq = SCALES == 2 ? kb : kb + 4;
#pragma unroll
        for (int st = 0; st < 4; ++st) {
            const int k = (kq + st) & 31;
            const float cq = xc[k * 4];
            const float a = gm_e8m0(ws[k * 512 + r0 * 4]) * cq;
            const float b = gm_e8m0(ws[k * 512 + (r0 + 8) * 4]) * cq;
            if (SCALES == 2) {
                g0[st] = a;
                g1[st] = b;
            } else {
                g0[st] = pf[st];
                g1[st] = pf[4 + st];
                pf[st] = a;
                pf[4 + st] = b;
            }
        }
    }
    if (BAR == 1 && WAITALL) {
#pragma unroll
        for (int st = 0; st < 4; ++st) gm_bar_wait<HINT>(&full[slot(st)], phase(st));
    }
    float sink = 0.f;
    auto scales = [&](int st) {
        const int s = slot(st);
        if (BAR == 1 && !WAITALL) gm_bar_wait<HINT>(&full[s], phase(st));
        if (SCALES == 2 || SCALES == 3) {
            f0[st & 1] = g0[st];
            f1[st & 1] = g1[st];
        } else if (SCALES == 4) {
            const u8* p = ring + s * GM_STAGE_BYTES;
            sink += *reinterpret_cast<const float*>(p + GM_C_OFF) + (float)p[GM_SCALE_OFF + r0 * 4] +
                    (float)p[GM_SCALE_OFF + (r0 + 8) * 4];
            f0[st & 1] = 1.f;
            f1[st & 1] = 1.f;
        } else if (SCALES == 5) {
            const u8* p = ring + s * GM_STAGE_BYTES;
            const int local = r0 - 64 * c;
            const float2 fv = *reinterpret_cast<const float2*>(
                p + GM_SCALE_OFF + 8 * (32 * c + 8 * (local >> 4) + (local & 15)));
            f0[st & 1] = fv.x;
            f1[st & 1] = fv.y;
        } else if (SCALES) {
            const u8* p = ring + s * GM_STAGE_BYTES;
            const float cq = *reinterpret_cast<const float*>(p + GM_C_OFF);
            f0[st & 1] = gm_e8m0(p[GM_SCALE_OFF + r0 * 4]) * cq;
            f1[st & 1] = gm_e8m0(p[GM_SCALE_OFF + (r0 + 8) * 4]) * cq;
        } else {
            f0[st & 1] = 1.f;
            f1[st & 1] = 1.f;
        }
    };
    const u64 da0 = gm_desc<0>(ring0 + 8192 * c), db0 = gm_desc<0>(ring0 + GM_TILE_BYTES);
    auto issue = [&](float* d, int st) {
        const u64 off = (u64)(slot(st) * (GM_STAGE_BYTES >> 4));
        if (DLY && POS == 0) spin(DLY);
        gm_wgmma_stage<0, 1>(d, da0 + off, db0 + off);
    };
    scales(0);
    issue(ta, 0);
#pragma unroll
    for (int i = 0; i < NST; ++i) {
        float* cur = (i & 1) ? tb : ta;
        float* nxt = (i & 1) ? ta : tb;
        if (i + 1 < NST) {
            scales(i + 1);
            issue(nxt, i + 1);
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        } else {
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        }
        if (BAR == 1) {
            __syncwarp();
            if (lane == 0) gm_bar_arrive(&empty[slot(i)]);
        } else if (BAR == 2 && (threadIdx.x & 127) == 0) {
            prog[c] = (u32)(kb + i + 1);  // stages this warpgroup is done with
        }
        if (DLY && POS == 1) spin(DLY);
        gm_promote(acc, cur, f0[i & 1], f1[i & 1]);
    }
    if (SCALES == 4 && sink == -1.f) g_sink = sink;
}

// Every probe's shared memory: `bytes` of finite E4M3 codes (|v| < 1), then in each of
// `stages` stages of `stage_bytes` the `scale_words` words at `scale_off` set to
// `scale_word` (E8M0 bytes of 1.0, or a probe's precomputed factors) and the float at
// `c_off` to 1. Ends with a block barrier.
__device__ void probe_ring_init(u8* ring, int bytes, int stages, int stage_bytes, int scale_off,
                                int c_off, int scale_words, u32 scale_word) {
    for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x)
        reinterpret_cast<u32*>(ring)[i] = (i * 2654435761u) & 0x37373737u;
    __syncthreads();
    for (int i = threadIdx.x; i < stages * scale_words; i += blockDim.x) {
        u8* st = ring + (i / scale_words) * stage_bytes;
        reinterpret_cast<u32*>(st + scale_off)[i % scale_words] = scale_word;
        if (i % scale_words == 0) reinterpret_cast<float*>(st + c_off)[0] = 1.f;
    }
    __syncthreads();
}

// Every probe's end: each consumer thread stores the sum of its accumulators (so no
// wgmma is dead code) and thread 128 (warpgroup 1) its block's cycles since t0.
__device__ __forceinline__ void probe_finish(const float* acc, float* out, long long* clk,
                                             long long t0) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 128) clk[blockIdx.x] = clock64() - t0;
}

// REAL: the kernel's own gm_group_steps (which always sleeps in its waits).
template <int BAR, int HINT, int SCALES, int REAL, int WAITALL = 0, int DLY = 0, int POS = 0>
__global__ void __launch_bounds__(384, 1) ring_probe(int stages, float* out, long long* clk,
                                                     const u8* __restrict__ ws,
                                                     const float* __restrict__ xc) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[5], empty[5];
    const long long t0 = clock64();
    // Scale bytes of 1.0 (E8M0 127), or for SCALES 5 the precomputed factors 1.0f.
    probe_ring_init(gm_ring, 5 * GM_STAGE_BYTES, 5, GM_STAGE_BYTES, GM_SCALE_OFF, GM_C_OFF, 128,
                    SCALES == 5 ? 0x3f800000u : 0x7f7f7f7fu);
    gm_init_bars<5>(full, empty);
    const int tid = threadIdx.x, wg = tid >> 7;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0 && (BAR || REAL))
            for (int it = 0; it < stages; ++it) {
                const int s = it % 5;
                if (it >= 5) gm_bar_wait<HINT || REAL>(&empty[s], ((it / 5) - 1) & 1);
                gm_bar_arrive(&full[s]);
            }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2;
    const int r0 = 64 * c + 16 * wq + g;
    float acc[64], ta[64], tb[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = ta[i] = tb[i] = 0.f;
    float pf[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) pf[i] = 1.f;
    for (int kb = 0; kb < stages; kb += 4) {
        if (REAL == 1)
            gm_group_steps<0, 4, 5>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane);
        else
            steps<BAR, HINT, SCALES, WAITALL, DLY, POS>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane,
                                              ws, xc, pf);
    }
    probe_finish(acc, out, clk, t0);
}

// Fills beside the loop: does the copy engine's filling of shared memory slow the
// tensor cores by itself, with no consumer ever waiting on a fill? The producer thread
// bulk-copies 32 KB per stage (a weight and an activation tile, as the GEMM) from an
// L2-resident source into shared memory:
// MODE 0: the bare loop (constant factors), no fills;
// MODE 1: the bare loop, each fill paced by the consumers' release of a stage and written
//         into that ring slot (the GEMM's bytes per stage, where the GEMM writes them); the
//         consumers never wait on a fill;
// MODE 2: the bare loop, fills as fast as the copy engine goes, into a region of their own;
// MODE 3: the fills of MODE 2 alone (the consumers idle);
// MODE 4: the kernel's gm_group_steps on a real ring: every stage filled by the copies and
//         waited for (the GEMM's loop without its epilogue, from L2);
// MODE 5: gm_group_steps on a ring whose producer only arrives (no copies).
// clkp: the producer's cycles (block 0), so its fill rate in bytes per clock.
// NS: ring stages (MODES 4 and 5; the others use 5).
template <int MODE, int NS = 5>
__global__ void __launch_bounds__(384, 1) fill_probe(int stages, float* out, long long* clk,
                                                     long long* clkp, const u8* __restrict__ src,
                                                     int src_chunks) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    constexpr int REGION = NS * GM_STAGE_BYTES;  // MODES 2, 3: their fills land here
    constexpr int BYTES = REGION + (MODE == 2 || MODE == 3 ? 32768 : 0);
    __shared__ u64 full[NS], empty[NS];
    // MODE 1: each consumer warpgroup's count of stages done (a monotonic count, not an
    // mbarrier: the consumers never wait, so they may run phases ahead of the producer).
    __shared__ volatile u32 prog[2];
    const long long t0 = clock64();
    if (threadIdx.x < 2) prog[threadIdx.x] = 0;
    probe_ring_init(gm_ring, BYTES, NS, GM_STAGE_BYTES, GM_SCALE_OFF, GM_C_OFF, 128, 0x7f7f7f7fu);
    gm_init_bars<NS>(full, empty);
    const int tid = threadIdx.x, wg = tid >> 7;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0 && MODE != 0) {
            for (int it = 0; it < stages; ++it) {
                const int s = it % NS;
                const u32 prev = ((it / NS) - 1) & 1;
                if (it >= NS) {
                    if (MODE == 1)  // stage it - NS released by both warpgroups
                        while (min(prog[0], prog[1]) < (u32)(it - NS + 1)) __nanosleep(32);
                    if (MODE == 4 || MODE == 5) gm_bar_wait<1>(&empty[s], prev);
                    // Nobody else waits on full in MODES 1-3: the previous phase must be
                    // complete before the barrier is armed again.
                    if (MODE >= 1 && MODE <= 3) gm_bar_wait<1>(&full[s], prev);
                }
                if (MODE == 5) {
                    gm_bar_arrive(&full[s]);
                    continue;
                }
                u8* dst = (MODE == 2 || MODE == 3) ? gm_ring + REGION : gm_ring + s * GM_STAGE_BYTES;
                const u8* from = src + (size_t)((blockIdx.x * 7 + it) % src_chunks) * 32768;
                gm_bar_expect(&full[s], 32768);
                gm_bulk(dst, from, 16384, &full[s]);
                gm_bulk(dst + 16384, from + 16384, 16384, &full[s]);
            }
            for (int s = 0; s < NS && MODE != 4 && MODE != 5; ++s) {  // the last copies landed
                const int it = stages - NS + s;
                if (it >= 0) gm_bar_wait<1>(&full[it % NS], (it / NS) & 1);
            }
            clkp[blockIdx.x] = clock64() - t0;
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wg - 1, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2;
    const int r0 = 64 * c + 16 * wq + g;
    float acc[64], ta[64], tb[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = ta[i] = tb[i] = 0.f;
    if (MODE != 3)
        for (int kb = 0; kb < stages; kb += 4) {
            if (MODE >= 4)
                gm_group_steps<0, 4, NS>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane);
            else if (MODE == 1)
                steps<2, 1, 0>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane, nullptr,
                               nullptr, nullptr, prog);
            else
                steps<0, 0, 0>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane);
        }
    probe_finish(acc, out, clk, t0);
}

// Three consumer warpgroups (the `Wide3` block: 192 weight rows × 128 tokens, one
// temporary each, one promotion per stage, 512 threads, setmaxnreg 32 / 160): 40 KB of
// fills per stage for 1.5 times the 128 × 128 stage's work. MODE 0: the loop alone
// (constant factors, no barriers); MODE 1: on a real ring of G3_STAGES stages filled by
// the copy engine from L2 (24 KB of weights + 16 KB of activations), waited for.
// NS: ring stages; COPIES: bulk copies per stage (3: 16 + 8 + 16 KB; 6: 16 + 8 KB of
// weights, 512 + 256 B of scales, 16 KB + 16 B of activations, as a GEMM over the 128-row
// upload tiles fills a 192-row block; 8: three 8 KB weight copies and three 256 B scale
// copies instead).
template <int MODE, int NS = G3_STAGES, int COPIES = 3>
__global__ void __launch_bounds__(512, 1) w3_probe(int stages, float* out, long long* clk,
                                                   long long* clkp, const u8* __restrict__ src,
                                                   int src_chunks) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[NS], empty[NS];
    const long long t0 = clock64();
    probe_ring_init(gm_ring, NS * G3_STAGE_BYTES, NS, G3_STAGE_BYTES, G3_S_OFF, G3_C_OFF, 192,
                    0x7f7f7f7fu);
    gm_init_bars<NS, 12>(full, empty);
    const int tid = threadIdx.x, wg = tid >> 7;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 32;\n" ::: "memory");
        if (tid == 0 && MODE == 1) {
            for (int it = 0; it < stages; ++it) {
                const int s = it % NS;
                if (it >= NS) gm_bar_wait<1>(&empty[s], ((it / NS) - 1) & 1);
                u8* dst = gm_ring + s * G3_STAGE_BYTES;
                const u8* from = src + (size_t)((blockIdx.x * 7 + it) % src_chunks) * 32768;
                const u8* wsrc = src + (size_t)((blockIdx.x * 5 + it + 1) % src_chunks) * 32768;
                if (COPIES == 3) {
                    gm_bar_expect(&full[s], G3_X_OFF + GM_TILE_BYTES);
                    gm_bulk(dst, wsrc, 16384, &full[s]);
                    gm_bulk(dst + 16384, from + 16384, 8192, &full[s]);
                } else {
                    gm_bar_expect(&full[s], G3_X_OFF + GM_TILE_BYTES + 768 + 16);
                    if (COPIES == 6) {
                        gm_bulk(dst, wsrc, 16384, &full[s]);
                        gm_bulk(dst + 16384, from + 16384, 8192, &full[s]);
                        gm_bulk(dst + G3_S_OFF, wsrc + 16384, 512, &full[s]);
                        gm_bulk(dst + G3_S_OFF + 512, wsrc + 20480, 256, &full[s]);
                    } else {
                        for (int c = 0; c < 3; ++c) {
                            gm_bulk(dst + 8192 * c, wsrc + 8192 * c, 8192, &full[s]);
                            gm_bulk(dst + G3_S_OFF + 256 * c, from + 24576 + 1024 * c, 256, &full[s]);
                        }
                    }
                    gm_bulk(dst + G3_C_OFF, from + 28672, 16, &full[s]);
                }
                gm_bulk(dst + G3_X_OFF, from, GM_TILE_BYTES, &full[s]);
            }
            clkp[blockIdx.x] = clock64() - t0;
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n" ::: "memory");
    const int c = wg - 1, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2;
    const int rl = 16 * wq + g;
    float acc[64], tmp[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = tmp[i] = 0.f;
    const u32 ring0 = gm_smem(gm_ring);
    const u64 da0 = gm_desc<0>(ring0 + 8192 * c), db0 = gm_desc<0>(ring0 + G3_X_OFF);
    for (int kb = 0; kb < stages; ++kb) {
        const int s = kb % NS;
        if (MODE == 1) gm_bar_wait<1>(&full[s], (kb / NS) & 1);
        const u8* st = gm_ring + s * G3_STAGE_BYTES;
        const float cq = *reinterpret_cast<const float*>(st + G3_C_OFF);
        const float f0 = gm_e8m0(st[G3_S_OFF + 256 * c + rl * 4]) * cq;
        const float f1 = gm_e8m0(st[G3_S_OFF + 256 * c + (rl + 8) * 4]) * cq;
        const u64 off = (u64)(s * (G3_STAGE_BYTES >> 4));
        gm_wgmma_stage<0, 1>(tmp, da0 + off, db0 + off);
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (MODE == 1) {
            __syncwarp();
            if (lane == 0) gm_bar_arrive(&empty[s]);
        }
        gm_promote(acc, tmp, f0, f1);
    }
    probe_finish(acc, out, clk, t0);
}

u8* g_ws;
float* g_xc;
template <int BAR, int HINT, int SCALES, int REAL, int WAITALL = 0, int DLY = 0, int POS = 0>
void run(int sms, float* out, long long* clk, const char* what) {
    const int smem = 5 * GM_STAGE_BYTES;
    cudaFuncSetAttribute(ring_probe<BAR, HINT, SCALES, REAL, WAITALL, DLY, POS>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int stages = 65536;
    const ProbeTime t = probe_time(
        [&](int n) {
            ring_probe<BAR, HINT, SCALES, REAL, WAITALL, DLY, POS>
                <<<sms, 384, smem>>>(n, out, clk, g_ws, g_xc);
        },
        stages, clk);
    probe_row(what, 2.0 * 128 * 128 * 128 * (double)stages * sms, t, sms);
}

u8* g_src;
constexpr int kSrcChunks = 512;  // 16 MB: stays in L2

// The last launch's block 0: its consumers' share of the peak over their own cycles
// (`flop` per stage, 0: no consumer loop) and its producer's bytes per clock (`bytes`
// per stage, 0: no copies).
void block0_row(int stages, double flop, double bytes, const long long* clk,
                const long long* clkp) {
    long long cc = 0, pc = 0;
    cudaMemcpy(&cc, clk, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(&pc, clkp, 8, cudaMemcpyDeviceToHost);
    printf("|   block 0: consumers %.1f%% of the peak over their cycles; producer %.1f bytes per clock | | | | | | |\n",
           flop > 0 ? 100.0 * flop * stages / (8192.0 * cc) : 0.0,
           bytes > 0 ? bytes * stages / pc : 0.0);
}
template <int MODE, int NS = 5>
void run_fill(int sms, float* out, long long* clk, long long* clkp, const char* what) {
    const int smem = NS * GM_STAGE_BYTES + (MODE == 2 || MODE == 3 ? 32768 : 0);
    cudaFuncSetAttribute(fill_probe<MODE, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int stages = 65536;
    // MODE 3 has no consumer loop: time it by the producer's clock.
    const ProbeTime t = probe_time(
        [&](int n) { fill_probe<MODE, NS><<<sms, 384, smem>>>(n, out, clk, clkp, g_src, kSrcChunks); },
        stages, MODE == 3 ? clkp : clk);
    const double flop = 2.0 * 128 * 128 * 128;
    probe_row(what, flop * stages * sms, t, sms);
    block0_row(stages, MODE == 3 ? 0.0 : flop, MODE == 0 || MODE == 5 ? 0.0 : 32768.0, clk, clkp);
}

template <int MODE, int NS = G3_STAGES, int COPIES = 3>
void run_w3(int sms, float* out, long long* clk, long long* clkp, const char* what) {
    const int smem = NS * G3_STAGE_BYTES, stages = 65536;
    cudaFuncSetAttribute(w3_probe<MODE, NS, COPIES>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         smem);
    const ProbeTime t = probe_time(
        [&](int n) {
            w3_probe<MODE, NS, COPIES><<<sms, 512, smem>>>(n, out, clk, clkp, g_src, kSrcChunks);
        },
        stages, clk);
    const double flop = 2.0 * 192 * 128 * 128;
    probe_row(what, flop * stages * sms, t, sms);
    block0_row(stages, flop, MODE == 1 ? (COPIES == 3 ? 40960.0 : 41744.0) : 0.0, clk, clkp);
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    const char* header =
        "| loop | ms | TFLOP/s | %% of 1979 | SM MHz (block 0) | %% of the peak at that clock | "
        "error |\n|---|---:|---:|---:|---:|---:|---|\n";
    float* out;
    long long* clk;
    cudaMalloc(&out, sms * 512 * 4);
    cudaMalloc(&clk, sms * 8);
    cudaMalloc(&g_ws, 32 * 512);
    cudaMemset(g_ws, 0x7f, 32 * 512);
    cudaMalloc(&g_xc, 32 * 4 * 4);
    {
        float one[128];
        for (int i = 0; i < 128; ++i) one[i] = 1.f;
        cudaMemcpy(g_xc, one, sizeof one, cudaMemcpyHostToDevice);
    }
    long long* clkp;
    cudaMalloc(&clkp, sms * 8);
    cudaMalloc(&g_src, (size_t)kSrcChunks * 32768);
    cudaMemset(g_src, 0x37, (size_t)kSrcChunks * 32768);
    if (getenv("FILL_ONLY")) {
        printf("%s, %d SMs; the loop beside the copy engine's fills (32 KB per 128 x 128 x 128 "
               "stage from an L2-resident source)\n",
               p.name, sms);
        printf(header);
        for (int rep = 0; rep < 2; ++rep) {
            run_fill<0>(sms, out, clk, clkp, "bare loop, no fills");
            run_fill<1>(sms, out, clk, clkp, "bare loop + fills paced by its releases, into the released slots");
            run_fill<2>(sms, out, clk, clkp, "bare loop + fills at full speed, into a region of their own");
            run_fill<3>(sms, out, clk, clkp, "fills at full speed alone");
            run_fill<5>(sms, out, clk, clkp, "gm_group_steps, ring barriers, no copies");
            run_fill<4>(sms, out, clk, clkp, "gm_group_steps on a real ring (copies waited for)");
            run_fill<4, 6>(sms, out, clk, clkp, "the same, 6 stages");
            run_w3<0>(sms, out, clk, clkp, "three warpgroups (192 x 128), one temporary, loop alone");
            run_w3<1>(sms, out, clk, clkp, "three warpgroups (192 x 128) on a real ring (40 KB per stage)");
            run_w3<1, 4>(sms, out, clk, clkp, "the same, 4 stages");
            run_w3<1, 4, 6>(sms, out, clk, clkp, "the same, 4 stages, 6 copies (the kernel's)");
            run_w3<1, 4, 8>(sms, out, clk, clkp, "the same, 4 stages, 8 copies");
            run_w3<1, 5, 6>(sms, out, clk, clkp, "the same, 5 stages, 6 copies");
        }
        return 0;
    }
    printf("%s, %d SMs; the grouped loop's compute path (128 x 128 x 128 stages, no loads)\n",
           p.name, sms);
    printf(header);
    for (int rep = 0; rep < 2; ++rep) {
        run<0, 0, 0, 0>(sms, out, clk, "two temporaries, constant factors");
        run<0, 0, 1, 0>(sms, out, clk, "+ factors read from the stage");
        run<0, 0, 4, 0>(sms, out, clk, "constant factors + three dummy shared loads per stage");
        run<0, 0, 5, 0>(sms, out, clk, "precomputed factors, one 8-byte load per stage");
        run<1, 0, 1, 0>(sms, out, clk, "+ ring barriers (polling)");
        run<1, 1, 1, 0>(sms, out, clk, "+ ring barriers (sleeping)");
        run<1, 1, 5, 0>(sms, out, clk, "ring barriers (sleeping), precomputed factors (one load)");
        run<1, 1, 1, 0, 1>(sms, out, clk, "the same, a call's four full waits at its start");
        run<1, 1, 0, 0>(sms, out, clk, "ring barriers (sleeping), constant factors");
        run<1, 1, 0, 0, 1>(sms, out, clk, "the same, a call's four full waits at its start");
        run<1, 1, 2, 0>(sms, out, clk, "ring barriers, factors from global memory at call start");
        run<1, 1, 3, 0>(sms, out, clk, "ring barriers, factors from global memory one call ahead");
        run<0, 0, 0, 1>(sms, out, clk, "the kernel's gm_group_steps");
        run<0, 0, 0, 0, 0, 16, 0>(sms, out, clk, "constant factors, 16-cycle spin before each issue");
        run<0, 0, 0, 0, 0, 32, 0>(sms, out, clk, "constant factors, 32-cycle spin before each issue");
        run<0, 0, 0, 0, 0, 64, 0>(sms, out, clk, "constant factors, 64-cycle spin before each issue");
        run<0, 0, 0, 0, 0, 128, 0>(sms, out, clk, "constant factors, 128-cycle spin before each issue");
        run<0, 0, 0, 0, 0, 64, 1>(sms, out, clk, "constant factors, 64-cycle spin before each promotion");
        run<0, 0, 0, 0, 0, 128, 1>(sms, out, clk, "constant factors, 128-cycle spin before each promotion");
    }
    return 0;
}
