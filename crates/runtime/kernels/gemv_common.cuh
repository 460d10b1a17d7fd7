// Favlo CUDA kernels: MXFP4 / MXFP8 (E4M3) GEMV on the tensor cores, y = W x: what
// every GEMV kernel shares (loads, fragments, the mma, the fused epilogue). The module
// is this file, then gemv_mma.cu, gemv_pp.cu, gemv_read_probe.cu, gemv_ring.cu,
// gemv_prep.cu, gemv_batch.cu and gemv_chain.cu, in that order (src/cuda/gemv.rs).
//
// Variants of how the weights reach the registers (same fragments and arithmetic):
// gemv_mx*_mma (register double buffer), gemv_mx*_pp (register ping-pong),
// gemv_mx*_ring{2,3,4} (per-warp shared-memory ring, cp.async), gemv_mx*_tma{2,3,4}
// (the ring filled by bulk copies), and timing probes; docs/CUDA.md has the figures.
//
// Weights: the favlo-mx codes (one E8M0 scale per 32 values; FP4 words re-encoded, see
// `a_frag<4>`), re-tiled on upload (`MxTiled`, src/cuda/gemv.rs; described at the kernel).
//
// Why tensor cores for a GEMV: the CUDA-core version spent ~4 instructions per value
// (decode, f16->f32 widen, FFMA) and was issue-bound at 35% of copy bandwidth. Here
// weights are decoded to f16x2 (FP4: shifts and masks of words re-encoded on upload,
// value x 2^-14, exact; FP8: the hardware cvt.rn.f16x2.e4m3x2, exact) and fed to
// mma.sync.m16n8k16 (f32 accumulate),
// which does the multiply-adds and the widening for free.
//
// x keeps ~22 bits: `gemv_prep_x` splits x, per 32-value block scaled by 2^e so the
// block maximum lies in [2^14, 2^15), into f16 hi + f16 lo (x*2^e ~ hi + lo). The eight
// B columns of the mma are (hi, lo) x (the block of thread-in-group t = 0..3): column
// n = 2t + h holds block t's hi (h = 0) or lo (h = 1) values on the k slots that
// thread t's A registers cover and zero elsewhere. So after the 8 k-steps of one
// 32-value block, thread (g, t) holds C[row, 2t] + C[row, 2t+1] = the block's partial
// dot product for its own rows and its own block, and applies that block's E8M0 scale
// (and 2^-e) in f32. The k order inside a step is free as long as A and B agree:
// within every 8 values x is stored in the order (0,2,4,6,1,3,5,7), which is what the
// FP4 -> E4M3 decode (even nibbles, odd nibbles) and the FP8 byte permute produce.
//
// Work split: a warp owns 32 rows (two m16 tiles: rows g, g+8, g+16, g+24 for lane
// group g = lane/4) and 128-byte chunks of every row (lane t = lane%4 loads two 16-byte
// pieces per row with non-caching loads, and the next chunk's while computing: up to
// 256 bytes in flight per lane). The block's W warps split the chunks (warp w takes
// w, w+W, ...); the host picks W so the grid is about one wave of 16 warps per SM. Partial sums are reduced over the 4
// lanes of a group with shuffles, then over the warps in shared memory.

#define TILE_ROWS 32

// FAVLO_W_EVICT_FIRST (a module compiled with it defined to 1; a timing probe of the
// decode step): the weight and scale streams of the register and ring kernels are marked
// evict-first in L2, so the step's small, reused lines (kernel code and parameters,
// activations, norm weights) are not pushed out by weights read once per token.
#ifndef FAVLO_W_EVICT_FIRST
#define FAVLO_W_EVICT_FIRST 0
#endif

__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 r;
#if FAVLO_W_EVICT_FIRST
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(l2_evict_first_policy()));
#else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
#endif
    return r;
}

// A chunk's scale bytes (8 per lane), streamed as the weights are.
__device__ __forceinline__ uint2 ld_scales(const void* p) {
#if FAVLO_W_EVICT_FIRST
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"
                 : "=r"(r.x), "=r"(r.y)
                 : "l"(p), "l"(l2_evict_first_policy()));
    return r;
#else
    return __ldg(reinterpret_cast<const uint2*>(p));
#endif
}

// The same with an L2 256-byte prefetch hint (a warp's chunk is 4 KB contiguous).
__device__ __forceinline__ uint4 ld_stream_pf(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

template <bool PF>
__device__ __forceinline__ uint4 ld_w(const void* p) {
    return PF ? ld_stream_pf(p) : ld_stream(p);
}

__device__ __forceinline__ uint4 ld_x(const void* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// E8M0 byte -> 2^(s-127); 0xFF is NaN.
__device__ __forceinline__ float e8m0f(unsigned s) {
    if (s == 0u) return __int_as_float(0x00400000);
    if (s == 255u) return __int_as_float(0x7fc00000);
    return __int_as_float((int)(s << 23));
}

__device__ __forceinline__ void mma16816(float d[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#if __CUDA_ARCH__ >= 890
// Two E4M3 bytes (low 16 bits of v) -> f16x2, byte 0 in the low half, exact.
__device__ __forceinline__ unsigned e4m3x2(unsigned v) {
    unsigned r;
    asm("{.reg .b16 t;\n\tcvt.u16.u32 t, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, t;}" : "=r"(r) : "r"(v));
    return r;
}

// The same for the high 16 bits of v.
__device__ __forceinline__ unsigned e4m3x2_hi(unsigned v) {
    unsigned r;
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, h;}" : "=r"(r) : "r"(v));
    return r;
}
#else
// Before sm_89 there is no FP8 conversion: e4m3_sw in prep32.cuh does it exactly.
__device__ __forceinline__ unsigned e4m3x2(unsigned v) { return e4m3_sw(__byte_perm(v, 0, 0x1404)); }
__device__ __forceinline__ unsigned e4m3x2_hi(unsigned v) {
    return e4m3_sw(__byte_perm(v, 0, 0x3424));
}
#endif

// The A fragments of k-step s of one 16-byte piece of one row: (first pair, second
// pair) = permuted positions (4s, 4s+1), (4s+2, 4s+3) of the piece's values; within
// every 8 values the k order is (0,2,4,6,1,3,5,7).
template <int FMT>
__device__ __forceinline__ void a_frag(const uint4& w, int s, unsigned& p0, unsigned& p1);

// FP4: 32 codes = one block, 8 k-steps; step s uses word s/2, even elements (s even)
// or odd ones. The words are re-encoded on upload (`fp4_gemv_word` in gemv.rs) so that
// each f16x2 fragment is a few shifts and masks away, with no conversion instruction:
// an E2M1 code s|e1 e0|m placed as f16 bits 15|11 10|9 (others 0) is its value x 2^-14
// exactly (e = 0 is the f16 subnormal m x 2^-15, e > 0 the normal (1 + m/2) 2^(e-15)).
// Element -> bits of the stored word (eem field low bit first, then the sign bit):
//   el0: 9..11, 15    el2: 25..27, 31   -> (el0, el2) = w & 0x8E008E00
//   el4: 6..8, 12     el6: 22..24, 28   -> (el4, el6) = (w << 3) & 0x8E008E00
//   el1: 0..2, 14     el3: 16..18, 30   -> (el1, el3): eem << 9, sign << 1
//   el5: 3..5, 13     el7: 19..21, 29   -> (el5, el7): eem << 6, sign << 2
// Six logic ops and five shifts per 8 values (the shifts compile to IMAD.SHL, on the
// FMA pipe); the E4M3 route before it took ten ALU-pipe instructions (shifts, masks
// and four F2FP conversions), and the ALU pipe bounded this kernel.
template <>
__device__ __forceinline__ void a_frag<4>(const uint4& w, int s, unsigned& p0, unsigned& p1) {
    const unsigned v = (s >> 1) == 0 ? w.x : (s >> 1) == 1 ? w.y : (s >> 1) == 2 ? w.z : w.w;
    if ((s & 1) == 0) {
        p0 = v & 0x8E008E00u;
        p1 = (v << 3) & 0x8E008E00u;
    } else {
        p0 = ((v << 9) & 0x0E000E00u) | ((v << 1) & 0x80008000u);
        p1 = ((v << 6) & 0x0E000E00u) | ((v << 2) & 0x80008000u);
    }
}

// FP8: 16 bytes = half a block, 4 k-steps; step s uses words 2(s/2), 2(s/2)+1, bytes
// (0,2,4,6) or (1,3,5,7).
template <>
__device__ __forceinline__ void a_frag<8>(const uint4& w, int s, unsigned& p0, unsigned& p1) {
    const unsigned lo = (s >> 1) == 0 ? w.x : w.z, hi = (s >> 1) == 0 ? w.y : w.w;
    const unsigned v = __byte_perm(lo, hi, (s & 1) ? 0x7531 : 0x6420);
    p0 = e4m3x2(v);
    p1 = e4m3x2_hi(v);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;"); }

// What a GEMV does with its rows once y = W x is summed (passed by value to every
// kernel; a null pointer switches its part off):
// - accumulate: y += W x (a residual add).
// - ss_in, a norm consumer: x was prepared from v = h * w, without the RMSNorm's
//   1 / rms(h); the rows are multiplied by s = 1 / sqrt(sum(ss_in[0 .. ss_n]) / dim +
//   eps), from the partial sums of squares of h its producer wrote, summed in a fixed
//   order (the result does not depend on which block ran first). RMSNorm(h) = s h w
//   with s one scalar, and W (s v) = s (W v).
// - nw, a norm producer (rows a multiple of 32): the finished rows are the input h of
//   the next RMSNorm; the block writes the x preparation of h * nw for its 32 rows
//   (block `tile` of xhl / xs) and ss_out[tile] = the sum of h^2 over them.
// - pairs, a SwiGLU producer (y = gate | up, half_tiles row tiles each): whichever of
//   gate tile j and up tile j finishes second (a counter per j, which that block sets
//   back to 0 for the next call) writes the x preparation of silu(gate) * up, block j.
// These replace the separate RMSNorm and SwiGLU preparation kernels between the decode
// GEMVs: one launch boundary fewer for each.
struct GemvEpi {
    const float* ss_in;
    const float* nw;
    unsigned short* xhl;
    float* xs;
    float* ss_out;
    unsigned* pairs;
    int accumulate;
    int ss_n;
    float dim;
    float eps;
    int half_tiles;
    int pad_;
};

// A load that skips L1 (another block's rows, published with a fence and a counter).
__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// What the epilogue reads that earlier kernels wrote: 1 / rms from `ss_in`, and the
// residual rows of `y` (accumulate). Warp 0 loads them right after the PDL wait, while
// its first weights are still on their way from DRAM, so the kernel's tail does not
// wait on L2 for them; `res_tile` says which tile's rows `res` holds (-1: none). The
// same loads and sums as `gemv_finish` makes without them: bit-identical results.
struct EpiEarly {
    float inv;
    float res;
    int have_inv;
    int res_tile;
};

__device__ __forceinline__ EpiEarly epi_none() { return EpiEarly{1.f, 0.f, 0, -1}; }

// 1 / rms from the producer's partial sums of squares `e.ss_in`, summed in a fixed order
// (the same value in every lane of the calling warp).
__device__ __forceinline__ float inv_rms(const GemvEpi& e, int lane) {
    float ss = 0.f;
    for (int i = lane; i < e.ss_n; i += 32) ss += ld_cg(e.ss_in + i);
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / e.dim + e.eps);
}

// Called by all lanes of warp 0 after `pdl_wait`; `tile` is the block's first tile.
__device__ __forceinline__ EpiEarly epi_early(const GemvEpi& e, const float* y, int rows,
                                              int tile) {
    EpiEarly p = epi_none();
    const int lane = threadIdx.x & 31;
    if (e.accumulate) {
        const int row = tile * TILE_ROWS + lane;
        if (row < rows) p.res = y[row];
        p.res_tile = tile;
    }
    if (e.ss_in) {
        p.inv = inv_rms(e, lane);
        p.have_inv = 1;
    }
    return p;
}

// The block's per-warp partial sums -> the 32 rows of `tile` in y, then the epilogue
// `e`. Sums over the 4 lanes of a group (they hold different blocks of the same rows),
// then over the warps in shared memory (buffer `pb` of two: a block that loops over
// tiles alternates, so warps on to the next tile never overwrite sums warp 0 still
// reads); warp 0 (lane = row in the tile) finishes while the others go on.
__device__ __forceinline__ void gemv_finish(float (&acc)[4], float* __restrict__ y, int rows,
                                            const GemvEpi& e, int tile, int pb,
                                            const EpiEarly& pre = epi_none()) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 1);
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 2);
    }
    __shared__ float part[2][16][TILE_ROWS];
    if (t == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) part[pb][warp][g + 8 * i] = acc[i];
    }
    __syncthreads();
    if (warp != 0) return;  // warp-uniform, after this tile's barrier
    const int row = tile * TILE_ROWS + lane;
    float sum = 0.f;
    for (int v = 0; v < nwarps; ++v) sum += part[pb][v][lane];
    if (e.ss_in) {
        if (pre.have_inv) {
            sum *= pre.inv;
        } else {
            sum *= inv_rms(e, lane);
        }
    }
    if (row < rows) {
        if (e.accumulate) sum += pre.res_tile == tile ? pre.res : y[row];
        y[row] = sum;
    }
    if (e.nw) {
        const float sq = warp_sum(sum * sum);
        prep32_store(sum * e.nw[row], lane, tile, e.xhl, e.xs);
        if (lane == 0) e.ss_out[tile] = sq;
    }
    if (e.pairs) {
        const bool up = tile >= e.half_tiles;
        const int j = up ? tile - e.half_tiles : tile;
        __threadfence();  // this block's rows, before its count
        __syncwarp();
        unsigned old = 0u;
        if (lane == 0) old = atomicAdd(e.pairs + j, 1u);
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old == 1u) {
            __threadfence();  // the other block's rows, after its count
            const float o = ld_cg(y + (up ? j : j + e.half_tiles) * TILE_ROWS + lane);
            const float gv = up ? o : sum, uv = up ? sum : o;
            prep32_store(gv / (1.0f + expf(-gv)) * uv, lane, j, e.xhl, e.xs);
            if (lane == 0) e.pairs[j] = 0u;
        }
    }
}

// E8M0 byte -> 2^(s-127) without branches (0 -> 2^-127, 255 -> NaN).
__device__ __forceinline__ float e8m0_sel(unsigned s) {
    unsigned b = s << 23;
    b = (s == 0u) ? 0x00400000u : b;
    b = (s == 255u) ? 0x7fc00000u : b;
    return __uint_as_float(b);
}
