// Favlo CUDA kernels: the steps of an image generator on NCHW f32 tensors (row-major
// [batch, channels, height, width]), the GPU side of favlo_runtime::cpu::conv.
//
//   conv_t2d:       y = act(ConvTranspose2d(x) · scale[co] + shift[co]) with the weight in
//                   PyTorch's [Cin, Cout, K, K] layout (square kernel, one stride and
//                   padding for both axes, no dilation / output padding / groups / bias);
//                   the per-channel affine (a folded inference batch norm) and the
//                   activation are an optional fused epilogue
//   chan_affine_act: x = act(x · scale[c] + shift[c]) in place (the unfused epilogue)
//   bn_fold:        scale = weight / sqrt(var + eps), shift = bias − mean · scale
//
// Design: the transposed convolution is computed in its *gather* form: every output
// value sums, over the input channels, the few kernel taps that land on it. For output
// row oy the taps are ky ≡ (oy + p) mod s with iy = (oy + p − ky) / s inside the input,
// so no divisibility test runs per tap and nothing is scattered (no atomics, no column
// buffer, a fixed summation order: taps outer, input channels inner, one FMA chain per
// output). A thread owns CONV_CPT consecutive output channels of one pixel, so each
// input value it loads feeds CONV_CPT FMAs; the threads of a warp share channels and
// walk neighbouring pixels, so weight loads are broadcasts and input loads coalesce.
// Activations: 0 none, 1 ReLU, 2 LeakyReLU(slope), 3 tanh (precise tanhf; NVRTC runs
// without fast-math). The affine is __fmul_rn then __fadd_rn, never contracted into an
// FMA, so it rounds exactly like the CPU's `x * a + b`; bn_fold likewise (IEEE sqrt and
// division), so folded scales equal the CPU's bit for bit.

#define CONV_CPT 4

__device__ __forceinline__ float conv_act(float v, int act, float slope) {
    switch (act) {
        case 1: return v > 0.f ? v : 0.f;
        case 2: return v > 0.f ? v : __fmul_rn(v, slope);
        case 3: return tanhf(v);
        default: return v;
    }
}

// Grid (ceil(ceil(cout / CONV_CPT) · ho · wo / blockDim.x), batch); thread → (channel
// group, pixel), the pixel fastest.
extern "C" __global__ void conv_t2d(const float* __restrict__ x, const float* __restrict__ w,
                                    float* __restrict__ y, const float* __restrict__ scale,
                                    const float* __restrict__ shift, int has_affine, int act,
                                    float slope, int cin, int cout, int h, int wd, int ho,
                                    int wo, int k, int s, int p) {
    const int plane = ho * wo;
    const int groups = (cout + CONV_CPT - 1) / CONV_CPT;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)groups * plane) return;
    const int g = (int)(idx / plane);
    const int pix = (int)(idx - (long long)g * plane);
    const int oy = pix / wo, ox = pix - (pix / wo) * wo;
    const int co0 = g * CONV_CPT;
    const long long b = blockIdx.y;
    const long long in_plane = (long long)h * wd;
    const long long w_ci = (long long)cout * k * k;  // weight stride between input channels
    const float* xb = x + b * cin * in_plane;
    float acc[CONV_CPT];
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) acc[j] = 0.f;
    // Channels past cout read channel co0 again (in bounds) and are not stored.
    int wco[CONV_CPT];
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) wco[j] = (co0 + j < cout ? co0 + j : co0) * k * k;

    for (int ky = (oy + p) % s; ky < k; ky += s) {
        const int ty = oy + p - ky;
        if (ty < 0) break;  // ky only grows
        const int iy = ty / s;
        if (iy >= h) continue;
        for (int kx = (ox + p) % s; kx < k; kx += s) {
            const int tx = ox + p - kx;
            if (tx < 0) break;
            const int ix = tx / s;
            if (ix >= wd) continue;
            const float* xp = xb + (long long)iy * wd + ix;
            const float* wp = w + ky * k + kx;
            int ci = 0;
            for (; ci + 4 <= cin; ci += 4) {
                float xv[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) xv[u] = xp[(ci + u) * in_plane];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const float* wr = wp + (ci + u) * w_ci;
#pragma unroll
                    for (int j = 0; j < CONV_CPT; ++j) acc[j] = fmaf(xv[u], wr[wco[j]], acc[j]);
                }
            }
            for (; ci < cin; ++ci) {
                const float xv = xp[ci * in_plane];
                const float* wr = wp + ci * w_ci;
#pragma unroll
                for (int j = 0; j < CONV_CPT; ++j) acc[j] = fmaf(xv, wr[wco[j]], acc[j]);
            }
        }
    }
    float* yb = y + b * cout * (long long)plane + pix;
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) {
        const int co = co0 + j;
        if (co >= cout) break;
        float v = acc[j];
        if (has_affine) v = __fadd_rn(__fmul_rn(v, scale[co]), shift[co]);
        yb[(long long)co * plane] = conv_act(v, act, slope);
    }
}

// x[total] viewed as [batch, c, spatial]: x = act(x · scale[ch] + shift[ch]) in place.
extern "C" __global__ void chan_affine_act(float* __restrict__ x, const float* __restrict__ scale,
                                           const float* __restrict__ shift, int has_affine,
                                           int act, float slope, long long total, int c,
                                           long long spatial) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        if (has_affine) {
            const int ch = (int)((i / spatial) % c);
            v = __fadd_rn(__fmul_rn(v, scale[ch]), shift[ch]);
        }
        x[i] = conv_act(v, act, slope);
    }
}

extern "C" __global__ void bn_fold(const float* __restrict__ weight, const float* __restrict__ bias,
                                   const float* __restrict__ mean, const float* __restrict__ var,
                                   float eps, float* __restrict__ scale, float* __restrict__ shift,
                                   int c) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    const float a = __fdiv_rn(weight[i], __fsqrt_rn(__fadd_rn(var[i], eps)));
    scale[i] = a;
    shift[i] = __fsub_rn(bias[i], __fmul_rn(mean[i], a));
}
