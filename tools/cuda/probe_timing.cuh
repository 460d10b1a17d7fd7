// Timing shared by the tools/cuda probes: the best of three launches after a warm-up,
// the clock block 0 ran at (its cycle count over the time), and one table row with the
// rate against the 1979 TFLOP/s datasheet and against the dense FP8 peak at that clock
// (8192 FLOP per clock per multiprocessor).
#pragma once
#include <cstdio>
#include <cuda_runtime.h>

struct ProbeTime {
    float ms;
    double mhz;
};

// `launch(n)` launches the probe for n stages; each launch writes block 0's cycles to clk[0].
template <class Launch>
ProbeTime probe_time(Launch launch, int stages, const long long* clk) {
    launch(64);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    ProbeTime best = {1e30f, 0.0};
    for (int r = 0; r < 3; ++r) {
        cudaEventRecord(a);
        launch(stages);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best.ms) {
            long long cycles;
            cudaMemcpy(&cycles, clk, 8, cudaMemcpyDeviceToHost);
            best = {ms, cycles / (ms * 1e3)};
        }
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

// | label | ms | TFLOP/s | % of 1979 | MHz | % of the peak at that clock | last error |
inline void probe_row(const char* label, double flop, ProbeTime t, int sms) {
    const double tf = flop / (t.ms * 1e-3) / 1e12, peak = 8192.0 * sms * t.mhz * 1e6 / 1e12;
    printf("| %s | %.3f | %.0f | %.1f%% | %.0f | %.1f%% | %s |\n", label, t.ms, tf,
           100.0 * tf / 1979.0, t.mhz, 100.0 * tf / peak, cudaGetErrorString(cudaGetLastError()));
}
