// Favlo CUDA kernels: the generic steps of a bidirectional encoder (BERT / RoBERTa
// family) over a *packed* batch: sequences laid end to end, row r of every
// activation matrix is one real token, no padding rows (f32, row-major).
//
// Design: exact f32 arithmetic with precise expf/erff/tanhf/sqrtf (NVRTC runs
// without fast-math), so results agree with the CPU path to f32 rounding:
//   enc_embed_ln:  out[r] = LayerNorm(word[ids[r]] + position[pos[r]] + type0) (one block per row)
//   enc_add_ln:    x[r] = LayerNorm(x[r] + d[r] (+ bias)) · gamma + beta, in place
//                  (the residual add, the linear's bias and the norm in one pass)
//   enc_bias_act:  y = act(y + bias) in place; act 0 none, 1 erf GELU, 2 tanh GELU, 3 ReLU
//   enc_attn_*:    per (query tile, head): softmax(scale · Q Kᵀ) V over the query's own
//                  sequence, read from the fused [q | k | v] rows (row stride 3h), online
//                  softmax over key tiles (flash style), f32 accumulation
//   enc_pool:      per sequence: mean (f64 sums) / first / last / max over its rows, then
//                  optionally L2-normalised (f64 norm, eps 1e-12)
// Statistics of LayerNorm are two-pass (mean, then centred variance) like the CPU's.

#define ENC_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float enc_block_sum(float v, float* shm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    float s = 0.f;
    for (int i = 0; i < nw; ++i) s += shm[i];
    return s;
}

__device__ __forceinline__ double enc_block_sum_f64(double v, double* shm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    double s = 0.0;
    for (int i = 0; i < nw; ++i) s += shm[i];
    return s;
}

// LayerNorm of the row held in shared memory `row[h]`, written to `out`.
__device__ __forceinline__ void enc_ln_row(const float* row, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, float eps,
                                           float* __restrict__ out, int h, float* red) {
    float s = 0.f;
    for (int c = threadIdx.x; c < h; c += blockDim.x) s += row[c];
    const float mean = enc_block_sum(s, red) / (float)h;
    float v = 0.f;
    for (int c = threadIdx.x; c < h; c += blockDim.x) {
        const float d = row[c] - mean;
        v += d * d;
    }
    const float var = enc_block_sum(v, red) / (float)h;
    const float inv = 1.0f / sqrtf(var + eps);
    for (int c = threadIdx.x; c < h; c += blockDim.x)
        out[c] = (row[c] - mean) * inv * gamma[c] + beta[c];
}

// Dynamic shared memory: h floats.
extern "C" __global__ void enc_embed_ln(const int* __restrict__ ids, const int* __restrict__ pos,
                                        const float* __restrict__ word,
                                        const float* __restrict__ position,
                                        const float* __restrict__ type0,
                                        const float* __restrict__ gamma,
                                        const float* __restrict__ beta, float eps,
                                        float* __restrict__ out, int h) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const long long r = blockIdx.x;
    const float* w = word + (long long)ids[r] * h;
    const float* p = position + (long long)pos[r] * h;
    for (int c = threadIdx.x; c < h; c += blockDim.x) row[c] = w[c] + p[c] + type0[c];
    __syncthreads();
    enc_ln_row(row, gamma, beta, eps, out + r * h, h, red);
}

// Dynamic shared memory: h floats. `has_bias` 0: `bias` is not read.
extern "C" __global__ void enc_add_ln(float* __restrict__ x, const float* __restrict__ d,
                                      const float* __restrict__ bias, int has_bias,
                                      const float* __restrict__ gamma,
                                      const float* __restrict__ beta, float eps, int h) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const long long r = blockIdx.x;
    float* xr = x + r * h;
    const float* dr = d + r * h;
    for (int c = threadIdx.x; c < h; c += blockDim.x) {
        const float delta = has_bias ? dr[c] + bias[c] : dr[c];
        row[c] = xr[c] + delta;
    }
    __syncthreads();
    enc_ln_row(row, gamma, beta, eps, xr, h, red);
}

__device__ __forceinline__ float enc_act(float v, int act) {
    switch (act) {
        case 1: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
        case 2: {
            const float c = 0.79788456080286535588f;  // sqrt(2 / pi)
            return 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
        }
        case 3: return fmaxf(v, 0.0f);
        default: return v;
    }
}

// y[rows, n] = act(y + bias[n]).
extern "C" __global__ void enc_bias_act(float* __restrict__ y, const float* __restrict__ bias,
                                        long long total, int n, int act) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = enc_act(y[i] + bias[i % n], act);
    }
}

// Attention over packed sequences. `tiles[3·b]` = (first row of the sequence, its length,
// first query of the tile); grid (tiles, heads), 128 threads. Thread t owns query row
// t / 4 of the tile; the 4 threads of a row split the keys of a key tile (columns
// t%4 + 4j) for the scores and the head dimensions (t%4 + 4j) for the output. K and V
// tiles share one shared buffer (K, then V). DM: the largest head dim the instance
// takes (d ≤ DM); BK: keys per tile.
#define ENC_BQ 32
template <int DM, int BK>
__device__ __forceinline__ void enc_attn(const float* __restrict__ qkv, float* __restrict__ out,
                                         const int* __restrict__ tiles, int heads, int d,
                                         float scale) {
    __shared__ float qs[ENC_BQ][DM + 1];
    __shared__ float kv[BK][DM + 1];
    __shared__ float ps[ENC_BQ][BK + 1];
    const int start = tiles[3 * blockIdx.x], len = tiles[3 * blockIdx.x + 1],
              q0 = tiles[3 * blockIdx.x + 2];
    const int head = blockIdx.y;
    const int h = heads * d;
    const long long ld = 3LL * h;
    const int tid = threadIdx.x, r = tid >> 2, part = tid & 3;
    const float* base = qkv + (long long)start * ld + (long long)head * d;

    for (int i = tid; i < ENC_BQ * d; i += blockDim.x) {
        const int rr = i / d, c = i - rr * d;
        qs[rr][c] = (q0 + rr < len) ? base[(long long)(q0 + rr) * ld + c] : 0.f;
    }
    float o[DM / 4];
#pragma unroll
    for (int j = 0; j < DM / 4; ++j) o[j] = 0.f;
    float m_i = ENC_NEG_INF, l_i = 0.f;

    for (int k0 = 0; k0 < len; k0 += BK) {
        const int nk = min(BK, len - k0);
        __syncthreads();
        for (int i = tid; i < BK * d; i += blockDim.x) {
            const int kk = i / d, c = i - kk * d;
            kv[kk][c] = (kk < nk) ? base[(long long)(k0 + kk) * ld + h + c] : 0.f;
        }
        __syncthreads();
        float s[BK / 4];
#pragma unroll
        for (int j = 0; j < BK / 4; ++j) s[j] = 0.f;
        for (int c = 0; c < d; ++c) {
            const float qv = qs[r][c];
#pragma unroll
            for (int j = 0; j < BK / 4; ++j) s[j] = fmaf(qv, kv[part + 4 * j][c], s[j]);
        }
        float mx = ENC_NEG_INF;
#pragma unroll
        for (int j = 0; j < BK / 4; ++j) {
            s[j] = (part + 4 * j < nk) ? s[j] * scale : ENC_NEG_INF;
            mx = fmaxf(mx, s[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_i, mx);
        const float alpha = expf(m_i - m_new);
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BK / 4; ++j) {
            const float p = expf(s[j] - m_new);
            ps[r][part + 4 * j] = p;
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        l_i = l_i * alpha + sum;
        m_i = m_new;
#pragma unroll
        for (int j = 0; j < DM / 4; ++j) o[j] *= alpha;
        __syncthreads();
        for (int i = tid; i < BK * d; i += blockDim.x) {
            const int kk = i / d, c = i - kk * d;
            kv[kk][c] = (kk < nk) ? base[(long long)(k0 + kk) * ld + 2 * h + c] : 0.f;
        }
        __syncthreads();
        for (int kk = 0; kk < nk; ++kk) {
            const float p = ps[r][kk];
#pragma unroll
            for (int j = 0; j < DM / 4; ++j) {
                const int c = part + 4 * j;
                if (c < d) o[j] = fmaf(p, kv[kk][c], o[j]);
            }
        }
    }
    if (q0 + r < len) {
        const float inv = 1.0f / l_i;
        float* dst = out + (long long)(start + q0 + r) * h + (long long)head * d;
#pragma unroll
        for (int j = 0; j < DM / 4; ++j) {
            const int c = part + 4 * j;
            if (c < d) dst[c] = o[j] * inv;
        }
    }
}

extern "C" __global__ void __launch_bounds__(128) enc_attn_d32(const float* __restrict__ qkv,
                                                               float* __restrict__ out,
                                                               const int* __restrict__ tiles,
                                                               int heads, int d, float scale) {
    enc_attn<32, 64>(qkv, out, tiles, heads, d, scale);
}
extern "C" __global__ void __launch_bounds__(128) enc_attn_d64(const float* __restrict__ qkv,
                                                               float* __restrict__ out,
                                                               const int* __restrict__ tiles,
                                                               int heads, int d, float scale) {
    enc_attn<64, 64>(qkv, out, tiles, heads, d, scale);
}
extern "C" __global__ void __launch_bounds__(128) enc_attn_d128(const float* __restrict__ qkv,
                                                                float* __restrict__ out,
                                                                const int* __restrict__ tiles,
                                                                int heads, int d, float scale) {
    enc_attn<128, 32>(qkv, out, tiles, heads, d, scale);
}

// Pooling per sequence: grid = sequences; `offsets[s]..offsets[s+1]` are its rows.
// mode 0 mean, 1 first (CLS), 2 last, 3 max. Dynamic shared memory: h floats.
extern "C" __global__ void enc_pool(const float* __restrict__ x, const int* __restrict__ offsets,
                                    float* __restrict__ out, int h, int mode, int normalize) {
    extern __shared__ float pooled[];
    __shared__ double red[32];
    const int s = blockIdx.x;
    const int start = offsets[s], len = offsets[s + 1] - start;
    double sq = 0.0;
    for (int c = threadIdx.x; c < h; c += blockDim.x) {
        float v = 0.f;
        if (len > 0) {
            const float* col = x + (long long)start * h + c;
            if (mode == 0) {
                double acc = 0.0;
                for (int i = 0; i < len; ++i) acc += (double)col[(long long)i * h];
                v = (float)(acc / (double)len);
            } else if (mode == 1) {
                v = col[0];
            } else if (mode == 2) {
                v = col[(long long)(len - 1) * h];
            } else {
                v = ENC_NEG_INF;
                for (int i = 0; i < len; ++i) v = fmaxf(v, col[(long long)i * h]);
            }
        }
        pooled[c] = v;
        sq += (double)v * (double)v;
    }
    float* dst = out + (long long)s * h;
    if (normalize) {
        const double norm = sqrt(enc_block_sum_f64(sq, red));
        const double inv = 1.0 / fmax(norm, 1e-12);
        for (int c = threadIdx.x; c < h; c += blockDim.x) dst[c] = (float)((double)pooled[c] * inv);
    } else {
        for (int c = threadIdx.x; c < h; c += blockDim.x) dst[c] = pooled[c];
    }
}
