// The activation quantization of the MX GEMM (row scales, E4M3 codes in the tiled
// order); part of the GEMM module after gemm_mx.cu.

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
