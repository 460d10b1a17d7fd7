// Favlo CUDA kernels: the MXFP4 GEMV with x as E4M3 terms (sm_89+), y = W x.
//
// Why: the f16 route of gemv_mma.cu spends 11 integer operations per 8 FP4 codes on
// fragments (the pattern of an f16 fragment does not tile a word: docs/CUDA.md) and
// one m16n8k16 mma per 16 codes per row pair; its loop issues ~590 instructions per
// 4 KB chunk per warp and the kernel streams at ~60% of copy bandwidth, as fast from
// L2 as from DRAM. Here the A operand is E4M3: an E2M1 code s|e1 e0|m placed as E4M3
// bits 7|4 3|2 is its value x 2^-6 exactly (e = 0 lands on the E4M3 subnormals), and
// the words are re-encoded on upload (`fp4_q8_word` in gemv_tile.rs) so that a word's
// 8 codes become the two 4-byte A registers of one m16n8k32 step in 5 operations:
//   a_lo = w & 0x9C9C9C9C                                  (codes 0..3, in place)
//   a_hi = ((w << 2) & 0x8C8C8C8C) | ((w >> 2) & 0x10101010)  (codes 4..7: m at bit 0,
//          e0 at 1, s at 5, e1 at 6 of their byte)
// and one mma covers 32 codes of a row pair instead of 16.
//
// x: the tensor core's FP8 operands must both be FP8, so x is carried as TERMS E4M3
// terms per value (`gemv_prep_x8`): per 32-value block a power of two 2^e puts the
// block max in [128, 256), t0 = e4m3(v), t1 = e4m3(16 (v - t0)), ... so that
// v ~ t0 + t1/16 + t2/256 + t3/4096 (2 terms ~8 bits, 4 terms ~16 bits). The products
// are exact; the tensor core adds them with a 13-bit-mantissa accumulator (FP8 inputs
// on Ada and Hopper), so a block's partial sum carries ~2^-13 of relative error. This
// is a different numerical contract from the f16 route (which is exact to ~2^-22):
// callers opt in, and the tests state the bound.
//
// Layout and split are the f16 route's (gemv_mma.cu: `tile_mx`, the ping-pong body);
// only the words' encoding, the x buffer's content and the chunk arithmetic differ. As
// there, lane t owns one 32-code block per row pair and the B columns 2t + h carry its
// terms h (set 1: terms 0, 1; set 2: terms 2, 3) on its k slots only.

// The A registers of one m16n8k32 step from a stored word (see the header).
__device__ __forceinline__ unsigned q8_lo(unsigned w) { return w & 0x9C9C9C9Cu; }
__device__ __forceinline__ unsigned q8_hi(unsigned w) {
    return ((w << 2) & 0x8C8C8C8Cu) | ((w >> 2) & 0x10101010u);
}
__device__ __forceinline__ unsigned word_of(const uint4& v, int s) {
    return s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w;
}

#define Q8_ROWS 64  // rows of a tile: one warpgroup's wgmma M

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define Q8_WGMMA 1
#endif

// wgmma shared-memory descriptor of a B tile, no swizzle: the two core matrices (8 rows
// n x 16 bytes of k) 128 bytes apart along k.
__device__ __forceinline__ unsigned long long q8_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (8ull << 16) | (16ull << 32);
}

// d += A B, m64 n8 k32, A (E4M3) from registers in mma.m16n8k32's layout per warp, B
// (E4M3) from shared memory.
__device__ __forceinline__ void q8_wgmma(float (&d)[4], unsigned a0, unsigned a1,
                                         unsigned a2, unsigned a3, unsigned long long db) {
#ifdef Q8_WGMMA
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, %8, 1, 1, 1;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db)
        : "memory");
#else
    __trap();  // the host launches these kernels on sm_90a only
#endif
}
__device__ __forceinline__ void q8_fence() {
#ifdef Q8_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void q8_commit_wait() {
#ifdef Q8_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
// The stage's copies (generic proxy) visible to the wgmma reads (async proxy).
__device__ __forceinline__ void q8_proxy_fence() {
#ifdef Q8_WGMMA
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(sa), "l"(gmem));
}

// One stage of a warpgroup's B tiles: [j 4][s 4][set S][core 2][n 8][16 B] (S * 4 KB),
// then the chunk's 16 x factors.
template <int S>
struct Q8Stage {
    static constexpr int TILES = S * 4096;
    static constexpr int BYTES = TILES + 64;
};

// y[rows] = W x (accumulate: y += W x; gridDim.y > 1: each block adds its part of K
// with atomics, into a y the host zeroed unless accumulating), W tiled by `tile_mx_q8`
// (gemv_q8.rs): per 64-row tile T and 256-byte chunk c of the rows, warp q's 4 KB
// ordered [i 2][j 4][lane 32][16 B], lane (g, t) holding row 64T + 16q + g + 8i, bytes
// 256c + 64j + 16t (block 16c + 4j + t, 32 codes as 4 words); then per (T, c, q) 8
// scale bytes [i 2][j 4] per lane. x8 / xs: `gemv_prep_x8`.
//
// Block = one warpgroup, one tile (blockIdx.x) and one part of its chunks (blockIdx.y),
// so every branch around the wgmma depends on the block only and ptxas keeps the
// wgmmas of a block of 32 codes in flight together (with a warpgroup index from the
// thread index it waited after each one). Two register buffers of weights (as
// `gemv_pp_body`) and two shared stages of B tiles. B tile (j, s, set): column n =
// 2t + h holds term 2 set + h of block 4j + t's values 8s .. 8s + 7 on the k slots of
// lane t (k = 4t .. 4t + 3: values 8s .. 8s + 3; k = 16 + 4t ..: 8s + 4 .. 8s + 7) and
// zero elsewhere; the zeros are written once, each chunk copies its 256 S words.
template <int S>
__device__ __forceinline__ void gemv_q8_body(const unsigned char* __restrict__ wd,
                                             const unsigned char* __restrict__ ws,
                                             const unsigned char* __restrict__ x8,
                                             const float* __restrict__ xs,
                                             float* __restrict__ y, int rows, int chunks,
                                             int accumulate) {
    extern __shared__ __align__(128) unsigned char q8dyn[];
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int wg = threadIdx.x >> 7, nwg = blockDim.x >> 7;
    const int tile = blockIdx.x, nks = gridDim.y;
    const int tid = threadIdx.x & 127;
    const int per = (chunks + nks - 1) / nks;
    const int c_begin = blockIdx.y * per, c_end = min(chunks, c_begin + per);
    // Loop trips from block-uniform values only: a warpgroup past the end computes on
    // zero weights (its wgmmas still run with the others', outside any branch).
    const int trips = (c_end - c_begin + nwg - 1) / nwg;
    unsigned char* q8smem = q8dyn + wg * 2 * Q8Stage<S>::BYTES;
    for (int o = threadIdx.x * 16; o < nwg * 2 * Q8Stage<S>::BYTES; o += blockDim.x * 16)
        *reinterpret_cast<uint4*>(q8dyn + o) = make_uint4(0u, 0u, 0u, 0u);
    const unsigned char* dbase =
        wd + ((long long)tile * chunks * 4 + wq) * 4096 + lane * 16;
    const unsigned char* sbase = ws + ((long long)tile * chunks * 4 + wq) * 256 + lane * 8;
    // This thread's B words: index u = tid + 128 r, r < 2 S, over [j 4][s 4][set S]
    // [core 2][n 8].
    auto stage_x = [&](int c, int buf) {
        if (c >= c_end) return;
        unsigned char* st = q8smem + buf * Q8Stage<S>::BYTES;
#pragma unroll
        for (int r = 0; r < 2 * S; ++r) {
            const int u = tid + 128 * r;
            const int n = u & 7, core = (u >> 3) & 1, set = (u >> 4) % S, s = (u >> 4) / S % 4,
                      j = (u >> 4) / S / 4;
            const int tt = n >> 1, term = 2 * set + (n & 1);
            const long long blk = (long long)c * 16 + 4 * j + tt;
            cp_async4(st + (u >> 4) * 256 + core * 128 + n * 16 + 4 * tt,
                      x8 + blk * 128 + term * 32 + 8 * s + 4 * core);
        }
        if (tid < 4) cp_async16(st + Q8Stage<S>::TILES + tid * 16, xs + (long long)c * 16 + tid * 4);
    };
    auto load = [&](int c, uint4 (&q)[8], uint2& sc) {
        if (c >= c_end) {
#pragma unroll
            for (int p = 0; p < 8; ++p) q[p] = make_uint4(0u, 0u, 0u, 0u);
            sc = make_uint2(0u, 0u);
            return;
        }
#pragma unroll
        for (int p = 0; p < 8; ++p) q[p] = ld_stream(dbase + (long long)c * 4 * 4096 + p * 512);
        sc = __ldg(reinterpret_cast<const uint2*>(sbase + (long long)c * 4 * 256));
    };
    float acc[2] = {0.f, 0.f};
    auto compute = [&](const uint4 (&q)[8], uint2 sc, int buf) {
        const unsigned char* st = q8smem + buf * Q8Stage<S>::BYTES;
        const float* xf = reinterpret_cast<const float*>(st + Q8Stage<S>::TILES);
        const unsigned long long d0 = q8_desc((unsigned)__cvta_generic_to_shared(st));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float d[S][4];
#pragma unroll
            for (int v = 0; v < S; ++v) d[v][0] = d[v][1] = d[v][2] = d[v][3] = 0.f;
            // All four steps' A registers before the fence.
            unsigned a[4][4];
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const unsigned w0 = word_of(q[j], s), w1 = word_of(q[4 + j], s);
                a[s][0] = q8_lo(w0);
                a[s][1] = q8_lo(w1);
                a[s][2] = q8_hi(w0);
                a[s][3] = q8_hi(w1);
            }
            q8_fence();
#pragma unroll
            for (int s = 0; s < 4; ++s) {
#pragma unroll
                for (int v = 0; v < S; ++v)  // tile offset 256 bytes = 16 in the field
                    q8_wgmma(d[v], a[s][0], a[s][1], a[s][2], a[s][3],
                             d0 + (unsigned long long)(((j * 4 + s) * S + v) * 16));
            }
            q8_commit_wait();
            float v0 = fmaf(d[0][1], 0.0625f, d[0][0]), v1 = fmaf(d[0][3], 0.0625f, d[0][2]);
            if (S == 2) {
                v0 = fmaf(fmaf(d[S - 1][1], 0.0625f, d[S - 1][0]), 1.0f / 256.0f, v0);
                v1 = fmaf(fmaf(d[S - 1][3], 0.0625f, d[S - 1][2]), 1.0f / 256.0f, v1);
            }
            const float f = xf[4 * j + t] * 64.0f;  // A fragments are value x 2^-6
            acc[0] = fmaf(v0, e8m0_sel((sc.x >> (8 * j)) & 0xffu) * f, acc[0]);
            acc[1] = fmaf(v1, e8m0_sel((sc.y >> (8 * j)) & 0xffu) * f, acc[1]);
        }
    };
    uint4 qa[8], qb[8];
    uint2 sa = make_uint2(0u, 0u), sb2 = make_uint2(0u, 0u);
    const int bar = 1 + wg;  // this warpgroup's named barrier
    auto wg_sync = [&]() { asm volatile("bar.sync %0, 128;" ::"r"(bar) : "memory"); };
    pdl_trigger();
    const int c0 = c_begin + wg;  // trip k takes chunk c0 + k nwg
    if (trips > 0) load(c0, qa, sa);
    pdl_wait();
    __syncthreads();  // the zeroed stages, before any copy lands in them
    if (trips > 0) stage_x(c0, 0);
    cp_async_commit();
    for (int k = 0; k < trips; k += 2) {
        const int c1 = c0 + (k + 1) * nwg, c2 = c0 + (k + 2) * nwg;
        if (k + 1 < trips) {
            stage_x(c1, 1);
            load(c1, qb, sb2);
        }
        cp_async_commit();
        cp_async_wait1();
        q8_proxy_fence();
        wg_sync();
        compute(qa, sa, 0);
        wg_sync();  // stage 0 read by every warp's wgmma
        if (k + 1 >= trips) break;
        if (k + 2 < trips) {
            stage_x(c2, 0);
            load(c2, qa, sa);
        }
        cp_async_commit();
        cp_async_wait1();
        q8_proxy_fence();
        wg_sync();
        compute(qb, sb2, 1);
        wg_sync();
    }
    // Rows g and g + 8 of the warp: the 4 lanes of a group hold different blocks.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 1);
        acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 2);
    }
    __shared__ float q8part[4][Q8_ROWS];
    if (t == 0) {
        q8part[wg][16 * wq + g] = acc[0];
        q8part[wg][16 * wq + g + 8] = acc[1];
    }
    __syncthreads();
    if (threadIdx.x < Q8_ROWS) {
        const int row = tile * Q8_ROWS + threadIdx.x;
        float sum = 0.f;
        for (int v = 0; v < nwg; ++v) sum += q8part[v][threadIdx.x];
        if (row < rows) {
            if (nks > 1) {
                atomicAdd(y + row, sum);
            } else {
                y[row] = accumulate ? y[row] + sum : sum;
            }
        }
    }
}

#define GEMV_Q8(NAME, S)                                                                     \
    extern "C" __global__ void __launch_bounds__(512) NAME(                                 \
        const unsigned char* __restrict__ wd, const unsigned char* __restrict__ ws,         \
        const unsigned char* __restrict__ x8, const float* __restrict__ xs,                 \
        float* __restrict__ y, int rows, int chunks, int accumulate) {                       \
        gemv_q8_body<S>(wd, ws, x8, xs, y, rows, chunks, accumulate);                        \
    }
GEMV_Q8(gemv_mxfp4_q8t2, 1)
GEMV_Q8(gemv_mxfp4_q8t4, 2)

#if __CUDA_ARCH__ >= 890
// f32 -> E4M3 (round to nearest even, saturating) and back.
__device__ __forceinline__ unsigned char to_e4m3(float v) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v));
    return (unsigned char)(r & 0xffu);
}
__device__ __forceinline__ float from_e4m3(unsigned char b) {
    float f;
    asm("{.reg .b16 t, l, h;\n\t.reg .b32 r;\n\tcvt.u16.u32 t, %1;\n\t"
        "cvt.rn.f16x2.e4m3x2 r, t;\n\tmov.b32 {l, h}, r;\n\tcvt.f32.f16 %0, l;}"
        : "=f"(f)
        : "r"((unsigned)b));
    return f;
}
#else
__device__ __forceinline__ unsigned char to_e4m3(float) { __trap(); return 0; }
__device__ __forceinline__ float from_e4m3(unsigned char) { __trap(); return 0.f; }
#endif

// One 32-value block (one value per lane of a full warp) -> x8[blk*128 ..]: terms
// 0..3 of 32 bytes each, values in their natural order, and xs[blk] = 2^-e (see the
// header). All 32 lanes must call it.
__device__ __forceinline__ void prep8_store(float v, int lane, long long blk,
                                            unsigned char* __restrict__ x8,
                                            float* __restrict__ xs) {
    float m = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int e = 0;
    if (m > 0.f && m <= 3.0e38f) {
        int ex;
        frexpf(m, &ex);  // m = f * 2^ex, f in [0.5, 1): m * 2^(8 - ex) in [128, 256)
        e = min(8 - ex, 120);
    }
    float r = ldexpf(v, e);
    unsigned char* o = x8 + blk * 128 + lane;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const unsigned char b = to_e4m3(r);
        o[32 * k] = b;
        r = (r - from_e4m3(b)) * 16.0f;  // exact: the rounding error of a coarser format
    }
    if (lane == 0) xs[blk] = ldexpf(1.0f, -e);
}

// x (f32, nblocks * 32 values) -> the E4M3 terms (x8, the XPrep's buffer) and xs.
extern "C" __global__ void gemv_prep_x8(const float* __restrict__ x,
                                        unsigned char* __restrict__ x8,
                                        float* __restrict__ xs, int nblocks) {
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    prep8_store(x[(long long)blk * 32 + lane], lane, blk, x8, xs);
}
