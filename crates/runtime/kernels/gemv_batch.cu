// Favlo CUDA kernels: the batched MX GEMV, y_b = W x_b (or y_b += W x_b) for NB = 2..4
// prepared vectors x_b at once: one decode step over several sequences.
//
// Appended to the GEMV module (gemv_common.cuh and the kernels after it): the same tiled
// weights, fragments (`a_frag`), mma and x preparation. Why a batch costs little: a
// batch-1 GEMV spends its instructions on streaming and decoding the weights, and only
// 64 of a warp's ~1175 instructions per two chunks are mma. Here each decoded A fragment feeds NB mma pairs, one per vector
// (its B fragments are that vector's hi/lo columns, exactly as in the batch-1 kernel),
// so the weights are read and decoded once for the batch. Every vector's partial sums
// are formed in the batch-1 kernel's order per warp (same blocks, same steps, same f32
// scale-and-add), then reduced over the block's warps in order.
//
// x slices are read straight from global memory (all warps of all blocks read the same
// few KB, so they hit L1), only by the 8 lanes whose B column is live; the ping-pong
// register buffers of `gemv_pp_body` carry the weights.

#define GEMV_BATCH_MAX 4

// What the FP4 2- and 3-vector kernels' lanes whose B columns are zero read (4 x 16
// bytes): a load from here instead of zeroing 4 registers per vector and step. H200
// (cuda_gemv_batch_bench, Qwen3-8B decode shapes): 2-5% faster for 2 vectors, 8-14%
// for 3, 0-12% slower for 4 (fewer instructions, 250 -> 186 registers, yet slower), no
// gain for FP8 (more registers), so only those two kernels use it.
__device__ const unsigned short kZeroX[32] = {};

// Per vector: its x preparation (hi/lo codes, block factors) and its output rows.
struct GemvBatchIo {
    const unsigned short* xhl[GEMV_BATCH_MAX];
    const float* xs[GEMV_BATCH_MAX];
    float* y[GEMV_BATCH_MAX];
    int accumulate;
    int pad_;
};

// One chunk c (pieces q, scales sc) for every vector into acc[b].
template <int FMT, int NB>
__device__ __forceinline__ void chunk_mma_batch(const uint4 (&q)[8], uint2 sc, long long c,
                                                const GemvBatchIo& io, int t, int h, bool act,
                                                float (&acc)[NB][4]) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;
    constexpr int XB = (FMT == 4) ? 8 : 4;
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;  // FP4 fragments are value x 2^-14
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int bl = FMT == 4 ? 4 * j + t : 2 * j + (t >> 1);  // block within chunk
        const long long blk = c * XB + bl;
        // ZX: lanes with no live B column read zeros (`kZeroX`) from offset 0.
        constexpr bool ZX = FMT == 4 && NB < 4;
        const long long xo =
            (!ZX || act) ? blk * 64 + h * 32 + (FMT == 8 ? (t & 1) * 16 : 0) : 0;
        float d0[NB][4], d1[NB][4];
#pragma unroll
        for (int b = 0; b < NB; ++b) {
#pragma unroll
            for (int i = 0; i < 4; ++i) d0[b][i] = d1[b][i] = 0.f;
        }
#pragma unroll
        for (int v = 0; v < STEPS / 2; ++v) {
            uint4 bx[NB];
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                if constexpr (ZX)
                    bx[b] = ld_x((act ? io.xhl[b] : kZeroX) + xo + v * 8);
                else
                    bx[b] = act ? ld_x(io.xhl[b] + xo + v * 8) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int s = 2 * v + u;
                unsigned a0, a2, a1, a3, e0, e2, e1, e3;
                a_frag<FMT>(q[0 * 2 + j], s, a0, a2);  // row g
                a_frag<FMT>(q[1 * 2 + j], s, a1, a3);  // row g + 8
                a_frag<FMT>(q[2 * 2 + j], s, e0, e2);  // row g + 16
                a_frag<FMT>(q[3 * 2 + j], s, e1, e3);  // row g + 24
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    const unsigned b0 = u ? bx[b].z : bx[b].x, b1 = u ? bx[b].w : bx[b].y;
                    mma16816(d0[b], a0, a1, a2, a3, b0, b1);
                    mma16816(d1[b], e0, e1, e2, e3, b0, b1);
                }
            }
        }
        // Scale byte (i, j) is byte 2i + j of the lane's 8.
        const unsigned lo = sc.x, hi = sc.y;
        const float s0 = e8m0_sel((lo >> (8 * j)) & 0xffu);
        const float s1 = e8m0_sel((lo >> (16 + 8 * j)) & 0xffu);
        const float s2 = e8m0_sel((hi >> (8 * j)) & 0xffu);
        const float s3 = e8m0_sel((hi >> (16 + 8 * j)) & 0xffu);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float f = __ldg(io.xs[b] + blk) * unbias;
            acc[b][0] = fmaf(d0[b][0] + d0[b][1], s0 * f, acc[b][0]);
            acc[b][1] = fmaf(d0[b][2] + d0[b][3], s1 * f, acc[b][1]);
            acc[b][2] = fmaf(d1[b][0] + d1[b][1], s2 * f, acc[b][2]);
            acc[b][3] = fmaf(d1[b][2] + d1[b][3], s3 * f, acc[b][3]);
        }
    }
}

// Every vector's per-warp partial sums -> its 32 rows of `tile` (`gemv_finish` without
// the fused epilogues: plain or accumulate).
template <int NB>
__device__ __forceinline__ void gemv_finish_batch(float (&acc)[NB][4], const GemvBatchIo& io,
                                                  int rows, int tile) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    __shared__ float part[NB][16][TILE_ROWS];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[b][i] += __shfl_xor_sync(0xffffffffu, acc[b][i], 1);
            acc[b][i] += __shfl_xor_sync(0xffffffffu, acc[b][i], 2);
        }
        if (t == 0) {
#pragma unroll
            for (int i = 0; i < 4; ++i) part[b][warp][g + 8 * i] = acc[b][i];
        }
    }
    __syncthreads();
    if (warp != 0) return;
    const int row = tile * TILE_ROWS + lane;
    if (row >= rows) return;
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        float sum = 0.f;
        for (int v = 0; v < nwarps; ++v) sum += part[b][v][lane];
        float* y = io.y[b];
        if (io.accumulate) sum += y[row];
        y[row] = sum;
    }
}

// Block = W warps of one row tile, warp w takes chunks w, w + W, ... with two register
// buffers (as `gemv_pp_body`): the chunk after next is requested before a warp waits.
template <int FMT, int NB>
__device__ __forceinline__ void gemv_batch_body(const unsigned char* __restrict__ wd,
                                                const unsigned char* __restrict__ ws,
                                                const GemvBatchIo& io, int rows, int chunks) {
    constexpr int SB = (FMT == 4) ? 256 : 128;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x;
    const bool act = (g >> 1) == t;
    const int h = g & 1;
    const unsigned char* dbase = wd + (long long)tile * chunks * 4096 + lane * 16;
    const unsigned char* sbase =
        ws + (long long)tile * chunks * SB + (FMT == 4 ? lane : (lane >> 1)) * 8;
    auto load = [&](int c, uint4 (&q)[8], uint2& sc) {
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = ld_stream(dbase + (long long)c * 4096 + p * 512);
        sc = __ldg(reinterpret_cast<const uint2*>(sbase + (long long)c * SB));
    };
    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[b][i] = 0.f;
    }
    uint4 qa[8], qb[8];
    uint2 sa = make_uint2(0u, 0u), sb = make_uint2(0u, 0u);
    int c = warp;
    // The first chunk's weights do not depend on the previous kernel.
    pdl_trigger();
    if (c < chunks) load(c, qa, sa);
    pdl_wait();
    for (; c < chunks; c += 2 * nwarps) {
        const int c1 = c + nwarps, c2 = c + 2 * nwarps;
        if (c1 < chunks) load(c1, qb, sb);
        chunk_mma_batch<FMT, NB>(qa, sa, c, io, t, h, act, acc);
        if (c1 >= chunks) break;
        if (c2 < chunks) load(c2, qa, sa);
        chunk_mma_batch<FMT, NB>(qb, sb, c1, io, t, h, act, acc);
    }
    gemv_finish_batch<NB>(acc, io, rows, tile);
}

// At most 8 warps per block (the host's `BATCH_WARPS`). Registers (NVRTC 13.0): FP4
// 170 / 174 / 250 for 2 / 3 / 4 vectors, FP8 178 / 174 for 3 / 4, no spills. The FP8
// 2-vector kernel keeps a 512-thread bound: capped at 128 registers (12 bytes of spill)
// two blocks of 8 warps fit a multiprocessor, and it measured faster that way than at
// 130 registers and one block (H200: q|k|v 1.12x against 1.42x the 1-vector time);
// for FP4 the two builds measured equal over a layer (68.0 and 66.9 us), and the
// unspilled one is kept.
#define GEMV_BATCH(NAME, FMT, NB, THREADS)                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(                            \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const GemvBatchIo io, int rows, int chunks) {                                       \
        gemv_batch_body<FMT, NB>(wd, ws, io, rows, chunks);                                 \
    }
GEMV_BATCH(gemv_mxfp4_batch2, 4, 2, 256)
GEMV_BATCH(gemv_mxfp4_batch3, 4, 3, 256)
GEMV_BATCH(gemv_mxfp4_batch4, 4, 4, 256)
GEMV_BATCH(gemv_mxfp8_batch2, 8, 2, 512)
GEMV_BATCH(gemv_mxfp8_batch3, 8, 3, 256)
GEMV_BATCH(gemv_mxfp8_batch4, 8, 4, 256)
