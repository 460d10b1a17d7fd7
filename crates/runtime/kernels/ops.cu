// Favlo CUDA kernels: the elementwise and per-row operations (f32, row-major).
//
// Design: one block per row for the reductions (rms_norm, softmax), a grid-stride
// loop for the elementwise ones; all arithmetic in f32 with precise expf/rsqrtf
// (NVRTC is run without fast-math), matching the CPU kernels' semantics:
//   rms_norm: out = x / sqrt(mean(x^2) + eps) * weight, per row of `dim`
//   softmax:  in place, per row of `dim`, max-subtracted
//   silu:     x * sigmoid(x), in place;   swiglu: out = silu(gate) * up
//   rope_neox: x [t, n_heads, head_dim], pairs (i, i + rot/2), cos/sin tables
//              [t, rot/2] computed on the host in f64 (so large positions keep precision)

__device__ __forceinline__ float block_sum(float v, float* shm) {
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

__device__ __forceinline__ float block_max(float v, float* shm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    float m = __int_as_float(0xff800000);
    for (int i = 0; i < nw; ++i) m = fmaxf(m, shm[i]);
    return m;
}

extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    float* __restrict__ out, int dim, float eps) {
    __shared__ float shm[32];
    const float* xr = x + (long long)blockIdx.x * dim;
    float* o = out + (long long)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, shm);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * w[i];
}

extern "C" __global__ void softmax(float* __restrict__ x, int dim) {
    __shared__ float shm[32];
    float* xr = x + (long long)blockIdx.x * dim;
    float m = __int_as_float(0xff800000);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_max(m, shm);
    float s = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float e = expf(xr[i] - m);
        xr[i] = e;
        s += e;
    }
    s = block_sum(s, shm);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) xr[i] *= inv;
}

extern "C" __global__ void silu(float* __restrict__ x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        x[i] = v / (1.0f + expf(-v));
    }
}

extern "C" __global__ void swiglu(const float* __restrict__ gate, const float* __restrict__ up,
                                  float* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// grid: (t * n_heads), block: threads over rot/2 pairs.
extern "C" __global__ void rope_neox(float* __restrict__ x, const float* __restrict__ cos_t,
                                     const float* __restrict__ sin_t, int n_heads, int head_dim,
                                     int rot) {
    const int half = rot >> 1;
    const int tok = blockIdx.x / n_heads;
    float* h = x + (long long)blockIdx.x * head_dim;
    const float* c = cos_t + (long long)tok * half;
    const float* s = sin_t + (long long)tok * half;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float x0 = h[i], x1 = h[i + half];
        h[i] = x0 * c[i] - x1 * s[i];
        h[i + half] = x0 * s[i] + x1 * c[i];
    }
}
