// Favlo CUDA kernels: the pieces of a VITS stochastic duration predictor that
// conv1d.cu / rel_encoder.cu do not cover, on [channels, time] f32 tensors of one
// sequence.
//
//   dw_conv1d:   y[c, t] = bias[c] + Σ_k w[c, k] · x[c, t − p + k·d] (zero outside
//                [0, lin)): a depthwise (groups = channels) dilated convolution, stride 1,
//                weight [C, 1, K] (a DDSConv's separable convolution)
//   gelu_f32:    x = 0.5 x (1 + erf(x / √2)) in place (precise erff)
//   gelu_add_f32: acc += gelu(y) (a DDSConv layer's residual)
//   rq_spline_inverse: z[t] = the inverse rational-quadratic spline with linear tails
//                (Durkan et al.; VITS's ConvFlow) of z[t], its parameters the rows of
//                p [3·bins − 1, len]: widths (rows 0..bins) and heights (bins..2·bins),
//                both times `scale`, then bins − 1 interior derivatives, unnormalized
//
// Design: one thread per output element (per time step for the spline: a thread's
// bins live in registers). The spline mirrors favlo-vits' CPU `spline::inverse` operation
// for operation in f32: softmax (max, exp, sequential sum, divide), the min-width mix
// and running sum, searchsorted with the last knot nudged by 1e-6, the quadratic's
// stable root. NVRTC compiles with --fmad=true, so its products and sums are written
// with __fmul_rn / __fadd_rn, which are never contracted into an FMA: only the
// library's expf / log1pf / logf (a few ulp) can differ from the CPU.

#define SPL_MAX_BINS 32
#define SPL_MIN 1e-3f

// One thread per (c, t); grid ceil(c · lout / blockDim.x).
extern "C" __global__ void dw_conv1d(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ bias, float* __restrict__ y,
                                     int has_bias, int c, int lin, int lout, int k, int d, int p) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)c * lout) return;
    const int ch = (int)(idx / lout);
    const int t = (int)(idx - (long long)ch * lout);
    const float* xr = x + (long long)ch * lin;
    const float* wr = w + (long long)ch * k;
    float acc = has_bias ? bias[ch] : 0.f;
    for (int tap = 0; tap < k; ++tap) {
        const int i = t - p + tap * d;
        if (i >= 0 && i < lin) acc = __fadd_rn(acc, __fmul_rn(wr[tap], xr[i]));
    }
    y[idx] = acc;
}

__device__ __forceinline__ float dp_gelu(float v) {
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.f, erff(__fmul_rn(v, 0.70710678118654752f))));
}

extern "C" __global__ void gelu_f32(float* x, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        x[i] = dp_gelu(x[i]);
}

extern "C" __global__ void gelu_add_f32(float* __restrict__ acc, const float* __restrict__ y,
                                        long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        acc[i] = __fadd_rn(acc[i], dp_gelu(y[i]));
}

// Knots [bins + 1] on [−bound, bound] from unnormalized sizes u[i] = p[row0 + i, t]·scale.
__device__ __forceinline__ void spl_knots(const float* p, int row0, int len, int t, int bins,
                                          float scale, float bound, float* knots) {
    float e[SPL_MAX_BINS];
    for (int i = 0; i < bins; ++i) e[i] = __fmul_rn(p[(long long)(row0 + i) * len + t], scale);
    float m = e[0];
    for (int i = 1; i < bins; ++i) m = fmaxf(m, e[i]);
    float sum = 0.f;
    for (int i = 0; i < bins; ++i) {
        e[i] = expf(__fadd_rn(e[i], -m));
        sum = __fadd_rn(sum, e[i]);
    }
    const float mix = __fadd_rn(1.f, -__fmul_rn(SPL_MIN, (float)bins));
    const float two_b = __fmul_rn(2.f, bound);
    float acc = 0.f;
    knots[0] = -bound;
    for (int i = 0; i < bins; ++i) {
        acc = __fadd_rn(acc, __fadd_rn(SPL_MIN, __fmul_rn(mix, e[i] / sum)));
        knots[i + 1] = __fadd_rn(__fmul_rn(two_b, acc), -bound);
    }
    knots[bins] = bound;
}

__device__ __forceinline__ float spl_softplus(float v) {
    return v > 20.f ? v : log1pf(expf(v));
}

// One thread per t; 1 ≤ bins ≤ SPL_MAX_BINS (the wrapper checks).
extern "C" __global__ void rq_spline_inverse(float* __restrict__ z, const float* __restrict__ p,
                                             int len, int bins, float scale, float bound) {
    const int t = (int)((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= len) return;
    const float y = z[t];
    if (!(y >= -bound && y <= bound)) return;  // linear tails (and NaN) pass through
    float cw[SPL_MAX_BINS + 1];
    float ch[SPL_MAX_BINS + 1];
    spl_knots(p, 0, len, t, bins, scale, bound, cw);
    spl_knots(p, bins, len, t, bins, scale, bound, ch);
    int idx = 0;
    for (int i = 0; i <= bins; ++i) {
        const float kn = i == bins ? __fadd_rn(ch[i], 1e-6f) : ch[i];
        if (y >= kn) idx = i;
    }
    if (idx > bins - 1) idx = bins - 1;
    // Boundary derivatives are 1: softplus(edge) + min = 1.
    const float edge = logf(__fadd_rn(expf(__fadd_rn(1.f, -SPL_MIN)), -1.f));
    const float u0 = idx == 0 ? edge : p[(long long)(2 * bins + idx - 1) * len + t];
    const float u1 = idx + 1 == bins ? edge : p[(long long)(2 * bins + idx) * len + t];
    const float d0 = __fadd_rn(SPL_MIN, spl_softplus(u0));
    const float d1 = __fadd_rn(SPL_MIN, spl_softplus(u1));
    const float x0 = cw[idx], w = __fadd_rn(cw[idx + 1], -cw[idx]);
    const float y0 = ch[idx], h = __fadd_rn(ch[idx + 1], -ch[idx]);
    const float delta = h / w;
    const float dy = __fadd_rn(y, -y0);
    const float s = __fadd_rn(__fadd_rn(d0, d1), -__fmul_rn(2.f, delta));
    const float a = __fadd_rn(__fmul_rn(dy, s), __fmul_rn(h, __fadd_rn(delta, -d0)));
    const float b = __fadd_rn(__fmul_rn(h, d0), -__fmul_rn(dy, s));
    const float c = __fmul_rn(-delta, dy);
    const float disc = fmaxf(__fadd_rn(__fmul_rn(b, b), -__fmul_rn(__fmul_rn(4.f, a), c)), 0.f);
    const float root = __fmul_rn(2.f, c) / __fadd_rn(-b, -sqrtf(disc));
    z[t] = __fadd_rn(__fmul_rn(root, w), x0);
}
