// Favlo CUDA: the one-launch attention decode and the o projection in one kernel
// (`attn_o_*`, an experiment of the decode bench: `cuda_decode_bench --attn fused-o`).
//
// Module: prep32.cuh, fp8_sw.cuh, attn_common.cuh, attention_onepass.cu (A1_NO_KERNELS),
// gemv_common.cuh, gemv_chunk.cuh, then this file (src/cuda/attention/fused_o.rs).
//
// Why: in the decode step the o GEMV starts only when the attention kernel has ended,
// and its blocks (which need a whole SM) only then request their weights, so the o
// projection costs ~5 µs per layer on an H100 or H200 for ~2–3 µs of bytes. The
// attention itself reads little (its keys) and waits on a chain of latencies, leaving
// DRAM idle. Here the same blocks do both: before the PDL wait each block copies its
// o row tile (32 rows × K, MXFP4: 16 chunks of 4 KB + scales at K = 4096) into shared
// memory with cp.async, so those bytes arrive while the attention runs; the attention
// is `attn_onepass` unchanged (its block id, splits and merge); the block that writes a
// kv head's output (its x preparation, the o GEMV's input) then counts it done; every
// block waits for all kv heads (one thread spins with an acquire load; the grid must
// be co-resident, which the host checks with the occupancy API), stages the whole x
// preparation in shared memory and runs the GEMV of its tile from shared memory with
// the ping-pong kernel's `chunk_mma`, then the same epilogue (`gemv_finish`: residual
// add, the next RMSNorm's x preparation).
//
// sync[0] counts kv heads done, sync[1] blocks past the wait; the last block past it
// sets both back to 0 for the next launch (which reads them only after its PDL wait,
// that is after this grid has ended). Deadlock-free when every block of the grid is
// resident at once: a dependent kernel cannot start before every block has executed
// the trigger at the start of `attn_onepass`, so once all have started none can be
// starved of an SM.

#define AO_XSTRIDE (8 * 128 + 8 * 4)  // one FP4 chunk's x slice: hi/lo values, then scales

__device__ __forceinline__ unsigned ao_ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void ao_cp_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

template <int HD, int G, typename T>
__device__ __forceinline__ void attn_o(
    const float* __restrict__ qkv, const float* __restrict__ bias, const float* __restrict__ qw,
    const float* __restrict__ kw, const float* __restrict__ cos_t, const float* __restrict__ sin_t,
    T* __restrict__ kc, T* __restrict__ vc, float* __restrict__ part, unsigned* __restrict__ cnt,
    const int* __restrict__ lenp, int cap, int n_kv, int interleaved, int min_keys, int light,
    float eps, float scale, unsigned short* __restrict__ xhl, float* __restrict__ xs,
    const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,
    float* __restrict__ y, int rows, int chunks, const GemvEpi e, unsigned* __restrict__ sync,
    int early) {
    extern __shared__ __align__(16) unsigned char ao_smem[];
    unsigned char* wsm = ao_smem;                    // chunks × 4 KB of weights
    unsigned char* ssm = wsm + chunks * 4096;        // chunks × 256 bytes of scales
    unsigned char* xsm = ssm + chunks * 256;         // chunks × AO_XSTRIDE of x
    const int bid = blockIdx.y * gridDim.x + blockIdx.x;
    const int tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    const bool has_tile = bid < tiles;
    // The weights depend on nothing earlier kernels write: request them first (early),
    // or, to measure what that buys, only once the attention is done.
    auto load_w = [&]() {
        const unsigned char* src = wd + (long long)bid * chunks * 4096;
        for (int o = threadIdx.x * 16; o < chunks * 4096; o += blockDim.x * 16)
            cp_async16(wsm + o, src + o);
        const unsigned char* ssrc = ws + (long long)bid * chunks * 256;
        for (int o = threadIdx.x * 16; o < chunks * 256; o += blockDim.x * 16)
            cp_async16(ssm + o, ssrc + o);
    };
    if (has_tile && early == 1) load_w();
    if (early == 2) {
        // After the q|k|v GEMV has ended (its stream no longer competes), before the
        // attention's own loads.
        pdl_trigger();
        pdl_wait();
        if (has_tile) load_w();
    }
    cp_async_commit();
    const bool wrote = attn_onepass<HD, G, T>(
        nullptr, qkv, bias, qw, kw, cos_t, sin_t, kc, vc, part, cnt, lenp, 1, cap, n_kv,
        interleaved, min_keys, light, eps, scale, nullptr, xhl, xs);
    if (wrote) {
        __threadfence();  // this block's x preparation, before its count
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(sync, 1u);
    }
    if (has_tile && threadIdx.x == 0) {
        while (ao_ld_acquire(sync) < (unsigned)n_kv) {
        }
    }
    __syncthreads();  // the acquire above orders every thread's reads below
    if (has_tile) {
        if (early == 0) load_w();
        // The whole x preparation (every kv head's output) into per-chunk slices,
        // through L2 (cp.async.cg skips L1, which may hold nothing of it anyway).
        const unsigned char* xb = reinterpret_cast<const unsigned char*>(xhl);
        for (int o = threadIdx.x; o < chunks * 64; o += blockDim.x) {
            const int c = o >> 6, piece = o & 63;
            cp_async16(xsm + c * AO_XSTRIDE + piece * 16, xb + (long long)c * 1024 + piece * 16);
        }
        for (int o = threadIdx.x; o < chunks * 2; o += blockDim.x) {
            const int c = o >> 1, piece = o & 1;
            cp_async16(xsm + c * AO_XSTRIDE + 1024 + piece * 16, xs + c * 8 + piece * 4);
        }
        cp_async_commit();
    }
    ao_cp_wait_all();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned nb = gridDim.x * gridDim.y;
        if (atomicAdd(sync + 1, 1u) == nb - 1) {
            sync[0] = 0u;
            sync[1] = 0u;
        }
    }
    if (!has_tile) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int gq = lane >> 2, t = lane & 3;
    const bool act = (gq >> 1) == t;
    const int h = gq & 1;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int c = warp; c < chunks; c += nwarps) {
        uint4 q[8];
        const unsigned char* wc = wsm + c * 4096 + lane * 16;
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = *reinterpret_cast<const uint4*>(wc + p * 512);
        const uint2 sc = *reinterpret_cast<const uint2*>(ssm + c * 256 + lane * 8);
        chunk_mma<4>(q, sc, xsm + c * AO_XSTRIDE, t, h, act, acc);
    }
    EpiEarly pre = epi_none();
    if (warp == 0) pre = epi_early(e, y, rows, bid);
    gemv_finish(acc, y, rows, e, bid, 0, pre);
}

// Kernel names: attn_o_{f16,f32}_g{G}_hd{HD} (MXFP4 o weights).
#define AO_KERNEL(HD, G, TN, T)                                                                \
    extern "C" __global__ void __launch_bounds__(A1_THREADS, 1) attn_o_##TN##_g##G##_hd##HD(  \
        const float* qkv, const float* bias, const float* qw, const float* kw,                 \
        const float* cos_t, const float* sin_t, T* kc, T* vc, float* part, unsigned* cnt,      \
        const int* lenp, int cap, int n_kv, int interleaved, int min_keys, int light,          \
        float eps, float scale, unsigned short* xhl, float* xs, const unsigned char* wd,       \
        const unsigned char* ws, float* y, int rows, int chunks, const GemvEpi e,              \
        unsigned* sync, int early) {                                                           \
        attn_o<HD, G, T>(qkv, bias, qw, kw, cos_t, sin_t, kc, vc, part, cnt, lenp, cap, n_kv,  \
                         interleaved, min_keys, light, eps, scale, xhl, xs, wd, ws, y, rows,   \
                         chunks, e, sync, early);                                              \
    }

AO_KERNEL(128, 4, f16, unsigned short)
AO_KERNEL(128, 4, f32, float)
