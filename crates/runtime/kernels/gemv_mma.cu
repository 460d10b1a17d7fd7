// The tensor-core GEMV with a register double buffer (gemv_mx*_mma, `GemvKernel::Regs`);
// part of the GEMV module after gemv_common.cuh.

// y[rows] = W x (or as the epilogue `e` says, see `GemvEpi`), W in the tiled device
// layout (see `MxTiled` in src/cuda/gemv.rs): for tile T (32 rows) and 128-byte column
// chunk c, 4096 data bytes ordered [i 4][j 2][lane 32][16 B] (lane (g, t) holds row
// 32T + g + 8i, bytes 128c + 64j + 16t of it), so every 16-byte load instruction of a
// warp reads 512 contiguous bytes and a warp's chunk is 4 KB contiguous; and a scale
// tile of 8 bytes per lane [i][j] (FP4: 32 lanes; FP8: 16 lane pairs, lanes t, t^1 share
// a block). xhl: per 32-value block 32 f16 hi then 32 f16 lo (permuted order); xs: per
// block 2^-e. Block = W warps of one tile; warp w takes chunks w, w+W, ...
//
// A piece (16 bytes of one row) is one FP4 block (8 k-steps) or half an FP8 block (4
// k-steps); its partial sums are scaled and accumulated in f32. The next chunk's
// pieces and scales are loaded into registers, and its x slice (hi/lo + factors) is
// copied into a per-warp shared-memory double buffer with cp.async, before the current
// chunk is computed.
template <int FMT, bool PF>
__device__ __forceinline__ void gemv_mma_body(const unsigned char* __restrict__ wd,
                                              const unsigned char* __restrict__ ws,
                                              const unsigned short* __restrict__ xhl,
                                              const float* __restrict__ xs,
                                              float* __restrict__ y, int rows, int chunks,
                                              const GemvEpi e) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;    // k-steps per piece
    constexpr int XB = (FMT == 4) ? 8 : 4;       // x blocks per chunk
    constexpr int SB = (FMT == 4) ? 256 : 128;   // scale bytes per tile chunk
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;  // FP4 fragments are value x 2^-14
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x;
    const bool act = (g >> 1) == t;  // this lane feeds B column g
    const int h = g & 1;             // hi or lo
    // Per warp: 2 stages of x (XB blocks x 128 bytes) + their factors (XB floats).
    __shared__ __align__(16) unsigned char xst[16][2][XB * 128 + XB * 4];
    const unsigned char* dbase = wd + (long long)tile * chunks * 4096 + lane * 16;
    const unsigned char* sbase =
        ws + (long long)tile * chunks * SB + (FMT == 4 ? lane : (lane >> 1)) * 8;
    auto stage_x = [&](int c, int buf) {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(xhl) + (long long)c * XB * 128;
#pragma unroll
        for (int o = lane * 16; o < XB * 128; o += 512) cp_async16(&xst[warp][buf][o], src + o);
        if (lane < XB / 4)
            cp_async16(&xst[warp][buf][XB * 128 + lane * 16], xs + c * XB + lane * 4);
    };
    pdl_trigger();
    pdl_wait();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint4 q[8];
    uint2 sc = make_uint2(0u, 0u);
    int c = warp;
    if (c < chunks) {
        stage_x(c, 0);
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = ld_w<PF>(dbase + (long long)c * 4096 + p * 512);
        sc = ld_scales(sbase + (long long)c * SB);
    }
    cp_async_commit();
    EpiEarly pre = epi_none();
    if (warp == 0) pre = epi_early(e, y, rows, blockIdx.x);
    for (int k = 0; c < chunks; c += nwarps, ++k) {
        const int cn = c + nwarps;
        uint4 nq[8];
        uint2 nsc = make_uint2(0u, 0u);
        if (cn < chunks) {
            stage_x(cn, (k + 1) & 1);
#pragma unroll
            for (int p = 0; p < 8; ++p) nq[p] = ld_w<PF>(dbase + (long long)cn * 4096 + p * 512);
            nsc = ld_scales(sbase + (long long)cn * SB);
        }
        cp_async_commit();
        cp_async_wait1();
        __syncwarp();
        const unsigned char* xb = xst[warp][k & 1];
        const float* xf = reinterpret_cast<const float*>(xb + XB * 128);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int bl = FMT == 4 ? 4 * j + t : 2 * j + (t >> 1);  // block within chunk
            const float f = xf[bl] * unbias;
            uint4 bx[STEPS / 2];
            const uint4* xp = reinterpret_cast<const uint4*>(
                xb + bl * 128 + h * 64 + (FMT == 8 ? (t & 1) * 32 : 0));
#pragma unroll
            for (int v = 0; v < STEPS / 2; ++v) bx[v] = act ? xp[v] : make_uint4(0u, 0u, 0u, 0u);
            const unsigned* bw = reinterpret_cast<const unsigned*>(bx);
            float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < STEPS; ++s) {
                unsigned a0, a2, a1, a3, e0, e2, e1, e3;
                a_frag<FMT>(q[0 * 2 + j], s, a0, a2);  // row g
                a_frag<FMT>(q[1 * 2 + j], s, a1, a3);  // row g + 8
                a_frag<FMT>(q[2 * 2 + j], s, e0, e2);  // row g + 16
                a_frag<FMT>(q[3 * 2 + j], s, e1, e3);  // row g + 24
                mma16816(d0, a0, a1, a2, a3, bw[2 * s], bw[2 * s + 1]);
                mma16816(d1, e0, e1, e2, e3, bw[2 * s], bw[2 * s + 1]);
            }
            // Scale byte (i, j) is byte 2i + j of the lane's 8.
            const unsigned lo = sc.x, hi = sc.y;
            acc[0] = fmaf(d0[0] + d0[1], e8m0f((lo >> (8 * j)) & 0xffu) * f, acc[0]);
            acc[1] = fmaf(d0[2] + d0[3], e8m0f((lo >> (16 + 8 * j)) & 0xffu) * f, acc[1]);
            acc[2] = fmaf(d1[0] + d1[1], e8m0f((hi >> (8 * j)) & 0xffu) * f, acc[2]);
            acc[3] = fmaf(d1[2] + d1[3], e8m0f((hi >> (16 + 8 * j)) & 0xffu) * f, acc[3]);
        }
        __syncwarp();  // the buffer just read is refilled two chunks later
        if (cn < chunks) {
#pragma unroll
            for (int p = 0; p < 8; ++p) q[p] = nq[p];
            sc = nsc;
        }
    }
    gemv_finish(acc, y, rows, e, blockIdx.x, 0, pre);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp4_mma(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_mma_body<4, false>(wd, ws, xhl, xs, y, rows, chunks, e);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp4_mma_pf(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_mma_body<4, true>(wd, ws, xhl, xs, y, rows, chunks, e);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp8_mma(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_mma_body<8, false>(wd, ws, xhl, xs, y, rows, chunks, e);
}

extern "C" __global__ void __launch_bounds__(512) gemv_mxfp8_mma_pf(
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    const unsigned short* __restrict__ xhl, const float* __restrict__ xs, float* __restrict__ y,
    int rows, int chunks, const GemvEpi e) {
    gemv_mma_body<8, true>(wd, ws, xhl, xs, y, rows, chunks, e);
}
