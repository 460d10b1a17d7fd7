// Favlo CUDA: MXFP8 GEMM on the Hopper tensor cores (wgmma, sm_90a), for prefill: the
// design, the tile constants and what every kernel shares (mbarriers, bulk copies,
// wgmma, the promotion, the producer). The module is silu_fp8.cuh, this file,
// gemm_epilogue.cuh, gemm_mx.cu and gemm_quant.cu, in that order (src/cuda/gemm.rs).
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
//   thread loads, adds and stores, the default before `_l`; `_l`, `_a`'s values by the
//   lean epilogue, the default). Measured in docs/CUDA.md.

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
// Waits until phase `parity` of `bar` is complete. HINT: a thread whose phase is not
// complete sleeps in the barrier (suspend-time hint, up to ~10 ms) instead of coming back
// to issue the test again.
template <int HINT = 0>
__device__ __forceinline__ void gm_bar_wait(u64* bar, u32 parity) {
    u32 ok;
    do {
        if (HINT)
            asm volatile(
                "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n\t"
                "selp.u32 %0, 1, 0, p;\n\t}"
                : "=r"(ok)
                : "r"(gm_smem(bar)), "r"(parity), "r"(0x989680u)
                : "memory");
        else
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

// One 128-k stage of a consumer warpgroup: 4 k steps of m64n128k32 into d from the
// descriptors da, db (k step q 256 bytes further, +16 in the descriptor), committed as
// one wgmma group. ZERO: the first step overwrites d instead of adding to it.
template <int WFMT, int ZERO>
__device__ __forceinline__ void gm_wgmma_stage(float* d, u64 da, u64 db) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    gm_wgmma<WFMT, ZERO ? 0 : 1>(d, da, db);
#pragma unroll
    for (int q = 1; q < 4; ++q) gm_wgmma<WFMT, 1>(d, da + 16 * q, db + 16 * q);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
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
// The ring's barriers: `full` completes on the producer's one arrival (and its bytes),
// `empty` on one arrival per consumer warp (WARPS: 2 warpgroups x 4, or 3 x 4).
template <int NS = GM_STAGES, int WARPS = 8>
__device__ __forceinline__ void gm_init_bars(u64* full, u64* empty) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; ++s) {
            gm_bar_init(&full[s], 1);
            gm_bar_init(&empty[s], WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}

// One thread fills the ring with tile (mt, nt): per k block the weight tile, the
// activation tile, the weight scales and the activation block scales, all completing on
// full[stage]. `it0`: the ring's stage counter at the tile's first k block (the
// persistent kernels run it on across their tiles); NS: the ring's stages; HINT: the
// waits sleep (gm_bar_wait).
template <int NS = GM_STAGES, int HINT = 0>
__device__ __forceinline__ void gm_producer(u8* ring, u64* full, u64* empty,
                                            const u8* __restrict__ w, const u8* __restrict__ ws,
                                            const u8* __restrict__ xq,
                                            const float* __restrict__ xc, int mt, int nt,
                                            int kblocks, int it0 = 0) {
    const u8* wsrc = w + (size_t)nt * kblocks * GM_TILE_BYTES;
    const u8* xsrc = xq + (size_t)mt * kblocks * GM_TILE_BYTES;
    const u8* ssrc = ws + (size_t)nt * kblocks * 512;
    const float* csrc = xc + (size_t)mt * kblocks * 4;
    for (int kb = 0; kb < kblocks; ++kb) {
        const int it = it0 + kb, s = it % NS;
        if (it >= NS) gm_bar_wait<HINT>(&empty[s], ((it / NS) - 1) & 1);
        u8* st = ring + s * GM_STAGE_BYTES;
        gm_bar_expect(&full[s], GM_STAGE_TX);
        gm_bulk(st, wsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
        gm_bulk(st + GM_TILE_BYTES, xsrc + (size_t)kb * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
        gm_bulk(st + GM_SCALE_OFF, ssrc + (size_t)kb * 512, 512, &full[s]);
        gm_bulk(st + GM_C_OFF, csrc + (size_t)kb * 4, 16, &full[s]);
    }
}
