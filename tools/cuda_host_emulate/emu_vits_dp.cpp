// Exposes the kernels of vits_dp.cu (the VITS duration predictor's depthwise convolution,
// GELU and inverse spline), run on the host through shim.h, with the launch geometry of
// their Rust wrapper (crates/runtime/src/cuda/vits_dp.rs).
#include "shim.h"
#include "../../crates/runtime/kernels/vits_dp.cu"

static unsigned flat(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? b : 65536);
}
static unsigned one_per(long long n) { return (unsigned)((n + 255) / 256); }

extern "C" {
void emu_dw_conv1d(const float* x, const float* w, const float* bias, float* y, int has_bias,
                   int c, int lin, int lout, int k, int d, int p) {
    emu_launch(one_per((long long)c * lout), 256, dw_conv1d, x, w, bias, y, has_bias, c, lin,
               lout, k, d, p);
}
void emu_gelu(float* x, long long n) { emu_launch(flat(n), 256, gelu_f32, x, n); }
void emu_gelu_add(float* acc, const float* y, long long n) {
    emu_launch(flat(n), 256, gelu_add_f32, acc, y, n);
}
void emu_spline(float* z, const float* p, int len, int bins, float scale, float bound) {
    emu_launch(one_per(len), 256, rq_spline_inverse, z, p, len, bins, scale, bound);
}
}
