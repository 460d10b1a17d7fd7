// Favlo CUDA: MXFP8 GEMM on the Hopper tensor cores (wgmma, sm_90a), for prefill.
//
// Y[m, n] = sum_k X[m, k] * W[n, k]   (X: activations, m tokens; W: MX weights, n rows)
//
// * W (MXFP8, E4M3 or E5M2 codes, one E8M0 scale per 32 values along k) is re-tiled on
//   upload (gemm.rs): per (128-row tile, 128-value k block) 16 KB of codes in the wgmma
//   "core matrix" order [row/8 16][k/16 8][row%8 8][k%16 16] (no swizzle), then the
//   scales of the same tile/k block, [row 128][4 blocks] bytes.
// * X is quantized on the device (`gemm_row_scale` + `gemm_quant_x`) to E4M3 codes with
//   a power of two R[m] per token row and a power of two C per (128-token tile, 32-value
//   block): x = code * R[m] * C[tile, kb]. Codes go straight into the same tiled order.
//   E4M3 is floating point, so sharing C over the tile's (row-normalised) rows costs
//   precision only for values more than 2^14 below the block's largest.
// * The GEMM computes the transposed product D = W · X^T on the tensor cores (wgmma M =
//   weight rows, N = tokens), one k=32 step (= one MX block) at a time into a temporary
//   accumulator, and promotes it as acc += tmp * (sw[n, kb] * C[kb]): the combined
//   scale depends on the weight row only (a thread owns 2 rows), so the promotion is one
//   FFMA per accumulator per block; R[m] is applied once in the epilogue.
// * Block: warpgroup 0 = producer (one thread issues bulk copies into a ring of
//   STAGES stages, mbarrier-completed), warpgroups 1, 2 = consumers, 64 weight rows each,
//   128 tokens, so one warpgroup's promotion overlaps the other's wgmma.
// * Consumer loops (kernels): `gemm_mxfp8_*` serial (wgmma, wait, promote), `*_pipe`
//   (two temporaries: step i+1 on the tensor cores while step i is promoted), `*_persist`
//   (the pipelined loop in a persistent grid, the default), `*_w3` (three consumer warp
//   groups, 192 weight rows per block, serial loop); `*_probe` is a timing probe and
//   `*_swap` a descriptor diagnostic. `*_s` / `*_v` / `*_a`: the persistent kernels with
//   the tile written through shared memory (`gm_epilogue_staged`; `_v`, plain tiles as
//   16-byte row stores and `y +=` as copy-engine reduce-adds; `_a`, `y +=` too by 16-byte
//   thread loads, adds and stores, the default). Measured
//   on the H200 in docs/CUDA.md.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char u8;

#define GM_TILE 128                  // tokens per block = weight rows per block
#define GM_KB 128                    // k values per stage
#define GM_TILE_BYTES 16384          // 128 x 128 codes
#define GM_SCALE_OFF (2 * GM_TILE_BYTES)
#define GM_C_OFF (GM_SCALE_OFF + 512)
#define GM_STAGE_TX (2 * GM_TILE_BYTES + 512 + 16)
#define GM_STAGE_BYTES 33792         // GM_STAGE_TX rounded up to 1 KB
#define GM_STAGES 6

__device__ __forceinline__ u32 gm_smem(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void gm_bar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(gm_smem(bar)), "r"(count));
}
__device__ __forceinline__ void gm_bar_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(gm_smem(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void gm_bar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(gm_smem(bar)) : "memory");
}
__device__ __forceinline__ void gm_bar_wait(u64* bar, u32 parity) {
    u32 ok;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(ok)
            : "r"(gm_smem(bar)), "r"(parity)
            : "memory");
    } while (!ok);
}
__device__ __forceinline__ void gm_bulk(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(gm_smem(dst)),
        "l"(src), "r"(bytes), "r"(gm_smem(bar))
        : "memory");
}

// wgmma shared-memory descriptor, no swizzle: start address, leading byte offset (between
// core matrices along k) and stride byte offset (between 8-row groups).
template <int SWAP>
__device__ __forceinline__ u64 gm_desc(u32 addr) {
    const u64 lbo = SWAP ? 1024 : 128;
    const u64 sbo = SWAP ? 128 : 1024;
    return (u64)((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32);
}

#define GM_D8(i)                                                                           \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]),            \
        "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define GM_REGS                                                                            \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "    \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, " \
    "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, " \
    "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define GM_MMA(types, acc)                                                                 \
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, " #acc ", 0;\n\t"                     \
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32." types " " GM_REGS               \
                 ", %64, %65, p, 1, 1;\n\t}"                                                   \
                 : GM_D8(0), GM_D8(8), GM_D8(16), GM_D8(24), GM_D8(32), GM_D8(40), GM_D8(48), \
                   GM_D8(56)                                                                   \
                 : "l"(da), "l"(db)                                                            \
                 : "memory")

// d = A · B (ACC = 0: the old contents are not added) or d += A · B (ACC = 1), m64 n128
// k32, A = weights (E4M3 or E5M2), B = activations (E4M3).
template <int WFMT, int ACC>
__device__ __forceinline__ void gm_wgmma(float* d, u64 da, u64 db) {
    if (WFMT == 0 && ACC == 0) GM_MMA("e4m3.e4m3", 0);
    if (WFMT == 0 && ACC == 1) GM_MMA("e4m3.e4m3", 1);
    if (WFMT == 1 && ACC == 0) GM_MMA("e5m2.e4m3", 0);
    if (WFMT == 1 && ACC == 1) GM_MMA("e5m2.e4m3", 1);
}

__device__ __forceinline__ float gm_e8m0(u32 b) {
    return __uint_as_float(b << 23);  // byte 0 reads as 0 (2^-127: below any f32 result)
}

// acc += tmp · (f0 for the thread's first row, f1 for its second): one step's (or,
// grouped, one stage's) promotion, one FFMA per accumulator.
__device__ __forceinline__ void gm_promote(float* acc, const float* tmp, float f0, float f1) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        acc[4 * j + 0] = fmaf(tmp[4 * j + 0], f0, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(tmp[4 * j + 1], f0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(tmp[4 * j + 2], f1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(tmp[4 * j + 3], f1, acc[4 * j + 3]);
    }
}

// w: [n/128][kblocks][16 KB]; ws: [n/128][kblocks][128][4]; xq: [m/128][kblocks][16 KB];
// xc: [m/128][kblocks * 4]; xr: [m/128 * 128]; y: [m][ldy] (accumulate: y += ...).
template <int NS = GM_STAGES>
__device__ __forceinline__ void gm_init_bars(u64* full, u64* empty) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; ++s) {
            gm_bar_init(&full[s], 1);
            gm_bar_init(&empty[s], 8);  // 2 consumer warpgroups x 4 warps
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}

// One thread fills the ring: per k block the weight tile, the activation tile, the
// weight scales and the activation block scales, all completing on full[stage].
__device__ __forceinline__ void gm_producer(u8* ring, u64* full, u64* empty,
                                            const u8* __restrict__ w, const u8* __restrict__ ws,
                                            const u8* __restrict__ xq,
                                            const float* __restrict__ xc, int mt, int nt,
                                            int kblocks) {
    const u8* wsrc = w + (size_t)nt * kblocks * GM_TILE_BYTES;
    const u8* xsrc = xq + (size_t)mt * kblocks * GM_TILE_BYTES;
    const u8* ssrc = ws + (size_t)nt * kblocks * 512;
    const float* csrc = xc + (size_t)mt * kblocks * 4;
    for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % GM_STAGES;
        if (kb >= GM_STAGES) gm_bar_wait(&empty[s], ((kb / GM_STAGES) - 1) & 1);
        u8* st = ring + s * GM_STAGE_BYTES;
        gm_bar_expect(&full[s], GM_STAGE_TX);
        gm_bulk(st, wsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
        gm_bulk(st + GM_TILE_BYTES, xsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
        gm_bulk(st + GM_SCALE_OFF, ssrc + (size_t)kb * 512, 512, &full[s]);
        gm_bulk(st + GM_C_OFF, csrc + (size_t)kb * 4, 16, &full[s]);
    }
}

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
    constexpr int J = HT / 8;                // fragment column groups per round
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
#pragma unroll
        for (int jj = 0; jj < J; ++jj) {
            const int j = J * hf + jj;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int tl = 8 * jj + 2 * t + e;  // token within the round
                const float r = rs[HT * hf + tl];
                float* s0 = stg + tl * GM_STG_LD + lr;
                if (add && hf == 0) {  // the residual staged by gm_res_fetch, plus the product
                    s0[0] = __fadd_rn(__fmul_rn(acc[4 * j + e], r), s0[0]);
                    s0[8] = __fadd_rn(__fmul_rn(acc[4 * j + 2 + e], r), s0[8]);
                } else {
                    s0[0] = acc[4 * j + e] * r;
                    s0[8] = acc[4 * j + 2 + e] * r;
                }
            }
        }
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
template <int WFMT, int NST, int NS = GM_STAGES>
__device__ __forceinline__ void gm_group_steps(float* acc, float* ta, float* tb, u8* ring,
                                               u64* full, u64* empty, int kb, int c, int r0,
                                               int lane) {
    const u32 ring0 = gm_smem(ring);
    float f0[2], f1[2];
    auto scales = [&](int st) {
        const int s = (kb + st) % NS;
        gm_bar_wait(&full[s], ((kb + st) / NS) & 1);
        const u8* p = ring + s * GM_STAGE_BYTES;
        const float cq = *reinterpret_cast<const float*>(p + GM_C_OFF);
        f0[st & 1] = gm_e8m0(p[GM_SCALE_OFF + r0 * 4]) * cq;
        f1[st & 1] = gm_e8m0(p[GM_SCALE_OFF + (r0 + 8) * 4]) * cq;
    };
    auto issue = [&](float* d, int st) {
        const u32 b = ring0 + ((kb + st) % NS) * GM_STAGE_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        gm_wgmma<WFMT, 0>(d, gm_desc<0>(b + 8192 * c), gm_desc<0>(b + GM_TILE_BYTES));
#pragma unroll
        for (int q = 1; q < 4; ++q)
            gm_wgmma<WFMT, 1>(d, gm_desc<0>(b + 256 * q + 8192 * c),
                              gm_desc<0>(b + 256 * q + GM_TILE_BYTES));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
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
        if (lane == 0) gm_bar_arrive(&empty[(kb + i) % NS]);
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
// loads, adds and stores); 4 = SwiGLU of gate | up row pairs (n a multiple of 128).
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
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int mt = tile % m_tiles, nt = tile / m_tiles;
                const u8* wsrc = w + (size_t)nt * kblocks * GM_TILE_BYTES;
                const u8* xsrc = xq + (size_t)mt * kblocks * GM_TILE_BYTES;
                const u8* ssrc = ws + (size_t)nt * kblocks * 512;
                const float* csrc = xc + (size_t)mt * kblocks * 4;
                for (int kb = 0; kb < kblocks; ++kb, ++it) {
                    const int s = it % NS;
                    if (it >= NS) gm_bar_wait(&empty[s], ((it / NS) - 1) & 1);
                    u8* st = gm_ring + s * GM_STAGE_BYTES;
                    gm_bar_expect(&full[s], GM_STAGE_TX);
                    gm_bulk(st, wsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
                    gm_bulk(st + GM_TILE_BYTES, xsrc + (size_t)kb * GM_TILE_BYTES,
                            GM_TILE_BYTES, &full[s]);
                    gm_bulk(st + GM_SCALE_OFF, ssrc + (size_t)kb * 512, 512, &full[s]);
                    gm_bulk(st + GM_C_OFF, csrc + (size_t)kb * 4, 16, &full[s]);
                }
            }
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
        __shared__ float gm_rs[2][GM_TILE];
        const bool staged = EPI == 4 || (EPI && (n & 3) == 0 && (ldy & 3) == 0);
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int mt = tile % m_tiles, nt = tile / m_tiles;
            if (staged) gm_rs_fetch(&gm_rs[c][32 * wq + lane], xr, mt * GM_TILE + 32 * wq + lane, m);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] = 0.f;
            constexpr int U = GROUP ? GROUP : NST;  // stages per call
            // `y +=` by the threads: the first round's residuals are fetched into the
            // staging before the call that runs any of the tile's last U stages.
            bool fetch = EPI == 3 && staged && accumulate;
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
            if (staged)
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
    if (tid == 0) {
        for (int s = 0; s < G3_STAGES; ++s) {
            gm_bar_init(&full[s], 1);
            gm_bar_init(&empty[s], 12);  // 3 consumer warpgroups x 4 warps
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
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


// ---- activation quantization ----

// r[row] = 2^floor(log2(max |x[row, :k]|)) for row < m (1 for zero rows), 1 for
// m <= row < m_pad. One warp per row.
extern "C" __global__ void gemm_row_scale(const float* __restrict__ x, int m, int k, int ldx,
                                          float* __restrict__ r, int m_pad) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= m_pad) return;
    u32 amax = 0;
    if (row < m) {
        const float* p = x + (size_t)row * ldx;
        if ((k & 3) == 0 && (ldx & 3) == 0) {
            const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll 4
            for (int i = lane; i < k / 4; i += 32) {
                const float4 v = p4[i];
                const u32 a = max(__float_as_uint(v.x) & 0x7fffffffu,
                                  __float_as_uint(v.y) & 0x7fffffffu);
                const u32 b = max(__float_as_uint(v.z) & 0x7fffffffu,
                                  __float_as_uint(v.w) & 0x7fffffffu);
                amax = max(amax, max(a, b));
            }
        } else {
            for (int i = lane; i < k; i += 32)
                amax = max(amax, __float_as_uint(p[i]) & 0x7fffffffu);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) {
        const u32 e = amax & 0x7f800000u;
        r[row] = (e == 0u || e == 0x7f800000u) ? 1.0f : __uint_as_float(e);
    }
}

// One block per (128-value k block kb, 128-token tile mt), 256 threads: thread (warp wp,
// lane) holds values k = 4·lane .. 4·lane + 3 of the rows 8i + wp (i < 16), divided by
// r[row]. C for each 32-value block = the E4M3 `Ceil` MX scale of the block's largest
// |x / r| over the tile's rows (1 if all zero), or (group) of the whole 128-value block,
// written to all four of its slots; codes = RNE E4M3 of x / (r·C).
extern "C" __global__ void __launch_bounds__(256)
    gemm_quant_x(const float* __restrict__ x, int m, int k, int ldx,
                 const float* __restrict__ r, u8* __restrict__ xq, float* __restrict__ xc,
                 int kblocks, int group) {
    __shared__ u32 red[8][4];
    const int kb = blockIdx.x, mt = blockIdx.y;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int col = kb * GM_KB + 4 * lane;
    float v[16][4];
    u32 amax = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const int rr = 8 * i + wp;
        const int row = mt * GM_TILE + rr;
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row < m) {
            const float* p = x + (size_t)row * ldx + col;
            if (col + 3 < k && (ldx & 3) == 0) {
                q = *reinterpret_cast<const float4*>(p);
            } else {
                if (col < k) q.x = p[0];
                if (col + 1 < k) q.y = p[1];
                if (col + 2 < k) q.z = p[2];
                if (col + 3 < k) q.w = p[3];
            }
            const float inv = 1.0f / r[row];
            q.x *= inv;
            q.y *= inv;
            q.z *= inv;
            q.w *= inv;
        }
        v[i][0] = q.x;
        v[i][1] = q.y;
        v[i][2] = q.z;
        v[i][3] = q.w;
#pragma unroll
        for (int e = 0; e < 4; ++e) amax = max(amax, __float_as_uint(v[i][e]) & 0x7fffffffu);
    }
    // Lanes 8b .. 8b + 7 hold block b of this k block.
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((lane & 7) == 0) red[wp][lane >> 3] = amax;
    __syncthreads();
    const int b = lane >> 3;
    u32 bmax = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) bmax = max(bmax, red[i][b]);
    if (group) {  // one C for the whole 128-value k block (grouped promotion)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) bmax = max(bmax, red[i][bb]);
    }
    // E4M3 Ceil rule: the smallest 2^s with bmax / 2^s <= 448 (= 1.75 * 2^8).
    float cs = 1.0f;
    if (bmax != 0u) {
        int biased = (int)(bmax >> 23) - 8;
        if ((bmax & 0x7fffffu) > 0x600000u) biased += 1;
        biased = min(max(biased, 1), 254);
        cs = __uint_as_float((u32)biased << 23);
    }
    if (threadIdx.x < 32 && (lane & 7) == 0) xc[((size_t)mt * kblocks + kb) * 4 + b] = cs;
    const float ic = 1.0f / cs;
    u8* tile = xq + ((size_t)mt * kblocks + kb) * GM_TILE_BYTES;
    const int kk = 4 * lane;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const int rr = 8 * i + wp;
        unsigned short lo, hi;
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
            : "=h"(lo)
            : "f"(v[i][1] * ic), "f"(v[i][0] * ic));
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
            : "=h"(hi)
            : "f"(v[i][3] * ic), "f"(v[i][2] * ic));
        const int off = ((rr >> 3) * 8 + (kk >> 4)) * 128 + (rr & 7) * 16 + (kk & 15);
        *reinterpret_cast<u32*>(tile + off) = (u32)lo | ((u32)hi << 16);
    }
}
