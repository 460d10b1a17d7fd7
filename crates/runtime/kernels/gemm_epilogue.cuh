// How the MX GEMM's finished tiles reach memory: the direct epilogue (`gm_epilogue`) and
// the staged ones through shared memory (`gm_epilogue_staged`); part of the GEMM module
// after gemm_common.cuh.

// Epilogue: acc[4j + 2h + e] = D[row r0 + 8h][token 8j + 2t + e] -> y[token][row] ·
// R[token] (+ y). The residuals are all loaded (into `res`) before any store, so the
// loads overlap instead of each waiting behind the previous store.
__device__ __forceinline__ void gm_epilogue(const float* acc, float* res, float* y,
                                            const float* __restrict__ xr, int m, int n,
                                            int ldy, int accumulate, int mt, int nt, int r0,
                                            int t) {
    const int row0 = nt * GM_TILE + r0;
    // Two halves of 8 column groups each: 32 residuals in flight at a time.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        if (accumulate) {
#pragma unroll
            for (int j = 8 * hf; j < 8 * hf + 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int tok = mt * GM_TILE + 8 * j + 2 * t + e, row = row0 + 8 * h;
                        res[4 * j + 2 * h + e] =
                            (tok < m && row < n) ? y[(size_t)tok * ldy + row] : 0.f;
                    }
        }
#pragma unroll
        for (int j = 8 * hf; j < 8 * hf + 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int tok = mt * GM_TILE + 8 * j + 2 * t + e;
                if (tok >= m) continue;
                const float r = xr[tok];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0 + 8 * h;
                    if (row >= n) continue;
                    const int i = 4 * j + 2 * h + e;
                    const float v = acc[i] * r;
                    y[(size_t)tok * ldy + row] = accumulate ? v + res[i] : v;
                }
            }
        }
    }
}

// Staged epilogue (persistent kernels): a consumer warpgroup writes 64 tokens × its 64
// rows of the tile into shared memory at a time (token-major, rows padded to GM_STG_LD
// floats so the fragment's stores hit 32 distinct banks), then
// * plain results with EPI ≥ 2, and `y +=` with EPI 3: every thread stores 16-byte pieces
//   of whole token rows (a warp writes two whole 256-byte token rows of y per
//   instruction, against 4 × 32 bytes for the fragment-order stores of `gm_epilogue`);
// * otherwise: the copy engine, one lane per token
//   issuing that token's row of up to 256 bytes: bulk stores, `y +=` as bulk
//   reduce-adds in L2 (`cp.reduce.async.bulk .add.f32`, round to nearest), so the
//   warpgroup never waits on a residual load.
// Needs n and ldy multiples of 4 (16-byte aligned rows); the caller checks.
#define GM_STG_LD 68
#define GM_STG_TOKENS 64                        // tokens per round: half the tile
#define GM_STG_BYTES (GM_STG_TOKENS * GM_STG_LD * 4)  // one warpgroup's staging

__device__ __forceinline__ void gm_named_sync(int id) {
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// dst = xr[tok], or 0 past the last token (a zero-filling 4-byte cp.async: no byte is
// read then), in the background; `cp.async.wait_all` waits for it.
__device__ __forceinline__ void gm_rs_fetch(float* dst, const float* __restrict__ xr, int tok,
                                            int m) {
    const float* src = xr + (tok < m ? tok : 0);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(gm_smem(dst)),
                 "l"(src), "r"(tok < m ? 4 : 0)
                 : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Piece u (of GM_STG_TOKENS * 16 / 128) of thread tid of a warpgroup in a staged round:
// token tl of the round and columns col .. col + 3 of the warpgroup's 64 rows (16 threads
// cover one token's 256 bytes).
__device__ __forceinline__ void gm_piece(int tid, int u, int& tl, int& col) {
    const int q = tid + 128 * u;
    tl = q >> 4;
    col = 4 * (q & 15);
}

// `y +=` with the threads' epilogue (EPI 3): the first round's residual pieces (tokens
// 0..63 of the tile, this warpgroup's 64 rows) copied into the warpgroup's staging by
// 16-byte cp.async while the tile's last stages are still on the tensor cores, so the
// epilogue adds them from shared memory instead of waiting on their loads. The staging
// is [token][row] as the epilogue's fragment writes; pieces past the last token or row
// are not copied (nor stored). A barrier first: every thread of the warpgroup is done
// with the staging of its previous tile.
__device__ __forceinline__ void gm_res_fetch(float* stg, const float* __restrict__ y, int m,
                                             int n, int ldy, int mt, int nt, int c, int tid) {
    constexpr int PIECES = GM_STG_TOKENS * 16 / 128;
    const int row0 = nt * GM_TILE + 64 * c;
    const int rows = min(64, n - row0);
    gm_named_sync(1 + c);
#pragma unroll
    for (int u = 0; u < PIECES; ++u) {
        int tl, col;
        gm_piece(tid, u, tl, col);
        const int tok = mt * GM_TILE + tl;
        if (tok < m && col < rows)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                             gm_smem(stg + tl * GM_STG_LD + col)),
                         "l"(y + (size_t)tok * ldy + row0 + col)
                         : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// A staged round's products: this thread's fragment values of round hf (64 tokens),
// scaled by their tokens' row scales rs[], written to the staging [token][row] at row lr
// (and lr + 8); ADD0: the first round's residual already staged (gm_res_fetch) added,
// product and sum each rounded (no FMA). PAIR: a token pair's row scales read as one
// 8-byte load (rs 8-byte aligned).
template <bool PAIR>
__device__ __forceinline__ void gm_stage_round(const float* acc, const float* rs, float* stg,
                                               int hf, int lr, int t, bool add0) {
    constexpr int HT = GM_STG_TOKENS;
    constexpr int J = HT / 8;  // fragment column groups per round
#pragma unroll
    for (int jj = 0; jj < J; ++jj) {
        const int j = J * hf + jj;
        float2 r2;
        if (PAIR) r2 = *reinterpret_cast<const float2*>(rs + HT * hf + 8 * jj + 2 * t);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int tl = 8 * jj + 2 * t + e;  // token within the round
            const float r = PAIR ? (e ? r2.y : r2.x) : rs[HT * hf + tl];
            float* s0 = stg + tl * GM_STG_LD + lr;
            if (add0) {
                s0[0] = __fadd_rn(__fmul_rn(acc[4 * j + e], r), s0[0]);
                s0[8] = __fadd_rn(__fmul_rn(acc[4 * j + 2 + e], r), s0[8]);
            } else {
                s0[0] = acc[4 * j + e] * r;
                s0[8] = acc[4 * j + 2 + e] * r;
            }
        }
    }
}

// Both consumer warpgroups (256 threads; the SwiGLU epilogue).
__device__ __forceinline__ void gm_pair_sync() { asm volatile("bar.sync 3, 256;" ::: "memory"); }

// EPI (as in gemm_persist_body): 1 = the copy engine for everything; 2 = plain results
// by thread stores, `y +=` by the copy engine; 3 = threads for both (`y +=`: the first
// round's residual pieces already in the staging (gm_res_fetch), the product added to
// them; the second round's loaded first, then added and stored); 4 = SwiGLU: the weight rows
// are gate | up pairs per tile (rows 64 nt .. 64 nt + 63 of gate for warpgroup 0, of
// up for warpgroup 1), and both warpgroups' 256 threads write silu(gate) * up to
// y[token, 64 nt + col] (ldy = n / 2; plain results only).
template <int EPI>
__device__ __forceinline__ void gm_epilogue_staged(const float* acc, float* y,
                                                   const float* rs, int m, int n,
                                                   int ldy, int accumulate, int mt, int nt,
                                                   int c, int wq, int g, int t, int lane,
                                                   float* stg) {
    constexpr int HT = GM_STG_TOKENS;
    constexpr int PIECES = HT * 16 / 128;    // 16-byte pieces per thread per round
    const int lr = 16 * wq + g;              // the thread's first row in the warpgroup's 64
    const int row0 = nt * GM_TILE + 64 * c;  // the warpgroup's first row in y
    const int rows = min(64, n - row0);      // <= 0: a warpgroup past the last row
    const bool threads = EPI >= 3 || (EPI == 2 && !accumulate);
    const u32 bytes = rows > 0 ? (u32)rows * 4u : 0u;
    const u32 sbase = gm_smem(stg);
    const int tid = 32 * wq + lane;
    // Piece u of this thread in round hf: token tl of the round, columns col .. col + 3;
    // its place in y, or null past the last token or row.
    auto piece = [&](int hf, int u, int& tl, int& col) -> float* {
        gm_piece(tid, u, tl, col);
        const int tok = mt * GM_TILE + HT * hf + tl;
        return (tok < m && col < rows) ? y + (size_t)tok * ldy + row0 + col : nullptr;
    };
    // `y +=` (EPI 3): the first round's residuals are in the staging already
    // (gm_res_fetch); the second round's are loaded after its products are staged
    // (earlier, they would need registers the main loop's temporaries hold).
    const bool add = EPI == 3 && accumulate;
#pragma unroll
    for (int hf = 0; hf < GM_TILE / HT; ++hf) {
        // What this warpgroup staged last has been read: by its threads (this barrier),
        // or by the copy engine (lanes of warp 0 issued it; each waits for its own bulk
        // groups first).
        if (!threads && wq == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        // This thread's copy of a row scale (gm_rs_fetch) has landed; the barrier below
        // makes every thread's visible.
        if (hf == 0) asm volatile("cp.async.wait_all;" ::: "memory");
        if (EPI == 4)
            gm_pair_sync();  // both warpgroups read both stagings last round
        else
            gm_named_sync(1 + c);
        gm_stage_round<false>(acc, rs, stg, hf, lr, t, add && hf == 0);
        if (EPI == 4) {
            gm_pair_sync();
            const float* sg = stg - c * (GM_STG_BYTES / 4);  // warpgroup 0: gate
            const float* su = sg + GM_STG_BYTES / 4;         // warpgroup 1: up
            const int tid = 128 * c + 32 * wq + lane;
#pragma unroll
            for (int u = 0; u < HT * 64 / 4 / 256; ++u) {
                const int q = tid + 256 * u;
                const int tl = q >> 4, col = 4 * (q & 15);
                const int tok = mt * GM_TILE + HT * hf + tl;
                const int oc = nt * 64 + col;
                if (tok < m && oc < n / 2) {
                    const float4 gv = *reinterpret_cast<const float4*>(sg + tl * GM_STG_LD + col);
                    const float4 uv = *reinterpret_cast<const float4*>(su + tl * GM_STG_LD + col);
                    *reinterpret_cast<float4*>(y + (size_t)tok * ldy + oc) =
                        make_float4(silu_fp8(gv.x) * uv.x, silu_fp8(gv.y) * uv.y,
                                    silu_fp8(gv.z) * uv.z, silu_fp8(gv.w) * uv.w);
                }
            }
            continue;  // the next round's first barrier orders these reads before its writes
        }
        if (threads) {
            gm_named_sync(1 + c);
            if (add && hf == 1) {
                // `y +=`, second round: every residual piece loaded before any store.
                float4 res[PIECES];
#pragma unroll
                for (int u = 0; u < PIECES; ++u) {
                    int tl, col;
                    const float* p = piece(hf, u, tl, col);
                    res[u] = p ? *reinterpret_cast<const float4*>(p)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int u = 0; u < PIECES; ++u) {
                    int tl, col;
                    float* p = piece(hf, u, tl, col);
                    const float4 v = *reinterpret_cast<const float4*>(stg + tl * GM_STG_LD + col);
                    if (p)
                        *reinterpret_cast<float4*>(p) = make_float4(
                            res[u].x + v.x, res[u].y + v.y, res[u].z + v.z, res[u].w + v.w);
                }
            } else {
#pragma unroll
                for (int u = 0; u < PIECES; ++u) {
                    int tl, col;
                    float* p = piece(hf, u, tl, col);
                    if (p)
                        *reinterpret_cast<float4*>(p) =
                            *reinterpret_cast<const float4*>(stg + tl * GM_STG_LD + col);
                }
            }
            continue;  // the next round's first barrier orders these reads before its writes
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // visible to the copy engine
        gm_named_sync(1 + c);
        if (wq == 0 && rows > 0) {
#pragma unroll
            for (int h2 = 0; h2 < HT / 32; ++h2) {
                const int tl = lane + 32 * h2;
                const int tok = mt * GM_TILE + HT * hf + tl;
                if (tok < m) {
                    float* dst = y + (size_t)tok * ldy + row0;
                    const u32 src = sbase + (u32)(tl * GM_STG_LD * 4);
                    if (accumulate)
                        asm volatile(
                            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], "
                            "[%1], %2;" ::"l"(dst),
                            "r"(src), "r"(bytes)
                            : "memory");
                    else
                        asm volatile(
                            "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                                dst),
                            "r"(src), "r"(bytes)
                            : "memory");
                }
            }
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
}

// A lean round's stores (gm_epilogue_lean): this thread's PIECES 16-byte pieces, piece u
// at yr + u·step in y and sp + 8u rows in the staging. ADD: every residual piece loaded
// before any store, then residual + staged (a constant where inlined). FULL: every piece
// is in y; else piece u is when 8u < left and col < rows.
template <bool FULL>
__device__ __forceinline__ void gm_lean_store(float* yr, size_t step, const float* sp, bool ADD,
                                              int left, int col, int rows) {
    constexpr int PIECES = GM_STG_TOKENS * 16 / 128;
    auto ok = [&](int u) { return FULL || (8 * u < left && col < rows); };
    float4 res[PIECES];
    if (ADD) {
#pragma unroll
        for (int u = 0; u < PIECES; ++u)
            res[u] = ok(u) ? *reinterpret_cast<const float4*>(yr + u * step)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < PIECES; ++u) {
        float4 v = *reinterpret_cast<const float4*>(sp + 8 * u * GM_STG_LD);
        if (ADD) v = make_float4(res[u].x + v.x, res[u].y + v.y, res[u].z + v.z, res[u].w + v.w);
        if (ok(u)) *reinterpret_cast<float4*>(yr + u * step) = v;
    }
}

// The lean staged epilogue (EPI 5): the values of EPI 3 (`y =` and `y +=` by the
// threads, bit for bit) in about half the instructions, since the epilogue's ~14% of the
// GEMM is the consumers' own time (docs/CUDA.md, session 35). On an H100 the whole
// prefill's GEMMs were no faster for it, though q|k|v and o were (session 36). How:
// * `y +=` is the template's choice (ADD), dispatched once per tile, not a test per
//   element pair;
// * a thread's 8 pieces per round are token rows tl0, tl0 + 8, ... of one column group,
//   so a full tile (all 128 tokens, 64 rows) stores them from one base pointer with no
//   per-piece bounds test; other tiles keep the tests;
// * the row scales of a token pair are one 8-byte shared load.
template <bool ADD>
__device__ __forceinline__ void gm_epilogue_lean(const float* acc, float* y, const float* rs,
                                                 int m, int n, int ldy, int mt, int nt, int c,
                                                 int wq, int g, int t, int lane, float* stg) {
    constexpr int HT = GM_STG_TOKENS;
    const int lr = 16 * wq + g;            // the thread's first row in the warpgroup's 64
    const int row0 = nt * GM_TILE + 64 * c;
    const int rows = min(64, n - row0);
    const int tid = 32 * wq + lane;
    // Piece u of a round: token tl0 + 8u of the round, columns col .. col + 3.
    const int tl0 = tid >> 4, col = 4 * (tid & 15);
    const int tok0 = mt * GM_TILE + tl0;
    const bool full = mt * GM_TILE + GM_TILE <= m && rows >= 64;
    const float* const sp = stg + tl0 * GM_STG_LD + col;
    const size_t step = (size_t)8 * ldy;  // between a thread's pieces in y
#pragma unroll
    for (int hf = 0; hf < GM_TILE / HT; ++hf) {
        if (hf == 0) asm volatile("cp.async.wait_all;" ::: "memory");  // gm_rs_fetch landed
        gm_named_sync(1 + c);  // the staging's last readers are done
        gm_stage_round<true>(acc, rs, stg, hf, lr, t, ADD && hf == 0);
        gm_named_sync(1 + c);
        float* const yr = y + (size_t)(tok0 + HT * hf) * ldy + row0 + col;
        const bool add = ADD && hf == 1;  // `y +=`, second round: residuals loaded here
        if (full)
            gm_lean_store<true>(yr, step, sp, add, 0, 0, 0);
        else  // piece u is in y when 8u < left
            gm_lean_store<false>(yr, step, sp, add, m - (tok0 + HT * hf), col, rows);
    }
}
