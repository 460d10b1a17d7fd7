// Favlo CUDA: the x preparation shared by the tensor-core GEMV's producers.
//
// A block of 32 values (one per lane of a full warp) -> xhl[blk*64 ..]: 32 f16 hi then
// 32 f16 lo in the order (0,2,4,6,1,3,5,7) per 8 (the k order of the GEMV's mma
// fragments), and xs[blk] = 2^-e, where e puts the block's max |v| in [2^14, 2^15) and
// v * 2^e ~ hi + lo (about 22 bits). Must be called by all 32 lanes.
// Programmatic dependent launch (sm_90+; no-ops elsewhere and for kernels launched
// without the attribute): `pdl_trigger` lets the next kernel in the stream be scheduled
// before this one ends; `pdl_wait` blocks until the previous kernel has completed and
// its memory is visible. A kernel launched with the attribute must call `pdl_wait`
// before it reads anything an earlier kernel wrote.
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// An L2 evict-first cache policy for loads of bytes read once (`.L2::cache_hint`; sm_90
// takes the plain `.L2::evict_first` qualifier only on 256-bit loads). Not volatile, so
// a kernel computes it once. Used by the bench-only stream-hint variants.
__device__ __forceinline__ unsigned long long l2_evict_first_policy() {
    unsigned long long pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// Per-sequence buffers of a batched decode launch (`_z` kernels): blockIdx.z is the
// sequence (at most SEQ_MAX), p[i][z] its i-th buffer, as the kernel lists them.
#define SEQ_MAX 4
struct SeqArgs {
    const void* p[5][SEQ_MAX];
};

__device__ __forceinline__ void prep32_store(float v, int lane, long long blk,
                                             unsigned short* __restrict__ xhl,
                                             float* __restrict__ xs) {
    float m = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int e = 0;
    if (m > 0.f && m <= 3.0e38f) {
        int ex;
        frexpf(m, &ex);  // m = f * 2^ex, f in [0.5, 1)
        e = min(15 - ex, 120);
    }
    const float sv = ldexpf(v, e);
    unsigned short hi, lo;
    float hif;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hi) : "f"(sv));
    asm("{.reg .b16 t;\n\tmov.b16 t, %1;\n\tcvt.f32.f16 %0, t;}" : "=f"(hif) : "h"(hi));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(lo) : "f"(sv - hif));
    const int j = lane & 7;
    const int pos = (lane & ~7) + ((j & 1) ? 4 + (j >> 1) : (j >> 1));
    unsigned short* o = xhl + blk * 64;
    o[pos] = hi;
    o[32 + pos] = lo;
    if (lane == 0) xs[blk] = ldexpf(1.0f, -e);
}
