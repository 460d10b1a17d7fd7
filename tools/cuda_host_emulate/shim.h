// Host shim for running Favlo's simple CUDA kernels on the CPU (tools/cuda_host_emulate):
// every thread of the grid runs sequentially; CUDA intrinsics map to their plain f32
// (and f64) meanings. Only for kernels without shared memory, warps or atomics.
#include <cmath>
#include <cstdint>
struct EmuDim3 { unsigned x, y, z; };
static EmuDim3 blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <class F, class... A>
static void emu_launch(unsigned grid, unsigned block, F f, A... a) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            f(a...);
        }
}
