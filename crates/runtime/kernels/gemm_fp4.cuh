// The FP4 ring of the grouped MX GEMM (part of the GEMM module, after gemm_epilogue.cuh):
// MXFP4 weights cross L2 as 4-bit codes and become the E4M3 tile in shared memory.
//
// Why: the grouped kernel's main loop runs at the rate its fills land (docs/CUDA.md,
// "Prefill GEMM"), and a stage is 16 KB of weight codes + 16 KB of activation codes. The
// weights' E4M3 codes are MXFP4 values times a power of two (gemm_fold.rs), so half their
// bits carry nothing: filled as FP4 the stage is 24.5 KB instead of 32.5.
//
// Layout (`pack_fp4` in gemm_tile.rs builds it from the E4M3 tile): per (128-row tile,
// 128-value k block) 8 KB, in the order the producer warpgroup's 128 threads read it:
// thread (warp wp, lane l) converts row 32·wp + l, and its j-th 16 bytes (j = 0..3, at
// 16·(128·wp + 32·j + l)) are the row's 32 codes of MX block j: two 8-byte halves for
// the 16-byte core-matrix rows k16 = 2j and 2j + 1, each two words whose nibble i
// (bits 4i..4i+3) is output byte i (word A, nibbles 0..3) or 4 + i (word B, 4..7) of
// that half. A nibble is an E2M1 code (sign in bit 3); its E4M3 code is the magnitude's
// code at shift u − 5 of the block (u = nibble j of bits 16..31 of the row's scale
// word; byte 0 stays the group scale the consumers read) with the sign in bit 7.
//
// Pipeline: thread 0 of the producer warpgroup bulk-copies the 8 KB into the upper half
// of the stage's weight tile (plus the activation tile, scales and C: GM_F4_TX bytes,
// completing on full[s]); the four producer warps wait for full[s], load their codes,
// meet at a named barrier (the tile is converted in place: the E4M3 output overwrites
// the FP4 input), write the E4M3 tile, make it visible to the tensor cores (async
// proxy) and arrive on ready[s], which the consumers wait for instead of full[s].

#define GM_F4_BYTES 8192
#define GM_F4_TX (GM_F4_BYTES + GM_TILE_BYTES + 512 + 16)
#define GM_F4_SYNC 4  // named barrier of the producer warpgroup (1..3: the epilogues')

// Whether phase `parity` of `bar` is complete, without waiting.
__device__ __forceinline__ bool gm_bar_test(u64* bar, u32 parity) {
    u32 ok;
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(gm_smem(bar)), "r"(parity)
        : "memory");
    return ok != 0;
}

__device__ __forceinline__ u32 gm_prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// Four E4M3 codes from the four nibbles of bits 0..15 (HI = 0) or 16..31 (HI = 1) of
// `r`: the magnitudes through the shifted table (l0, l1: codes of magnitudes 0..7), the
// signs by prmt's sign-replicating mode from `r` and `r4 = r << 4` (bit 3 of a nibble is
// the top bit of a byte of one of the two).
template <int HI>
__device__ __forceinline__ u32 gm_f4_word(u32 r, u32 r4, u32 l0, u32 l1) {
    const u32 sel = (HI ? (r >> 16) : r) & 0x7777u;
    const u32 mag = gm_prmt(l0, l1, sel);
    const u32 sgn = gm_prmt(r, r4, HI ? 0xBFAEu : 0x9D8Cu);
    return mag | (sgn & 0x80808080u);
}

// One 8-byte half: 16 E4M3 codes.
__device__ __forceinline__ uint4 gm_f4_half(u32 r0, u32 r1, u32 l0, u32 l1) {
    const u32 a = r0 << 4, b = r1 << 4;
    return make_uint4(gm_f4_word<0>(r0, a, l0, l1), gm_f4_word<1>(r0, a, l0, l1),
                      gm_f4_word<0>(r1, b, l0, l1), gm_f4_word<1>(r1, b, l0, l1));
}

// E4M3 codes of the E2M1 magnitudes 0, 0.5, 1, 1.5 | 2, 3, 4, 6 at shift −5 (u = 0);
// each step of u adds 8 (one binade) to every non-zero code. u ≤ 11 keeps 6·2^6 = 384.
#define GM_F4_L0 (0x3C383000u - 5u * 0x08080800u)
#define GM_F4_L1 (0x4C484440u - 5u * 0x08080808u)

// Thread tid (0..127) of the producer warpgroup converts stage `st` in place.
__device__ __forceinline__ void gm_f4_convert(u8* st, int tid) {
    const int wp = tid >> 5, lane = tid & 31;
    const uint4* src = reinterpret_cast<const uint4*>(st + GM_F4_BYTES) + 128 * wp + lane;
    uint4 raw[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) raw[j] = src[32 * j];
    const u32 sw = *reinterpret_cast<const u32*>(st + GM_SCALE_OFF + 4 * (32 * wp + lane));
    __syncwarp();               // the warp converged (thread 0 issues copies on its own)
    gm_named_sync(GM_F4_SYNC);  // every code read before any is overwritten
    // Row 32·wp + lane: core-matrix rows (row / 8, k16, row % 8) at 16 bytes each.
    uint4* dst = reinterpret_cast<uint4*>(st) + 64 * (4 * wp + (lane >> 3)) + (lane & 7);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 u = (sw >> (16 + 4 * j)) & 0xFu;
        const u32 l0 = GM_F4_L0 + u * 0x08080800u, l1 = GM_F4_L1 + u * 0x08080808u;
        dst[8 * (2 * j)] = gm_f4_half(raw[j].x, raw[j].y, l0, l1);
        dst[8 * (2 * j + 1)] = gm_f4_half(raw[j].z, raw[j].w, l0, l1);
    }
    // The tensor cores read shared memory through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The producer warpgroup of the FP4 ring over the persistent grid's tiles (all 128
// threads). Thread 0 keeps up to NS stages in flight: the one about to be converted is
// waited for, later ones are issued when their slot is already free (so a slot still in
// use never holds up the conversion of one that has landed).
template <int NS>
__device__ __forceinline__ void gm_f4_producer(u8* ring, u64* full, u64* ready, u64* empty,
                                               const u8* __restrict__ w,
                                               const u8* __restrict__ ws,
                                               const u8* __restrict__ xq,
                                               const float* __restrict__ xc, int m_tiles,
                                               int tiles, int kblocks) {
    const int tid = threadIdx.x, lane = tid & 31;
    int next = 0, ntile = blockIdx.x, nkb = 0;  // thread 0: the next stage to issue
    auto issue = [&](int limit, bool wait) {
        while (next < limit && ntile < tiles) {
            const int s = next % NS;
            if (next >= NS) {
                const u32 ph = ((next / NS) - 1) & 1;
                if (wait)
                    gm_bar_wait<1>(&empty[s], ph);
                else if (!gm_bar_test(&empty[s], ph))
                    return;
            }
            const int mt = ntile % m_tiles, nt = ntile / m_tiles;
            const size_t wk = (size_t)nt * kblocks + nkb, xk = (size_t)mt * kblocks + nkb;
            u8* st = ring + s * GM_STAGE_BYTES;
            gm_bar_expect(&full[s], GM_F4_TX);
            gm_bulk(st + GM_F4_BYTES, w + wk * GM_F4_BYTES, GM_F4_BYTES, &full[s]);
            gm_bulk(st + GM_TILE_BYTES, xq + xk * GM_TILE_BYTES, GM_TILE_BYTES, &full[s]);
            gm_bulk(st + GM_SCALE_OFF, ws + wk * 512, 512, &full[s]);
            gm_bulk(st + GM_C_OFF, xc + xk * 4, 16, &full[s]);
            ++next;
            if (++nkb == kblocks) {
                nkb = 0;
                ntile += gridDim.x;
            }
            wait = false;
        }
    };
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int total = my_tiles * kblocks;
    for (int it = 0; it < total; ++it) {
        if (tid == 0) {
            issue(it + 1, true);    // this stage, waiting for its slot if need be
            issue(it + NS, false);  // and the ones after it whose slots are free
        }
        const int s = it % NS;
        gm_bar_wait<1>(&full[s], (it / NS) & 1);
        gm_f4_convert(ring + s * GM_STAGE_BYTES, tid);
        __syncwarp();
        if (lane == 0) gm_bar_arrive(&ready[s]);
    }
}
