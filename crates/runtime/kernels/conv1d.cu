// Favlo CUDA kernels: 1-D convolutions on [channels, time] f32 tensors (row-major, one
// sequence), the GPU side of favlo_runtime::cpu::{conv1d, conv_transpose1d} as a
// HiFi-GAN generator uses them.
//
//   conv1d:    y[co, t] = bias[co] + Σ_ci Σ_k w[co, ci, k] · a(x[ci, t − p + k·d])
//              (+ res[co, t]) (+ y[co, t] when accumulating), zero padding p on each
//              side, dilation d, stride 1; a = leaky ReLU(slope) when fused, else the
//              identity (a(0) = 0, so padding before or after it is the same)
//   conv_t1d:  y[co, o] = bias[co] + Σ_ci Σ_{k: o + p − k = i·s, 0 ≤ i < L}
//              w[ci, co, k] · a(x[ci, i]), weight in PyTorch's [Cin, Cout, K] layout
//   tanh_f32:  x = tanh(x) in place (precise tanhf; NVRTC runs without fast-math)
//   gate_f32:  out[c, t] = tanh(a[c, t]) · σ(a[C + c, t]) over a [2C, L] input (the
//              WaveNet gate of a VITS flow; precise tanhf / expf)
//   copy_rows_f32: dst[r0 + r, t] = src[r', t], r' = r or (rows − 1 − r) when reversing
//              (a VITS flow's channel flip and the join of its two halves)
//
// Design: gather form, every output sums its own taps (taps outer, input channels
// inner, one FMA chain per output, a fixed order: no atomics, results reproducible).
// A thread owns C1D_CPT consecutive output channels of one time step, so every input
// value it loads (and activates) feeds C1D_CPT FMAs; the threads of a warp walk
// neighbouring time steps of the same channels, so weight loads are broadcasts and
// input loads coalesce. In conv_t1d the taps of output o are k ≡ (o + p) mod s, so no
// divisibility test runs per tap. The residual and the accumulation are plain f32 adds
// after the sum (conv + bias, then + res, then + y), the CPU's order.

#define C1D_CPT 4

__device__ __forceinline__ float c1d_act(float v, int has_act, float slope) {
    return (has_act && v < 0.f) ? __fmul_rn(v, slope) : v;
}

// Grid ceil(ceil(cout / C1D_CPT) · lout / blockDim.x); thread → (channel group, t), t
// fastest.
extern "C" __global__ void conv1d(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ bias, const float* __restrict__ res,
                                  float* y, int has_bias, int has_res, int accumulate,
                                  int has_act, float slope, int cin, int cout, int lin,
                                  int lout, int k, int d, int p) {
    const int groups = (cout + C1D_CPT - 1) / C1D_CPT;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)groups * lout) return;
    const int g = (int)(idx / lout);
    const int t = (int)(idx - (long long)g * lout);
    const int co0 = g * C1D_CPT;
    // Channels past cout read channel co0 again (in bounds) and are not stored.
    long long wrow[C1D_CPT];
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j)
        wrow[j] = (long long)(co0 + j < cout ? co0 + j : co0) * cin * k;
    float acc[C1D_CPT];
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j) acc[j] = 0.f;
    for (int kk = 0; kk < k; ++kk) {
        const int ti = t - p + kk * d;
        if (ti < 0 || ti >= lin) continue;
        const float* xp = x + ti;
        for (int ci = 0; ci < cin; ++ci) {
            const float xv = c1d_act(xp[(long long)ci * lin], has_act, slope);
#pragma unroll
            for (int j = 0; j < C1D_CPT; ++j)
                acc[j] = fmaf(xv, w[wrow[j] + (long long)ci * k + kk], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j) {
        const int co = co0 + j;
        if (co >= cout) break;
        const long long o = (long long)co * lout + t;
        float v = acc[j];
        if (has_bias) v = __fadd_rn(v, bias[co]);
        if (has_res) v = __fadd_rn(v, res[o]);
        if (accumulate) v = __fadd_rn(y[o], v);
        y[o] = v;
    }
}

// Grid ceil(ceil(cout / C1D_CPT) · lout / blockDim.x); thread → (channel group, o).
extern "C" __global__ void conv_t1d(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ bias, float* __restrict__ y,
                                    int has_bias, int has_act, float slope, int cin, int cout,
                                    int lin, int lout, int k, int s, int p) {
    const int groups = (cout + C1D_CPT - 1) / C1D_CPT;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)groups * lout) return;
    const int g = (int)(idx / lout);
    const int o = (int)(idx - (long long)g * lout);
    const int co0 = g * C1D_CPT;
    int wco[C1D_CPT];
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j) wco[j] = (co0 + j < cout ? co0 + j : co0) * k;
    const long long w_ci = (long long)cout * k;
    float acc[C1D_CPT];
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j) acc[j] = 0.f;
    for (int kk = (o + p) % s; kk < k; kk += s) {
        const int ti = o + p - kk;
        if (ti < 0) break;  // kk only grows
        const int i = ti / s;
        if (i >= lin) continue;
        for (int ci = 0; ci < cin; ++ci) {
            const float xv = c1d_act(x[(long long)ci * lin + i], has_act, slope);
            const float* wr = w + ci * w_ci + kk;
#pragma unroll
            for (int j = 0; j < C1D_CPT; ++j) acc[j] = fmaf(xv, wr[wco[j]], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < C1D_CPT; ++j) {
        const int co = co0 + j;
        if (co >= cout) break;
        float v = acc[j];
        if (has_bias) v = __fadd_rn(v, bias[co]);
        y[(long long)co * lout + o] = v;
    }
}

extern "C" __global__ void tanh_f32(float* __restrict__ x, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        x[i] = tanhf(x[i]);
}

// out[i] = tanh(a[i]) · σ(a[n + i]) for i < n = C·L: the first C rows of a [2C, L] are
// the tanh half, the next C the sigmoid half. σ(v) = 1 / (1 + e^−v).
extern "C" __global__ void gate_f32(const float* __restrict__ a, float* __restrict__ out,
                                    long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float sg = 1.f / (1.f + expf(-a[n + i]));
        out[i] = tanhf(a[i]) * sg;
    }
}

// dst[(r0 + r) · len + t] = src[(rev ? rows − 1 − r : r) · len + t] for r < rows, t < len.
extern "C" __global__ void copy_rows_f32(const float* __restrict__ src, float* __restrict__ dst,
                                         int rows, int len, int r0, int rev) {
    const long long n = (long long)rows * len;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / len);
        const int t = (int)(i - (long long)r * len);
        const int rs = rev ? rows - 1 - r : r;
        dst[((long long)r0 + r) * len + t] = src[(long long)rs * len + t];
    }
}
