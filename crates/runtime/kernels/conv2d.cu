// Favlo CUDA kernels: the steps of an image generator on NCHW f32 tensors (row-major
// [batch, channels, height, width]), the GPU side of favlo_runtime::cpu::conv.
//
//   conv_t2d:       y = act(ConvTranspose2d(x) · scale[co] + shift[co]) with the weight in
//                   PyTorch's [Cin, Cout, K, K] layout (square kernel, one stride and
//                   padding for both axes, no dilation / output padding / groups / bias);
//                   the per-channel affine (a folded inference batch norm) and the
//                   activation are an optional fused epilogue; conv_t2d_split is the
//                   same with the input channels split over 2..8 threads per output
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

// Adds to acc[j] the taps of output (oy, ox) of channels co0 + j over input channels
// [ci0, ci1): taps outer, input channels inner (4 at a time), one FMA chain per output.
__device__ __forceinline__ void conv_t_taps(float (&acc)[CONV_CPT], const float* __restrict__ xb,
                                            const float* __restrict__ w, int co0, int ci0,
                                            int ci1, int cout, int h, int wd, int oy, int ox,
                                            int k, int s, int p) {
    const long long in_plane = (long long)h * wd;
    const long long w_ci = (long long)cout * k * k;  // weight stride between input channels
    // Channels past cout read channel co0 again (in bounds); the caller does not store them.
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
            int ci = ci0;
            for (; ci + 4 <= ci1; ci += 4) {
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
            for (; ci < ci1; ++ci) {
                const float xv = xp[ci * in_plane];
                const float* wr = wp + ci * w_ci;
#pragma unroll
                for (int j = 0; j < CONV_CPT; ++j) acc[j] = fmaf(xv, wr[wco[j]], acc[j]);
            }
        }
    }
}

// The epilogue and store of CONV_CPT channels of one output pixel.
__device__ __forceinline__ void conv_t_store(const float (&acc)[CONV_CPT], float* __restrict__ yb,
                                             const float* __restrict__ scale,
                                             const float* __restrict__ shift, int has_affine,
                                             int act, float slope, int co0, int cout,
                                             long long plane) {
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) {
        const int co = co0 + j;
        if (co >= cout) break;
        float v = acc[j];
        if (has_affine) v = __fadd_rn(__fmul_rn(v, scale[co]), shift[co]);
        yb[(long long)co * plane] = conv_act(v, act, slope);
    }
}

// Grid (ceil(ceil(cout / CONV_CPT) · ho · wo / blockDim.x), batch); thread → (channel
// group, pixel), the pixel fastest; every input channel in one thread.
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
    const float* xb = x + b * cin * (long long)h * wd;
    float acc[CONV_CPT];
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) acc[j] = 0.f;
    conv_t_taps(acc, xb, w, co0, 0, cin, cout, h, wd, oy, ox, k, s, p);
    conv_t_store(acc, y + b * cout * (long long)plane + pix, scale, shift, has_affine, act, slope,
                 co0, cout, plane);
}

// The same with the input channels split over blockDim.y (2..CONV_SPLIT_MAX) threads
// per output, for grids too small to fill the GPU: block (32, S); thread (lane, j)
// sums channels [j·cin/S, (j+1)·cin/S) of output lane, the partials meet in shared
// memory and row 0 adds them in slice order (fixed, so results are reproducible).
#define CONV_SPLIT_MAX 8
extern "C" __global__ void conv_t2d_split(const float* __restrict__ x,
                                          const float* __restrict__ w, float* __restrict__ y,
                                          const float* __restrict__ scale,
                                          const float* __restrict__ shift, int has_affine,
                                          int act, float slope, int cin, int cout, int h, int wd,
                                          int ho, int wo, int k, int s, int p) {
    __shared__ float part[CONV_SPLIT_MAX][CONV_CPT][32];
    const int S = blockDim.y, sy = threadIdx.y, lane = threadIdx.x;
    const int plane = ho * wo;
    const int groups = (cout + CONV_CPT - 1) / CONV_CPT;
    const long long idx = (long long)blockIdx.x * 32 + lane;
    const bool live = idx < (long long)groups * plane;
    const int g = live ? (int)(idx / plane) : 0;
    const int pix = live ? (int)(idx - (long long)g * plane) : 0;
    const int oy = pix / wo, ox = pix - (pix / wo) * wo;
    const int co0 = g * CONV_CPT;
    const long long b = blockIdx.y;
    float acc[CONV_CPT];
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) acc[j] = 0.f;
    if (live) {
        const int ci0 = (int)((long long)sy * cin / S), ci1 = (int)((long long)(sy + 1) * cin / S);
        conv_t_taps(acc, x + b * cin * (long long)h * wd, w, co0, ci0, ci1, cout, h, wd, oy, ox,
                    k, s, p);
    }
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) part[sy][j][lane] = acc[j];
    __syncthreads();
    if (sy != 0 || !live) return;
#pragma unroll
    for (int j = 0; j < CONV_CPT; ++j) {
        float v = part[0][j][lane];
        for (int t = 1; t < S; ++t) v += part[t][j][lane];
        acc[j] = v;
    }
    conv_t_store(acc, y + b * cout * (long long)plane + pix, scale, shift, has_affine, act, slope,
                 co0, cout, plane);
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
