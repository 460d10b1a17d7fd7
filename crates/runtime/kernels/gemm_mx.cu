// The MX GEMM's consumer loops and its kernels (serial, pipelined, persistent, grouped,
// staged, three warpgroups); part of the GEMM module after gemm_epilogue.cuh.

// PROMOTE = 0 is a timing probe: the k steps accumulate straight into acc on the
// tensor cores with no scales (wrong results; the load + wgmma pipeline alone).
template <int WFMT, int SWAP, int PROMOTE>
__device__ __forceinline__ void gemm_body(const u8* __restrict__ w, const u8* __restrict__ ws,
                                          const u8* __restrict__ xq,
                                          const float* __restrict__ xc,
                                          const float* __restrict__ xr, float* y, int m, int n,
                                          int kblocks, int ldy, int accumulate) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[GM_STAGES], empty[GM_STAGES];
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int mt = blockIdx.x, nt = blockIdx.y;
    gm_init_bars(full, empty);
    if (wg == 0) {
        if (tid == 0) gm_producer(gm_ring, full, empty, w, ws, xq, xc, mt, nt, kblocks);
        return;
    }

    // Consumer warpgroup c owns weight rows 64c .. 64c + 63 of the block.
    const int c = wg - 1;
    const int lane = tid & 31, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = 64 * c + 16 * wq + g;  // and r0 + 8
    float acc[64], tmp[64], sink = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) tmp[i] = 0.f;

    for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % GM_STAGES;
        gm_bar_wait(&full[s], (kb / GM_STAGES) & 1);
        const u8* st = gm_ring + s * GM_STAGE_BYTES;
        const u32 s0 = *reinterpret_cast<const u32*>(st + GM_SCALE_OFF + r0 * 4);
        const u32 s1 = *reinterpret_cast<const u32*>(st + GM_SCALE_OFF + (r0 + 8) * 4);
        const float4 cv = *reinterpret_cast<const float4*>(st + GM_C_OFF);
        const float cq[4] = {cv.x, cv.y, cv.z, cv.w};
        const u32 a0 = gm_smem(st) + 8192 * c;
        const u32 b0 = gm_smem(st + GM_TILE_BYTES);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float f0 = gm_e8m0((s0 >> (8 * q)) & 0xffu) * cq[q];
            const float f1 = gm_e8m0((s1 >> (8 * q)) & 0xffu) * cq[q];
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            if (!PROMOTE) {
                gm_wgmma<WFMT, 1>(acc, gm_desc<SWAP>(a0 + 256 * q), gm_desc<SWAP>(b0 + 256 * q));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                sink += f0 * f1;  // keeps the scale reads of the real kernel
                continue;
            }
            gm_wgmma<WFMT, 0>(tmp, gm_desc<SWAP>(a0 + 256 * q), gm_desc<SWAP>(b0 + 256 * q));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            gm_promote(acc, tmp, f0, f1);
        }
        if (!PROMOTE) {
            // The previous stage's 4 steps are done once at most this stage's 4 are
            // pending: release it (the steps chain on one accumulator, no drain).
            asm volatile("wgmma.wait_group.sync.aligned 4;" ::: "memory");
            __syncwarp();
            if (lane == 0 && kb > 0) gm_bar_arrive(&empty[(kb - 1) % GM_STAGES]);
            continue;
        }
        __syncwarp();
        if (lane == 0) gm_bar_arrive(&empty[s]);
    }
    if (!PROMOTE) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (sink == -1.f) acc[0] = sink;  // never (products of powers of two are positive)
    gm_epilogue(acc, tmp, y, xr, m, n, ldy, accumulate, mt, nt, r0, t);
}

// NST stages (4·NST k steps) of one consumer warpgroup, software-pipelined: step i + 1
// is issued into the second temporary accumulator before step i is promoted, so the
// promotion FFMAs overlap the warpgroup's own tensor-core work (the last step's overlaps
// the other warpgroup's). No step is in flight across calls: the compiler's wgmma
// tracking then keeps the asynchrony (with a step in flight across the loop back-edge
// ptxas serializes every wgmma, C7514).
template <int WFMT, int NST, int NS = GM_STAGES>
__device__ __forceinline__ void gm_pipe_steps(float* acc, float* ta, float* tb, u8* ring,
                                              u64* full, u64* empty, int kb, int c, int r0,
                                              int lane) {
    const u32 ring0 = gm_smem(ring);
    // Promotion factors of the current and the next stage (ring of two).
    float f0[2][4], f1[2][4];
    auto base = [&](int st) { return ring0 + ((kb + st) % NS) * GM_STAGE_BYTES; };
    auto scales = [&](int st) {
        const int s = (kb + st) % NS;
        gm_bar_wait(&full[s], ((kb + st) / NS) & 1);
        const u8* p = ring + s * GM_STAGE_BYTES;
        const u32 s0 = *reinterpret_cast<const u32*>(p + GM_SCALE_OFF + r0 * 4);
        const u32 s1 = *reinterpret_cast<const u32*>(p + GM_SCALE_OFF + (r0 + 8) * 4);
        const float4 cv = *reinterpret_cast<const float4*>(p + GM_C_OFF);
        const float cq[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            f0[st & 1][q] = gm_e8m0((s0 >> (8 * q)) & 0xffu) * cq[q];
            f1[st & 1][q] = gm_e8m0((s1 >> (8 * q)) & 0xffu) * cq[q];
        }
    };
    scales(0);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    gm_wgmma<WFMT, 0>(ta, gm_desc<0>(base(0) + 8192 * c), gm_desc<0>(base(0) + GM_TILE_BYTES));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 4 * NST; ++i) {
        float* cur = (i & 1) ? tb : ta;
        float* nxt = (i & 1) ? ta : tb;
        if (i + 1 < 4 * NST) {
            const int st = (i + 1) / 4, q = (i + 1) % 4;
            if (q == 0) scales(st);
            const u32 b = base(st) + 256 * q;
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            gm_wgmma<WFMT, 0>(nxt, gm_desc<0>(b + 8192 * c), gm_desc<0>(b + GM_TILE_BYTES));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        } else {
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        }
        if (i % 4 == 3) {
            // Step i was the stage's last: its operands may be overwritten.
            __syncwarp();
            if (lane == 0) gm_bar_arrive(&empty[(kb + i / 4) % NS]);
        }
        const float a = f0[(i / 4) & 1][i % 4], b = f1[(i / 4) & 1][i % 4];
        gm_promote(acc, cur, a, b);
    }
}

// Grouped promotion: weights whose per-32 scales were folded exactly into their E4M3
// codes, leaving one scale per (row, 128 k) (`tile_gemm` does this for MXFP4: every
// E2M1 value times a power of two within 14 binades is an E4M3 value), and activations
// with one C per (tile, 128 k). Then a stage's 4 k steps can accumulate on the tensor
// cores in one temporary and be promoted once, with one factor per row: a quarter of
// the FFMAs of the per-step loop, which bound it (one FFMA per accumulator per k = 32
// step is as many FP32 issue slots as the FP8 tensor cores' rate allows). Stage i + 1
// goes into the other temporary before stage i is promoted; none stays in flight across
// calls (see gm_pipe_steps).
//
// The loop is kept lean (session 32: 118 instructions per stage and warp, 64 of them the
// promotion, against 143 before): the stages' ring slots and phases are stepped from
// the call's first, the wgmma descriptors are the ring's first slot's plus an offset,
// and the barrier waits sleep (suspend hint) instead of polling.
template <int WFMT, int NST, int NS = GM_STAGES>
__device__ __forceinline__ void gm_group_steps(float* acc, float* ta, float* tb, u8* ring,
                                               u64* full, u64* empty, int kb, int c, int r0,
                                               int lane) {
    static_assert(NST < NS, "a call's stages wrap the ring at most once");
    const u32 ring0 = gm_smem(ring);
    float f0[2], f1[2];
    const int s0 = kb % NS;
    const u32 ph0 = (u32)(kb / NS) & 1u;
    // Ring slot and phase parity of stage st of this call.
    auto slot = [&](int st) -> int { return s0 + st >= NS ? s0 + st - NS : s0 + st; };
    auto phase = [&](int st) -> u32 { return s0 + st >= NS ? ph0 ^ 1u : ph0; };
    auto scales = [&](int st) {
        const int s = slot(st);
        gm_bar_wait<1>(&full[s], phase(st));
        const u8* p = ring + s * GM_STAGE_BYTES;
        const float cq = *reinterpret_cast<const float*>(p + GM_C_OFF);
        f0[st & 1] = gm_e8m0(p[GM_SCALE_OFF + r0 * 4]) * cq;
        f1[st & 1] = gm_e8m0(p[GM_SCALE_OFF + (r0 + 8) * 4]) * cq;
    };
    // The descriptors of the ring's first slot; a stage's are those plus its offset (a
    // descriptor's address field is the shared address / 16, and no ring address
    // carries out of it), each k step 256 bytes (16) further.
    const u64 da0 = gm_desc<0>(ring0 + 8192 * c), db0 = gm_desc<0>(ring0 + GM_TILE_BYTES);
    auto issue = [&](float* d, int st) {
        const u64 off = (u64)(slot(st) * (GM_STAGE_BYTES >> 4));
        gm_wgmma_stage<WFMT, 1>(d, da0 + off, db0 + off);
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
        __syncwarp();  // stage i's operands may be overwritten
        if (lane == 0) gm_bar_arrive(&empty[slot(i)]);
        const float a = f0[i & 1], b = f1[i & 1];
        gm_promote(acc, cur, a, b);
    }
}

// N stages of one consumer warpgroup: grouped promotion (GROUP) or one per k step.
template <int WFMT, int N, int GROUP, int NS = GM_STAGES>
__device__ __forceinline__ void gm_stages(float* acc, float* ta, float* tb, u8* ring,
                                          u64* full, u64* empty, int kb, int c, int r0,
                                          int lane) {
    if (GROUP)
        gm_group_steps<WFMT, N, NS>(acc, ta, tb, ring, full, empty, kb, c, r0, lane);
    else
        gm_pipe_steps<WFMT, N, NS>(acc, ta, tb, ring, full, empty, kb, c, r0, lane);
}

// Consumers run gm_pipe_steps over groups of NST stages (4·NST − 1 of 4·NST promotions
// overlapped), the remainder one stage at a time. NST = 4 spills (ptxas then also
// serializes the wgmmas, C7511); NST = 2 does not.
// Three 64-float accumulators need ~230 registers: the producer warpgroup gives its
// registers back (setmaxnreg) so the consumers may hold 232.
template <int WFMT, int NST>
__device__ __forceinline__ void gemm_pipe_body(const u8* __restrict__ w,
                                               const u8* __restrict__ ws,
                                               const u8* __restrict__ xq,
                                               const float* __restrict__ xc,
                                               const float* __restrict__ xr, float* y, int m,
                                               int n, int kblocks, int ldy, int accumulate) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[GM_STAGES], empty[GM_STAGES];
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int mt = blockIdx.x, nt = blockIdx.y;
    gm_init_bars(full, empty);
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) gm_producer(gm_ring, full, empty, w, ws, xq, xc, mt, nt, kblocks);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1;
        const int lane = tid & 31, wq = (tid >> 5) & 3;
        const int g = lane >> 2, t = lane & 3;
        const int r0 = 64 * c + 16 * wq + g;
        float acc[64], ta[64], tb[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            acc[i] = 0.f;
            ta[i] = 0.f;
            tb[i] = 0.f;
        }
        int kb = 0;
        for (; kb + NST <= kblocks; kb += NST)
            gm_pipe_steps<WFMT, NST>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane);
        for (; kb < kblocks; ++kb)
            gm_pipe_steps<WFMT, 1>(acc, ta, tb, gm_ring, full, empty, kb, c, r0, lane);
        gm_epilogue(acc, ta, y, xr, m, n, ldy, accumulate, mt, nt, r0, t);
    }
}

// Persistent version of gemm_pipe_body: gridDim.x blocks (one per multiprocessor) walk
// the output tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... (token tile fastest, as
// the non-persistent grid), the ring's stage counter running on across tiles, so the
// producer loads the next tile's first stages while the consumers store this tile.
//
// NS: ring stages. EPI: 0 = per-thread stores (`gm_epilogue`), else staged through
// shared memory (`gm_epilogue_staged`, 64 tokens per round; the ring has fewer stages so
// the staging fits): 1 = the copy engine for everything; 2 = plain results by 16-byte
// thread stores, `y +=` by the copy engine; 3 = threads for both (`y +=` as 16-byte
// loads, adds and stores); 4 = SwiGLU of gate | up row pairs (n a multiple of 128);
// 5 = the values of 3 by the lean epilogue (`gm_epilogue_lean`).
template <int WFMT, int NST, int GROUP = 0, int NS = GM_STAGES, int EPI = 0>
__device__ __forceinline__ void gemm_persist_body(const u8* __restrict__ w,
                                                  const u8* __restrict__ ws,
                                                  const u8* __restrict__ xq,
                                                  const float* __restrict__ xc,
                                                  const float* __restrict__ xr, float* y, int m,
                                                  int n, int kblocks, int ldy, int accumulate) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[NS], empty[NS];
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int m_tiles = (m + GM_TILE - 1) / GM_TILE, n_tiles = (n + GM_TILE - 1) / GM_TILE;
    const int tiles = m_tiles * n_tiles;
    float* const stg0 = reinterpret_cast<float*>(gm_ring + NS * GM_STAGE_BYTES);
    gm_init_bars<NS>(full, empty);
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            // The grouped kernels' producer sleeps in its waits too (their lean loop).
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, it += kblocks)
                gm_producer<NS, GROUP != 0>(gm_ring, full, empty, w, ws, xq, xc,
                                            tile % m_tiles, tile / m_tiles, kblocks, it);
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1;
        const int lane = tid & 31, wq = (tid >> 5) & 3;
        const int g = lane >> 2, t = lane & 3;
        const int r0 = 64 * c + 16 * wq + g;
        float acc[64], ta[64], tb[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            ta[i] = 0.f;
            tb[i] = 0.f;
        }
        int it = 0;
        // The staged epilogue reads the tile's row scales from shared memory: each
        // warpgroup copies them in (one per thread, cp.async) as its tile starts, so
        // their latency falls under the main loop, not on the epilogue's first multiply.
        // 8-byte aligned where the lean epilogue (EPI 5) reads them in pairs.
        __shared__ alignas(EPI >= 5 ? 8 : 4) float gm_rs[2][GM_TILE];
        const bool staged = EPI == 4 || (EPI && (n & 3) == 0 && (ldy & 3) == 0);
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int mt = tile % m_tiles, nt = tile / m_tiles;
            if (staged) gm_rs_fetch(&gm_rs[c][32 * wq + lane], xr, mt * GM_TILE + 32 * wq + lane, m);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] = 0.f;
            constexpr int U = GROUP ? GROUP : NST;  // stages per call
            // `y +=` by the threads: the first round's residuals are fetched into the
            // staging before the call that runs any of the tile's last U stages.
            bool fetch = (EPI == 3 || EPI == 5) && staged && accumulate;
            float* const stg = stg0 + c * (GM_STG_BYTES / 4);
            int kb = 0;
            for (; kb + U <= kblocks; kb += U) {
                if (fetch && kb + U > kblocks - U) {
                    gm_res_fetch(stg, y, m, n, ldy, mt, nt, c, 32 * wq + lane);
                    fetch = false;
                }
                gm_stages<WFMT, U, GROUP, NS>(acc, ta, tb, gm_ring, full, empty, it + kb, c, r0,
                                              lane);
            }
            for (; kb < kblocks; ++kb) {
                if (fetch) {
                    gm_res_fetch(stg, y, m, n, ldy, mt, nt, c, 32 * wq + lane);
                    fetch = false;
                }
                gm_stages<WFMT, 1, GROUP, NS>(acc, ta, tb, gm_ring, full, empty, it + kb, c, r0,
                                              lane);
            }
            it += kblocks;
            if (staged && EPI == 5 && accumulate)
                gm_epilogue_lean<true>(acc, y, gm_rs[c], m, n, ldy, mt, nt, c, wq, g, t, lane,
                                       stg);
            else if (staged && EPI == 5)
                gm_epilogue_lean<false>(acc, y, gm_rs[c], m, n, ldy, mt, nt, c, wq, g, t, lane,
                                        stg);
            else if (staged)
                gm_epilogue_staged<EPI>(acc, y, gm_rs[c], m, n, ldy, accumulate, mt, nt, c, wq,
                                        g, t, lane, stg);
            else
                gm_epilogue(acc, ta, y, xr, m, n, ldy, accumulate, mt, nt, r0, t);
        }
        // The copy engine's last stores (and reads of the staging) complete before exit.
        if (EPI && wq == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

// Three consumer warpgroups (192 weight rows × 128 tokens per block, 512 threads), the
// serial loop in each: more consumer warps per scheduler to cover each one's promotion,
// and a third less L2 traffic per FLOP than 128 × 128. The 192-row block is read as
// three 64-row halves of the 128-row upload tiles (each 8 KB contiguous per k block);
// halves past the last tile are not loaded (their rows are masked in the epilogue).
// Registers: 128 per thread at entry; the producer gives back to 32 so the consumers
// may hold 160 (3·128·160 + 128·32 = 64 K).
#define G3_W_BYTES (3 * 8192)
#define G3_X_OFF G3_W_BYTES
#define G3_S_OFF (G3_X_OFF + GM_TILE_BYTES)
#define G3_C_OFF (G3_S_OFF + 768)
#define G3_STAGE_BYTES 41984  // 41744 rounded up to 1 KB
#define G3_STAGES 5

// GROUP: grouped promotion (see gm_group_steps): a stage's 4 steps accumulate on the
// tensor cores, then one promotion.
template <int WFMT, int GROUP = 0>
__device__ __forceinline__ void gemm_w3_body(const u8* __restrict__ w, const u8* __restrict__ ws,
                                             const u8* __restrict__ xq,
                                             const float* __restrict__ xc,
                                             const float* __restrict__ xr, float* y, int m,
                                             int n, int kblocks, int ldy, int accumulate) {
    extern __shared__ __align__(1024) u8 gm_ring[];
    __shared__ u64 full[G3_STAGES], empty[G3_STAGES];
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int mt = blockIdx.x, nb = blockIdx.y;
    const int n_tiles = (n + GM_TILE - 1) / GM_TILE;
    gm_init_bars<G3_STAGES, 12>(full, empty);  // 3 consumer warpgroups x 4 warps
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 32;\n" ::: "memory");
        if (tid == 0) {
            const u8* xsrc = xq + (size_t)mt * kblocks * GM_TILE_BYTES;
            const float* csrc = xc + (size_t)mt * kblocks * 4;
            u32 tx = GM_TILE_BYTES + 16;
#pragma unroll
            for (int c = 0; c < 3; ++c)
                if ((192 * nb + 64 * c) / GM_TILE < n_tiles) tx += 8192 + 256;
            for (int kb = 0; kb < kblocks; ++kb) {
                const int s = kb % G3_STAGES;
                if (kb >= G3_STAGES) gm_bar_wait(&empty[s], ((kb / G3_STAGES) - 1) & 1);
                u8* st = gm_ring + s * G3_STAGE_BYTES;
                gm_bar_expect(&full[s], tx);
#pragma unroll
                for (int c = 0; c < 3; ++c) {
                    const int row = 192 * nb + 64 * c;
                    const int tile = row / GM_TILE, half = (row % GM_TILE) / 64;
                    if (tile >= n_tiles) continue;
                    const size_t tk = (size_t)tile * kblocks + kb;
                    gm_bulk(st + 8192 * c, w + tk * GM_TILE_BYTES + 8192 * half, 8192, &full[s]);
                    gm_bulk(st + G3_S_OFF + 256 * c, ws + tk * 512 + 256 * half, 256, &full[s]);
                }
                gm_bulk(st + G3_X_OFF, xsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES,
                        &full[s]);
                gm_bulk(st + G3_C_OFF, csrc + (size_t)kb * 4, 16, &full[s]);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n" ::: "memory");
        const int c = wg - 1;
        const int lane = tid & 31, wq = (tid >> 5) & 3;
        const int g = lane >> 2, t = lane & 3;
        const int rl = 16 * wq + g;  // row within this warpgroup's 64 (and rl + 8)
        float acc[64], tmp[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            acc[i] = 0.f;
            tmp[i] = 0.f;
        }
        for (int kb = 0; kb < kblocks; ++kb) {
            const int s = kb % G3_STAGES;
            gm_bar_wait(&full[s], (kb / G3_STAGES) & 1);
            const u8* st = gm_ring + s * G3_STAGE_BYTES;
            const u32 s0 = *reinterpret_cast<const u32*>(st + G3_S_OFF + 256 * c + rl * 4);
            const u32 s1 = *reinterpret_cast<const u32*>(st + G3_S_OFF + 256 * c + (rl + 8) * 4);
            const float4 cv = *reinterpret_cast<const float4*>(st + G3_C_OFF);
            const float cq[4] = {cv.x, cv.y, cv.z, cv.w};
            const u32 a0 = gm_smem(st) + 8192 * c;
            const u32 b0 = gm_smem(st + G3_X_OFF);
            if (GROUP) {
                const float f0 = gm_e8m0(s0 & 0xffu) * cq[0];
                const float f1 = gm_e8m0(s1 & 0xffu) * cq[0];
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                gm_wgmma<WFMT, 0>(tmp, gm_desc<0>(a0), gm_desc<0>(b0));
#pragma unroll
                for (int q = 1; q < 4; ++q)
                    gm_wgmma<WFMT, 1>(tmp, gm_desc<0>(a0 + 256 * q), gm_desc<0>(b0 + 256 * q));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                gm_promote(acc, tmp, f0, f1);
            }
#pragma unroll
            for (int q = 0; q < (GROUP ? 0 : 4); ++q) {
                const float f0 = gm_e8m0((s0 >> (8 * q)) & 0xffu) * cq[q];
                const float f1 = gm_e8m0((s1 >> (8 * q)) & 0xffu) * cq[q];
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                gm_wgmma<WFMT, 0>(tmp, gm_desc<0>(a0 + 256 * q), gm_desc<0>(b0 + 256 * q));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                gm_promote(acc, tmp, f0, f1);
            }
            __syncwarp();
            if (lane == 0) gm_bar_arrive(&empty[s]);
        }
        gm_epilogue(acc, tmp, y, xr, m, n, ldy, accumulate, mt, 0, 192 * nb + 64 * c + rl, t);
    }
}

#define GEMM_KERNEL(name, WFMT, SWAP, PROMOTE)                                                       \
    extern "C" __global__ void __launch_bounds__(384, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_body<WFMT, SWAP, PROMOTE>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate);        \
    }

GEMM_KERNEL(gemm_mxfp8_e4m3, 0, 0, 1)
GEMM_KERNEL(gemm_mxfp8_e5m2, 1, 0, 1)
GEMM_KERNEL(gemm_mxfp8_e4m3_swap, 0, 1, 1)
GEMM_KERNEL(gemm_mxfp8_e4m3_probe, 0, 0, 0)

#define GEMM_PIPE_KERNEL(name, WFMT, NST)                                                        \
    extern "C" __global__ void __launch_bounds__(384, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_pipe_body<WFMT, NST>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate);         \
    }

GEMM_PIPE_KERNEL(gemm_mxfp8_e4m3_pipe, 0, 2)
GEMM_PIPE_KERNEL(gemm_mxfp8_e5m2_pipe, 1, 2)

#define GEMM_PERSIST_KERNEL(name, WFMT)                                                     \
    extern "C" __global__ void __launch_bounds__(384, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_persist_body<WFMT, 2>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate);   \
    }

GEMM_PERSIST_KERNEL(gemm_mxfp8_e4m3_persist, 0)
GEMM_PERSIST_KERNEL(gemm_mxfp8_e5m2_persist, 1)

// The persistent kernel with grouped promotion (`gm_group_steps`), GROUP stages per call.
#define GEMM_GROUP_KERNEL(name, GROUP)                                                      \
    extern "C" __global__ void __launch_bounds__(384, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_persist_body<0, 2, GROUP>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate); \
    }

GEMM_GROUP_KERNEL(gemm_mxfp8_e4m3_group2, 2)
GEMM_GROUP_KERNEL(gemm_mxfp8_e4m3_group4, 4)

// The same with a staged epilogue (EPI: see gemm_persist_body) over a 5-stage ring:
// 5 × GM_STAGE_BYTES + 2 × GM_STG_BYTES of dynamic shared memory (GEMM_STAGED_SMEM in
// gemm.rs).
#define GEMM_STAGED_KERNEL(name, NST, GROUP, EPI)                                          \
    extern "C" __global__ void __launch_bounds__(384, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_persist_body<0, NST, GROUP, 5, EPI>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy,  \
                                                 accumulate);                               \
    }

GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_persist_s, 2, 0, 1)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_persist_v, 2, 0, 2)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_group4_s, 2, 4, 1)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_group4_v, 2, 4, 2)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_persist_a, 2, 0, 3)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_group4_a, 2, 4, 3)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_persist_l, 2, 0, 5)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_group4_l, 2, 4, 5)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_persist_swiglu, 2, 0, 4)
GEMM_STAGED_KERNEL(gemm_mxfp8_e4m3_group4_swiglu, 2, 4, 4)

#define GEMM_W3_KERNEL(name, WFMT)                                                          \
    extern "C" __global__ void __launch_bounds__(512, 1)                                    \
        name(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq, \
             const float* __restrict__ xc, const float* __restrict__ xr, float* y, int m,     \
             int n, int kblocks, int ldy, int accumulate) {                                 \
        gemm_w3_body<WFMT>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate);           \
    }

GEMM_W3_KERNEL(gemm_mxfp8_e4m3_w3, 0)
GEMM_W3_KERNEL(gemm_mxfp8_e5m2_w3, 1)

extern "C" __global__ void __launch_bounds__(512, 1)
    gemm_mxfp8_e4m3_w3g(const u8* __restrict__ w, const u8* __restrict__ ws,
                        const u8* __restrict__ xq, const float* __restrict__ xc,
                        const float* __restrict__ xr, float* y, int m, int n, int kblocks,
                        int ldy, int accumulate) {
    gemm_w3_body<0, 1>(w, ws, xq, xc, xr, y, m, n, kblocks, ldy, accumulate);
}

// The tensor cores' dense E4M3 rate on this card as it runs (`GemmMx::tensor_ceiling`,
// the prefill benchmark's ceiling): one block per multiprocessor, two warpgroups each
// chaining `stages` × 4 m64n128k32 wgmmas on operands already in shared memory (finite
// codes cycling through GEMM_TC_SLOTS ring-sized slots), one stage in flight beside the
// one issued, no loads, no promotion; one store per thread at the end. Under load the
// power cap sets the clock, so this is the rate a GEMM of these instructions could reach.
#define GEMM_TC_SLOTS 4
extern "C" __global__ void __launch_bounds__(256, 1) gemm_tc_ceiling(int stages, float* sink) {
    extern __shared__ __align__(1024) u8 gm_tc_ring[];
    for (int i = threadIdx.x; i < GEMM_TC_SLOTS * GM_STAGE_BYTES / 4; i += blockDim.x)
        reinterpret_cast<u32*>(gm_tc_ring)[i] = (i * 2654435761u) & 0x37373737u;  // |v| < 1
    __syncthreads();
    const int c = threadIdx.x >> 7;
    const u32 ring0 = gm_smem(gm_tc_ring);
    const u64 da0 = gm_desc<0>(ring0 + 8192 * c), db0 = gm_desc<0>(ring0 + GM_TILE_BYTES);
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (int s = 0; s < stages; ++s) {
        const u64 off = (u64)((s % GEMM_TC_SLOTS) * (GM_STAGE_BYTES >> 4));
        gm_wgmma_stage<0, 0>(acc, da0 + off, db0 + off);
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) t += acc[i];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = t;
}
