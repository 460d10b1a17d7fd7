//! 1-D convolutions for audio models: dense `Conv1d` (dilation, symmetric zero
//! padding, stride 1) and depthwise `Conv1d` (`groups == channels`), on
//! channel-major `[C, L]` f32 slices with PyTorch's weight layouts.
//!
//! Key design choices:
//! - A dense convolution is one GEMM `[Cout, Cin·K] · [Cin·K, Lo]` whose
//!   column matrix is never built: the input is copied once, zero-padded, into
//!   the caller-owned scratch ([`Conv1d::scratch_len`]), and row `(ci, tap)` of
//!   the column matrix is that copy read at offset `ci·Lp + tap·d` (the
//!   row-offset GEMM in `sgemm`). PyTorch's `[Cout, Cin, K]` weight already is
//!   `[Cout, Cin·K]`. Output columns are split over rayon workers in whole
//!   micro-tiles, so the result is the same at every thread count.
//! - Two fusions save whole passes over long activations ([`ConvFuse`]): a leaky
//!   ReLU applied to the input while it is padded, and a residual the GEMM
//!   starts from (`out = residual + conv(x)`).
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in
//!   release builds the kernel returns without writing (it never panics).

use rayon::prelude::*;

/// Optional work fused into a convolution.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvFuse<'a> {
    /// Apply `leaky_relu(·, slope)` to the input first.
    pub input_slope: Option<f32>,
    /// Add this `[Cout, Lo]` tensor to the output (a residual).
    pub residual: Option<&'a [f32]>,
}

/// Copies `src` into `dst`, through `leaky_relu(·, slope)` when `slope` is given
/// (the select loop compiled for AVX-512 or AVX2 when present).
#[inline]
pub(crate) fn copy_act(dst: &mut [f32], src: &[f32], slope: Option<f32>) {
    let Some(s) = slope else {
        dst.copy_from_slice(src);
        return;
    };
    match super::simd::isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx512 => unsafe { lrelu_avx512(dst, src, s) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx2 => unsafe { lrelu_avx2(dst, src, s) },
        _ => lrelu_loop(dst, src, s),
    }
}

#[inline(always)]
fn lrelu_loop(dst: &mut [f32], src: &[f32], s: f32) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, v)| *d = if *v < 0.0 { s * v } else { *v });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn lrelu_avx512(dst: &mut [f32], src: &[f32], s: f32) {
    lrelu_loop(dst, src, s);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn lrelu_avx2(dst: &mut [f32], src: &[f32], s: f32) {
    lrelu_loop(dst, src, s);
}

/// Geometry of one `nn.Conv1d` with stride 1, one group and symmetric padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1d {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel taps `K`.
    pub kernel: usize,
    /// Dilation `d`.
    pub dilation: usize,
    /// Zeros added on each side `p`.
    pub padding: usize,
}

impl Conv1d {
    /// Output length `L + 2p − d·(K − 1)` (0 when negative).
    pub fn out_len(&self, len: usize) -> usize {
        (len + 2 * self.padding).saturating_sub(self.dilation * (self.kernel.max(1) - 1))
    }

    /// Elements of the weight `[Cout, Cin, K]`.
    pub fn weight_len(&self) -> usize {
        self.out_channels * self.in_channels * self.kernel
    }

    fn direct(&self) -> bool {
        self.kernel == 1 && self.padding == 0
    }

    /// Scratch [`conv1d`] / [`conv1d_fused`] need for an input of `len`: the
    /// padded input `Cin·(len + 2p)`.
    pub fn scratch_len(&self, len: usize) -> usize {
        self.in_channels * (len + 2 * self.padding)
    }

    fn is_valid(&self) -> bool {
        self.in_channels > 0 && self.out_channels > 0 && self.kernel > 0 && self.dilation > 0
    }
}

/// `out[Cout, Lo] = Conv1d(x[Cin, len]) (+ bias)` with `weight` in PyTorch's
/// `[Cout, Cin, K]` layout and `scratch` of at least [`Conv1d::scratch_len`].
/// Overwrites `out`.
pub fn conv1d(
    x: &[f32],
    len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: Conv1d,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    conv1d_fused(
        x,
        len,
        weight,
        bias,
        shape,
        out,
        scratch,
        ConvFuse::default(),
    );
}

/// [`conv1d`] with fused work: `out = residual + Conv1d(act(x)) (+ bias)`.
#[allow(clippy::too_many_arguments)]
pub fn conv1d_fused(
    x: &[f32],
    len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: Conv1d,
    out: &mut [f32],
    scratch: &mut [f32],
    fuse: ConvFuse<'_>,
) {
    let lo = shape.out_len(len);
    let (cin, cout, k) = (shape.in_channels, shape.out_channels, shape.kernel);
    let direct = shape.direct() && fuse.input_slope.is_none();
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && bias.is_none_or(|b| b.len() >= cout)
        && fuse.residual.is_none_or(|r| r.len() >= cout * lo)
        && (direct || scratch.len() >= shape.scratch_len(len));
    debug_assert!(ok, "conv1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let (src, lp): (&[f32], usize) = if direct {
        (&x[..cin * len], len)
    } else {
        let lp = len + 2 * shape.padding;
        pad_act(
            x,
            cin,
            len,
            shape.padding,
            shape.padding,
            fuse.input_slope,
            scratch,
        );
        (&scratch[..cin * lp], lp)
    };
    // Row (ci, tap) of the column matrix: the padded input at ci·Lp + tap·d;
    // every read stays below ci·Lp + (K−1)·d + lo ≤ (ci + 1)·Lp.
    let offs: Vec<usize> = (0..cin)
        .flat_map(|ci| (0..k).map(move |tap| ci * lp + tap * shape.dilation))
        .collect();
    let init = fuse.residual.map_or(std::ptr::null(), <[f32]>::as_ptr);
    let bias_p = bias.map_or(std::ptr::null(), <[f32]>::as_ptr);
    // SAFETY: bounds checked above; out and residual hold cout·lo elements.
    unsafe {
        super::sgemm::sgemm_rows_par(
            cout,
            lo,
            cin * k,
            weight,
            cin * k,
            src.as_ptr(),
            &offs,
            out.as_mut_ptr(),
            lo,
            init,
            bias_p,
            true,
        );
    }
}

/// Copies `x[C, len]` into `dst[C, pl + len + pr]` through `leaky_relu(·, slope)`
/// (when given), with zeros on both sides.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pad_act(
    x: &[f32],
    channels: usize,
    len: usize,
    pl: usize,
    pr: usize,
    slope: Option<f32>,
    dst: &mut [f32],
) {
    let lp = pl + len + pr;
    let fill = |(row, src): (&mut [f32], &[f32])| {
        row[..pl].fill(0.0);
        copy_act(&mut row[pl..pl + len], src, slope);
        row[pl + len..].fill(0.0);
    };
    if len == 0 {
        dst[..channels * lp].fill(0.0);
        return;
    }
    let rows = dst[..channels * lp].par_chunks_exact_mut(lp);
    let srcs = x[..channels * len].par_chunks_exact(len);
    if channels * lp >= 1 << 16 {
        rows.zip(srcs).for_each(fill);
    } else {
        dst[..channels * lp]
            .chunks_exact_mut(lp)
            .zip(x[..channels * len].chunks_exact(len))
            .for_each(fill);
    }
}

/// Depthwise `out[C, Lo] = Conv1d(x[C, len], groups = C) (+ bias)` with `weight`
/// `[C, 1, K]`; `shape.in_channels == shape.out_channels == C`. Overwrites `out`.
pub fn conv1d_depthwise(
    x: &[f32],
    len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: Conv1d,
    out: &mut [f32],
) {
    let lo = shape.out_len(len);
    let (c, k, d, p) = (
        shape.out_channels,
        shape.kernel,
        shape.dilation,
        shape.padding,
    );
    let ok = shape.is_valid()
        && shape.in_channels == c
        && x.len() >= c * len
        && weight.len() >= c * k
        && out.len() >= c * lo
        && bias.is_none_or(|b| b.len() >= c);
    debug_assert!(ok, "conv1d_depthwise: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let row = |(ch, o): (usize, &mut [f32])| {
        let xs = &x[ch * len..(ch + 1) * len];
        let w = &weight[ch * k..(ch + 1) * k];
        o.fill(bias.map_or(0.0, |b| b[ch]));
        for (tap, wv) in w.iter().enumerate() {
            // Output t reads input t + tap·d − p when it lies in [0, len).
            let shift = (tap * d) as isize - p as isize;
            let t0 = (-shift).max(0) as usize;
            let t1 = ((len as isize - shift).max(0) as usize).min(lo);
            if t0 >= t1 {
                continue;
            }
            let s0 = (t0 as isize + shift) as usize;
            for (ov, xv) in o[t0..t1].iter_mut().zip(&xs[s0..s0 + (t1 - t0)]) {
                *ov += wv * xv;
            }
        }
    };
    let rows = out[..c * lo].chunks_exact_mut(lo).enumerate();
    if c * lo * k >= 1 << 16 {
        rows.par_bridge().for_each(row);
    } else {
        rows.for_each(row);
    }
}
