//! Image-generator kernels: transposed 2-D convolution, inference batch norm, ReLU
//! and tanh, on row-major NCHW f32 slices.
//!
//! Key design choices:
//! - A transposed convolution is one GEMM plus a scatter ("col2im"): per image,
//!   `cols[Cout·K·K, H·W] = Wᵀ · x`, read straight from PyTorch's
//!   `ConvTranspose2d` weight layout `[Cin, Cout, K, K]` through `gemm` strides (no
//!   transposed copy), then every output channel adds its `K·K` column rows into
//!   its own output plane. Output channels never share memory, so the scatter is
//!   split over rayon without atomics, and its summation order is fixed: the
//!   result is bit-for-bit the same on every run and at every thread count of the
//!   scatter.
//! - The caller owns all memory, the `cols` scratch included
//!   ([`ConvTranspose2d::cols_len`]), so a pipeline can account it in its ledger.
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in
//!   release builds the kernel returns without writing (it never panics).
//!
//! [`reference`] holds the f64 scalar definitions the tests compare against.

pub mod reference;

use rayon::prelude::*;

const PAR_MIN: usize = 1 << 15;

/// Geometry of one `nn.ConvTranspose2d` (square kernel, equal stride and padding
/// on both axes, no dilation, no output padding, one group, no bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2d {
    /// Input channels (`Cin`).
    pub in_channels: usize,
    /// Output channels (`Cout`).
    pub out_channels: usize,
    /// Kernel side `K`.
    pub kernel: usize,
    /// Stride `s`.
    pub stride: usize,
    /// Padding `p` (cropped from each border of the full output).
    pub padding: usize,
    /// Input height `H`.
    pub in_h: usize,
    /// Input width `W`.
    pub in_w: usize,
}

impl ConvTranspose2d {
    fn out_side(&self, n: usize) -> usize {
        if n == 0 || self.stride == 0 {
            return 0;
        }
        ((n - 1) * self.stride + self.kernel).saturating_sub(2 * self.padding)
    }

    /// Output height `(H - 1)·s + K - 2p`.
    pub fn out_h(&self) -> usize {
        self.out_side(self.in_h)
    }

    /// Output width `(W - 1)·s + K - 2p`.
    pub fn out_w(&self) -> usize {
        self.out_side(self.in_w)
    }

    /// Elements of one input image `Cin·H·W`.
    pub fn in_len(&self) -> usize {
        self.in_channels * self.in_h * self.in_w
    }

    /// Elements of one output image `Cout·Ho·Wo`.
    pub fn out_len(&self) -> usize {
        self.out_channels * self.out_h() * self.out_w()
    }

    /// Elements of the weight `Cin·Cout·K·K` (PyTorch layout `[Cin, Cout, K, K]`).
    pub fn weight_len(&self) -> usize {
        self.in_channels * self.out_channels * self.kernel * self.kernel
    }

    /// Elements of the scratch [`conv_transpose2d`] needs: `Cout·K·K·H·W`
    /// (one image's columns; images are processed one after another).
    pub fn cols_len(&self) -> usize {
        self.out_channels * self.kernel * self.kernel * self.in_h * self.in_w
    }

    /// Whether the geometry produces a non-empty output.
    pub fn is_valid(&self) -> bool {
        self.in_channels > 0
            && self.out_channels > 0
            && self.kernel > 0
            && self.stride > 0
            && self.out_h() > 0
            && self.out_w() > 0
    }
}

fn gemm_parallelism(flops: usize) -> gemm::Parallelism {
    let t = rayon::current_num_threads();
    if flops < (1 << 18) || t <= 1 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(t)
    }
}

/// `out[b, Cout, Ho, Wo] = ConvTranspose2d(x[b, Cin, H, W])` for `batch` images,
/// with `weight` in PyTorch's `[Cin, Cout, K, K]` layout and `cols` a scratch of at
/// least [`ConvTranspose2d::cols_len`] elements. Overwrites `out`.
pub fn conv_transpose2d(
    x: &[f32],
    weight: &[f32],
    shape: ConvTranspose2d,
    batch: usize,
    out: &mut [f32],
    cols: &mut [f32],
) {
    let ok = shape.is_valid()
        && x.len() >= batch * shape.in_len()
        && weight.len() >= shape.weight_len()
        && out.len() >= batch * shape.out_len()
        && cols.len() >= shape.cols_len();
    debug_assert!(ok, "conv_transpose2d: bad shape or short operand");
    if !ok || batch == 0 {
        return;
    }
    let hw = shape.in_h * shape.in_w;
    let kk = shape.kernel * shape.kernel;
    let m = shape.out_channels * kk;
    let k = shape.in_channels;
    let cols = &mut cols[..shape.cols_len()];
    for b in 0..batch {
        let xb = &x[b * shape.in_len()..(b + 1) * shape.in_len()];
        // SAFETY: lengths checked above. lhs(j, ci) = weight[ci·m + j] (Wᵀ through
        // strides), rhs(ci, i) = xb[ci·hw + i], dst(j, i) = cols[j·hw + i].
        unsafe {
            gemm::gemm(
                m,
                hw,
                k,
                cols.as_mut_ptr(),
                1,
                hw as isize,
                false,
                weight.as_ptr(),
                m as isize,
                1,
                xb.as_ptr(),
                1,
                hw as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm_parallelism(m * hw * k),
            );
        }
        let ob = &mut out[b * shape.out_len()..(b + 1) * shape.out_len()];
        col2im(cols, shape, ob);
    }
}

/// Adds each output channel's `K·K` column rows into its plane of `out`.
fn col2im(cols: &[f32], shape: ConvTranspose2d, out: &mut [f32]) {
    let (ho, wo) = (shape.out_h(), shape.out_w());
    let plane = ho * wo;
    let per_channel = shape.kernel * shape.kernel * shape.in_h * shape.in_w;
    let scatter = |(co, dst): (usize, &mut [f32])| {
        dst.fill(0.0);
        let src = &cols[co * per_channel..(co + 1) * per_channel];
        scatter_channel(src, shape, dst);
    };
    if out.len() >= PAR_MIN && shape.out_channels > 1 {
        out.par_chunks_exact_mut(plane)
            .enumerate()
            .for_each(scatter);
    } else {
        out.chunks_exact_mut(plane).enumerate().for_each(scatter);
    }
}

/// One channel: `dst[iy·s + ky - p, ix·s + kx - p] += src[ky, kx, iy, ix]`.
fn scatter_channel(src: &[f32], shape: ConvTranspose2d, dst: &mut [f32]) {
    let (h, w, s, p, kn) = (
        shape.in_h,
        shape.in_w,
        shape.stride,
        shape.padding,
        shape.kernel,
    );
    let (ho, wo) = (shape.out_h(), shape.out_w());
    for ky in 0..kn {
        for kx in 0..kn {
            let row = &src[(ky * kn + kx) * h * w..(ky * kn + kx + 1) * h * w];
            // Input columns whose output column lands inside [0, wo).
            let ix_lo = (p.saturating_sub(kx)).div_ceil(s);
            let ix_hi = ((wo + p).saturating_sub(kx)).div_ceil(s).min(w);
            if ix_lo >= ix_hi {
                continue;
            }
            for iy in 0..h {
                let oy = iy * s + ky;
                if oy < p || oy - p >= ho {
                    continue;
                }
                let drow = &mut dst[(oy - p) * wo..(oy - p + 1) * wo];
                let srow = &row[iy * w..(iy + 1) * w];
                let ox0 = ix_lo * s + kx - p;
                if s == 1 {
                    let n = ix_hi - ix_lo;
                    for (d, v) in drow[ox0..ox0 + n].iter_mut().zip(&srow[ix_lo..ix_hi]) {
                        *d += *v;
                    }
                } else {
                    for (i, v) in srow[ix_lo..ix_hi].iter().enumerate() {
                        drow[ox0 + i * s] += *v;
                    }
                }
            }
        }
    }
}

/// `nn.BatchNorm2d` in inference mode: per channel `c`,
/// `y = (x - mean[c]) / sqrt(var[c] + eps) · weight[c] + bias[c]`, folded to
/// `y = x·a[c] + b[c]` as PyTorch's CPU kernel does.
#[derive(Clone, Copy, Debug)]
pub struct BatchNorm<'a> {
    /// γ, one per channel (its length is the channel count).
    pub weight: &'a [f32],
    /// β.
    pub bias: &'a [f32],
    /// Running mean.
    pub running_mean: &'a [f32],
    /// Running variance.
    pub running_var: &'a [f32],
    /// ε (PyTorch's default is 1e-5).
    pub eps: f32,
}

/// Batch norm in place over `x[b, C, spatial]` (any batch; `C = bn.weight.len()`).
pub fn batch_norm(x: &mut [f32], spatial: usize, bn: BatchNorm<'_>) {
    let c = bn.weight.len();
    let ok = c > 0
        && spatial > 0
        && bn.bias.len() == c
        && bn.running_mean.len() == c
        && bn.running_var.len() == c
        && x.len().is_multiple_of(c * spatial);
    debug_assert!(ok, "batch_norm: bad shape");
    if !ok {
        return;
    }
    let apply = |(r, row): (usize, &mut [f32])| {
        let ch = r % c;
        let a = bn.weight[ch] / (bn.running_var[ch] + bn.eps).sqrt();
        let b = bn.bias[ch] - bn.running_mean[ch] * a;
        row.iter_mut().for_each(|v| *v = *v * a + b);
    };
    if x.len() >= PAR_MIN {
        x.par_chunks_exact_mut(spatial).enumerate().for_each(apply);
    } else {
        x.chunks_exact_mut(spatial).enumerate().for_each(apply);
    }
}

fn map_inplace(x: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    if x.len() >= PAR_MIN {
        x.par_chunks_mut(4096)
            .for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
    } else {
        x.iter_mut().for_each(|v| *v = f(*v));
    }
}

/// `max(x, 0)` in place.
pub fn relu(x: &mut [f32]) {
    map_inplace(x, |v| if v > 0.0 { v } else { 0.0 });
}

/// `tanh(x)` in place.
pub fn tanh(x: &mut [f32]) {
    map_inplace(x, f32::tanh);
}
