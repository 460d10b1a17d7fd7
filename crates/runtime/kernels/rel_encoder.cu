// Favlo CUDA kernels: the pieces of a VITS / Glow-TTS text encoder layer that are not
// convolutions, on channel-major [C, T] f32 tensors of one unpadded sequence (no mask):
// the GPU side of favlo_runtime::cpu::{attention_rel_window, layer_norm_channels}.
//
//   rel_scores:   s[h, i, j] = (Σ_c q[h·d + c, i]·k[h·d + c, j]
//                               + [|j − i| ≤ w] Σ_c q[h·d + c, i]·ek[j − i + w, c]) · scale
//   softmax_rows: s[r, ·] = softmax(s[r, ·]) in place, one row of T per thread
//   rel_out:      o[h·d + c, i] = Σ_j p[h, i, j]·v[h·d + c, j]
//                                 + Σ_{|j − i| ≤ w} p[h, i, j]·ev[j − i + w, c]
//   ln_channels:  y[c, t] = ((x[c, t]·a_t) + b_t)·γ[c] + β[c], a_t = 1/√(var_t + eps),
//                 b_t = −mean_t·a_t, mean/var over the C channels in f64 (biased var)
//
// Design: one thread per output element (per score, per softmax row, per output value,
// per time step of the norm), plain loops in a fixed order: these tensors are small
// (192 channels × a sentence's phonemes), so simplicity beats tiling. The relative
// embeddings [2w + 1, d] are shared by every head. Sums are FMA chains; the score's
// content and relative parts are summed separately and then added, then scaled, as the
// CPU does; the norm's final affine uses explicitly rounded multiplies and adds so it
// matches the CPU's expression operation for operation.

// Grid over heads·t·t, j fastest.
extern "C" __global__ void rel_scores(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ ek, float* __restrict__ s,
                                      int heads, int d, int t, int w, float scale) {
    const long long tt = (long long)t * t;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)heads * tt) return;
    const int h = (int)(idx / tt);
    const long long rem = idx - (long long)h * tt;
    const int i = (int)(rem / t);
    const int j = (int)(rem - (long long)i * t);
    const float* qh = q + (long long)h * d * t;
    const float* kh = k + (long long)h * d * t;
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc = fmaf(qh[(long long)c * t + i], kh[(long long)c * t + j], acc);
    const int r = j - i + w;
    if (r >= 0 && r <= 2 * w) {
        float rel = 0.f;
        for (int c = 0; c < d; ++c) rel = fmaf(qh[(long long)c * t + i], ek[r * d + c], rel);
        acc = __fadd_rn(acc, rel);
    }
    s[idx] = __fmul_rn(acc, scale);
}

// Grid over rows (heads·t); each thread normalises one row of t values.
extern "C" __global__ void softmax_rows(float* __restrict__ s, int rows, int t) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* row = s + r * t;
    float m = row[0];
    for (int j = 1; j < t; ++j) m = fmaxf(m, row[j]);
    float sum = 0.f;
    for (int j = 0; j < t; ++j) {
        const float e = expf(row[j] - m);
        row[j] = e;
        sum += e;
    }
    const float inv = 1.f / sum;
    for (int j = 0; j < t; ++j) row[j] *= inv;
}

// Grid over heads·d·t, i fastest (o's own layout).
extern "C" __global__ void rel_out(const float* __restrict__ p, const float* __restrict__ v,
                                   const float* __restrict__ ev, float* __restrict__ o,
                                   int heads, int d, int t, int w) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)heads * d * t) return;
    const long long hc = idx / t;  // h·d + c
    const int i = (int)(idx - hc * t);
    const int h = (int)(hc / d);
    const int c = (int)(hc - (long long)h * d);
    const float* prow = p + ((long long)h * t + i) * t;
    const float* vrow = v + hc * t;
    float acc = 0.f;
    for (int j = 0; j < t; ++j) acc = fmaf(prow[j], vrow[j], acc);
    const int lo = i - w < 0 ? 0 : i - w;
    const int hi = i + w > t - 1 ? t - 1 : i + w;
    for (int j = lo; j <= hi; ++j) acc = fmaf(prow[j], ev[(j - i + w) * d + c], acc);
    o[idx] = acc;
}

// Grid over t; each thread normalises one time step (column) over the channels.
extern "C" __global__ void ln_channels(const float* __restrict__ x, const float* __restrict__ g,
                                       const float* __restrict__ b, float* __restrict__ y,
                                       int channels, int t, float eps) {
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= t) return;
    double mean = 0.0, sq = 0.0;
    for (int c = 0; c < channels; ++c) {
        const double v = (double)x[(long long)c * t + col];
        mean += v;
        sq += v * v;
    }
    const double inv_c = 1.0 / (double)channels;
    const double m = mean * inv_c;
    double var = sq * inv_c - m * m;
    if (var < 0.0) var = 0.0;
    const double r = 1.0 / sqrt(var + (double)eps);
    const float a = (float)r;
    const float sh = (float)(-m * r);
    for (int c = 0; c < channels; ++c) {
        const long long o = (long long)c * t + col;
        y[o] = __fadd_rn(__fmul_rn(__fadd_rn(__fmul_rn(x[o], a), sh), g[c]), b[c]);
    }
}
