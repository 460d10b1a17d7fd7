// The read ceiling of a GEMV's bytes (gemv_mx*_read_probe, a timing probe); part of the
// GEMV module after gemv_pp.cu.

// Timing probe, the read ceiling of a GEMV's bytes: the data plane, the scale plane and
// the x preparation of a tiles x chunks matrix streamed by a grid-stride loop with U
// 16-byte loads in flight per thread and nothing else, so any kernel that reads these
// bytes once takes at least this long. One word per block is written, and only when
// the loads fold to a value they never do, so the loads stay live.
// Folds n 16-byte words of src, grid-stride with U loads in flight per thread, into s.
__device__ __forceinline__ unsigned read_fold(const uint4* __restrict__ src, long long n,
                                              unsigned s) {
    constexpr int U = 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = ld_stream(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) s ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = ld_stream(src + i);
        s ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    return s;
}

template <int FMT>
__device__ __forceinline__ void read_probe_body(const unsigned char* __restrict__ wd,
                                                const unsigned char* __restrict__ ws,
                                                const unsigned short* __restrict__ xhl,
                                                float* __restrict__ y, int rows, int chunks) {
    constexpr int SB = (FMT == 4) ? 256 : 128;
    constexpr int XB = (FMT == 4) ? 8 : 4;
    const long long tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    pdl_trigger();
    unsigned s = read_fold(reinterpret_cast<const uint4*>(wd), tiles * chunks * 256, 0u);
    s = read_fold(reinterpret_cast<const uint4*>(ws), tiles * chunks * SB / 16, s);
    s = read_fold(reinterpret_cast<const uint4*>(xhl), (long long)chunks * XB * 8, s);
    pdl_wait();
    if (s == 0x9e3779b9u && blockIdx.x < rows) y[blockIdx.x] = __int_as_float(s);
}

#define READ_PROBE(NAME, FMT)                                                                \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned short* __restrict__ xhl, const float* __restrict__ xs,               \
        float* __restrict__ y, int rows, int chunks, const GemvEpi e) {                      \
        read_probe_body<FMT>(wd, ws, xhl, y, rows, chunks);                                 \
    }
READ_PROBE(gemv_mxfp4_read_probe, 4)
READ_PROBE(gemv_mxfp8_read_probe, 8)
