// Exposes the kernels of conv1d.cu and rel_encoder.cu, run on the host through shim.h,
// with the launch geometry of their Rust wrappers (conv1d.rs, rel_encoder.rs).
#include "shim.h"
#include "../../crates/runtime/kernels/conv1d.cu"
#include "../../crates/runtime/kernels/rel_encoder.cu"

static unsigned flat(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? b : 65536);
}
static unsigned one_per(long long n) { return (unsigned)((n + 255) / 256); }

extern "C" {
void emu_gate(const float* a, float* out, long long n) { emu_launch(flat(n), 256, gate_f32, a, out, n); }
void emu_copy_rows(const float* src, float* dst, int rows, int len, int r0, int rev) {
    emu_launch(flat((long long)rows * len), 256, copy_rows_f32, src, dst, rows, len, r0, rev);
}
void emu_conv1d(const float* x, const float* w, const float* bias, const float* res, float* y,
                int has_bias, int has_res, int accumulate, int has_act, float slope, int cin,
                int cout, int lin, int lout, int k, int d, int p) {
    long long threads = (long long)((cout + 3) / 4) * lout;
    emu_launch(one_per(threads), 256, conv1d, x, w, bias, res, y, has_bias, has_res, accumulate,
               has_act, slope, cin, cout, lin, lout, k, d, p);
}
void emu_rel_attention(const float* q, const float* k, const float* v, const float* ek,
                       const float* ev, float* scores, float* out, int h, int d, int t, int w) {
    float scale = 1.0f / std::sqrt((float)d);
    emu_launch(one_per((long long)h * t * t), 256, rel_scores, q, k, ek, scores, h, d, t, w, scale);
    emu_launch(one_per((long long)h * t), 256, softmax_rows, scores, h * t, t);
    emu_launch(one_per((long long)h * d * t), 256, rel_out, (const float*)scores, v, ev, out, h, d, t, w);
}
void emu_ln(const float* x, const float* g, const float* b, float* y, int c, int t, float eps) {
    emu_launch(one_per(t), 256, ln_channels, x, g, b, y, c, t, eps);
}
}
