// The FP4 ring of the grouped MX GEMM (part of the GEMM module, after gemm_epilogue.cuh):
// MXFP4 weights cross L2 as 4-bit codes and become the E4M3 tile in shared memory.
//
// Why: the grouped kernel's main loop runs at the rate its fills land (docs/CUDA.md,
// "Prefill GEMM"), and a stage is 16 KB of weight codes + 16 KB of activation codes. The
// weights' E4M3 codes are MXFP4 values times a power of two (gemm_fold.rs), so half their
// bits carry nothing: filled as FP4 the stage is 24.5 KB instead of 32.5.
//
// Layout (`pack_fp4` in gemm_fp4.rs builds it from the E4M3 tile): per (128-row tile,
// 128-value k block) 8 KB of units of 16 bytes: unit (row r, MX block j) at
// 16·(128·(r / 32) + 32·j + r % 32) holds the row's 32 codes of block j, two 8-byte
// halves for the 16-byte core-matrix rows k16 = 2j and 2j + 1, each two words whose
// nibble i (bits 4i..4i+3) is output byte i (word A, nibbles 0..3) or 4 + i (word B,
// 4..7) of that half. A nibble is an E2M1 code (sign in bit 3); its E4M3 code is the
// magnitude's code at shift u − 5 of the block (u = nibble j of bits 16..31 of the row's
// scale word; byte 0 stays the group scale the consumers read) with the sign in bit 7.
//
// Pipeline: a fill ring of GM_F4_STAGES slots, each the activation tile, the weights'
// codes, scales and C (GM_F4_TX bytes, completing on full[s]), and a ring of GM_F4_A
// weight tiles in E4M3. Thread 0 of the producer warpgroup fills the fill ring
// (gm_persist_fill in gemm_mx.cu, which fills the E4M3 ring too); its warps 1..3 wait
// for full[s] and for a free weight tile (aempty), convert the codes into it, make it
// visible to the tensor cores (async proxy) and arrive on ready[s], which the consumers
// wait for instead of full[s]; the consumers read the activations from the fill slot
// and the weights from the weight tile, and release both (empty, aempty). Five stages of fills are in flight (122.5 KB
// per multiprocessor), and the converters may run up to three stages ahead of the
// consumers. The thread that issues the copies writes no shared memory, so it never
// executes the proxy fence: that fence (MEMBAR.ALL.CTA in SASS) also waits for the
// thread's bulk copies still in flight, which made a first version, where thread 0 also
// converted, wait for its newest fill every stage (2.3 times slower; session 37).
// Measured on an H100 (sessions 37, 38), every later version ran at 0.53-0.56 of the
// E4M3 ring's rate whatever the fills in flight: 3 code slots beside 5 E4M3 stages, 6
// fill slots with 2 weight tiles, and these 5 with 3 (the fastest, 540 TFLOP/s against
// 957-1016), so the fills' depth is not what bounds it (docs/CUDA.md, "The FP4 ring").

#define GM_F4_BYTES 8192
#define GM_F4_TX (GM_F4_BYTES + GM_TILE_BYTES + 512 + 16)
#define GM_F4_STAGES 5       // fill ring slots
#define GM_F4_A 3            // E4M3 weight tiles
#define GM_F4_CODES GM_TILE_BYTES                  // in a fill slot, after the activations
#define GM_F4_SC (GM_F4_CODES + GM_F4_BYTES)       // the weight scales (512 bytes)
#define GM_F4_C (GM_F4_SC + 512)                   // the activation block scales (16)
#define GM_F4_SLOT 25600                           // 25104 rounded up to 1 KB

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

// One unit: the 32 codes of (row r, block j) (`raw`, shift nibble j of the row's scale
// word `sw`) as the two 16-byte core-matrix rows at `dst` and `dst + 8` (uint4s).
__device__ __forceinline__ void gm_f4_unit(uint4* dst, uint4 raw, u32 sw, int j) {
    const u32 us = (sw >> (16 + 4 * j)) & 0xFu;
    const u32 l0 = GM_F4_L0 + us * 0x08080800u, l1 = GM_F4_L1 + us * 0x08080808u;
    dst[0] = gm_f4_half(raw.x, raw.y, l0, l1);
    dst[8] = gm_f4_half(raw.z, raw.w, l0, l1);
}

// Thread t (0..95: warps 1..3 of the producer warpgroup) converts one stage's `codes`
// (row scale words at `sc`) into the E4M3 tile `at`. The 512 units form 16 groups of 32
// (g = 4 · (r / 32) + j: the 512 contiguous bytes at 512 · g), and warp w takes groups
// w, w + 3, ..., one unit per lane: its loads read 512 contiguous bytes and each 8-lane
// group of its stores writes 128 (no bank conflicts). The next group's code and scale
// words are loaded before this one is converted, so a warp waits for shared memory
// once per stage rather than once per group.
__device__ __forceinline__ void gm_f4_convert(u8* at, const u8* codes, const u8* sc, int t) {
    const int w = t >> 5, lane = t & 31;
    const uint4* src = reinterpret_cast<const uint4*>(codes) + lane;
    const u32* scw = reinterpret_cast<const u32*>(sc) + lane;
    // Core-matrix rows (r / 8, k16, r % 8) at 16 bytes each: lane's part, then group's.
    uint4* const dst = reinterpret_cast<uint4*>(at) + 64 * (lane >> 3) + (lane & 7);
    int g = w;
    uint4 raw = src[32 * g];
    u32 sw = scw[32 * (g >> 2)];
    for (;;) {
        const int gn = g + 3;
        uint4 nraw = raw;
        u32 nsw = sw;
        if (gn < 16) {
            nraw = src[32 * gn];
            nsw = scw[32 * (gn >> 2)];
        }
        gm_f4_unit(dst + 256 * (g >> 2) + 16 * (g & 3), raw, sw, g & 3);
        if (gn >= 16) break;
        g = gn;
        raw = nraw;
        sw = nsw;
    }
    // The tensor cores read shared memory through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Warps 1..3 of the producer warpgroup (t = thread − 32): every stage, in ring order,
// into weight tile it % NA once the consumers are done with its previous stage.
template <int NS, int NA>
__device__ __forceinline__ void gm_f4_converters(u8* ring, u8* aring, u64* full, u64* ready,
                                                 u64* aempty, int tiles, int kblocks, int t) {
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int total = my_tiles * kblocks;
    for (int it = 0; it < total; ++it) {
        const int s = it % NS, a = it % NA;
        gm_bar_wait<1>(&full[s], (it / NS) & 1);
        if (it >= NA) gm_bar_wait<1>(&aempty[a], ((it / NA) - 1) & 1);
        const u8* st = ring + s * GM_F4_SLOT;
        gm_f4_convert(aring + a * GM_TILE_BYTES, st + GM_F4_CODES, st + GM_F4_SC, t);
        __syncwarp();
        if ((t & 31) == 0) gm_bar_arrive(&ready[s]);
    }
}
