//! 1-D convolutions for audio models: dense `Conv1d` (dilation, symmetric zero
//! padding, stride 1), depthwise `Conv1d` (`groups == channels`) and
//! `ConvTranspose1d` (stride, padding), on channel-major `[C, L]` f32 slices
//! with PyTorch's weight layouts.
//!
//! Key design choices:
//! - No im2col. A dense convolution is `K` GEMMs, one per kernel tap, each
//!   reading the zero-padded input through `gemm` strides shifted by the tap's
//!   offset and accumulating into `out`; the only scratch is the padded input
//!   (`Cin·(L + 2p)`), which the caller owns so a pipeline can account it.
//! - A transposed convolution is split into its `stride` output phases
//!   (polyphase): output `t = q·s + r` only sees taps `j ≡ r + p (mod s)`, so each
//!   phase is a small dense convolution written with output stride `s`. Every
//!   weight tap is one GEMM and no column buffer or scatter is needed.
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in
//!   release builds the kernel returns without writing (it never panics).

use rayon::prelude::*;

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

    /// Scratch [`conv1d`] needs for an input of `len`: the padded input.
    pub fn scratch_len(&self, len: usize) -> usize {
        if self.kernel == 1 && self.padding == 0 {
            0
        } else {
            self.in_channels * (len + 2 * self.padding)
        }
    }

    fn is_valid(&self) -> bool {
        self.in_channels > 0 && self.out_channels > 0 && self.kernel > 0 && self.dilation > 0
    }
}

fn parallelism(flops: usize) -> gemm::Parallelism {
    let t = rayon::current_num_threads();
    if flops < (1 << 17) || t <= 1 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(t)
    }
}

/// Copies `x[C, len]` into `dst[C, pl + len + pr]` with zeros on both sides.
fn pad_into(x: &[f32], channels: usize, len: usize, pl: usize, pr: usize, dst: &mut [f32]) {
    let lp = pl + len + pr;
    let fill = |(row, src): (&mut [f32], &[f32])| {
        row[..pl].fill(0.0);
        row[pl..pl + len].copy_from_slice(src);
        row[pl + len..].fill(0.0);
    };
    let rows = dst[..channels * lp].chunks_exact_mut(lp);
    let srcs = x[..channels * len].chunks_exact(len.max(1));
    if channels * lp >= 1 << 16 {
        rows.zip(srcs).par_bridge().for_each(fill);
    } else {
        rows.zip(srcs).for_each(fill);
    }
}

fn add_bias(out: &mut [f32], bias: Option<&[f32]>, channels: usize, len: usize) {
    if let Some(b) = bias {
        for (row, bv) in out[..channels * len].chunks_exact_mut(len).zip(b) {
            row.iter_mut().for_each(|v| *v += bv);
        }
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
    let lo = shape.out_len(len);
    let (cin, cout, k) = (shape.in_channels, shape.out_channels, shape.kernel);
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && scratch.len() >= shape.scratch_len(len)
        && bias.is_none_or(|b| b.len() >= cout);
    debug_assert!(ok, "conv1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let (src, lp): (&[f32], usize) = if shape.scratch_len(len) == 0 {
        (x, len)
    } else {
        let lp = len + 2 * shape.padding;
        pad_into(x, cin, len, shape.padding, shape.padding, scratch);
        (&scratch[..cin * lp], lp)
    };
    let par = parallelism(2 * cout * cin * lo);
    for tap in 0..k {
        let off = tap * shape.dilation;
        // SAFETY: lengths checked above. dst(co, t) = out[co·lo + t];
        // lhs(co, ci) = weight[co·cin·k + ci·k + tap]; rhs(ci, t) = src[ci·lp + off + t]
        // with off + lo − 1 < lp because lo = lp − d·(k − 1).
        unsafe {
            gemm::gemm(
                cout,
                lo,
                cin,
                out.as_mut_ptr(),
                1,
                lo as isize,
                tap > 0,
                weight.as_ptr().add(tap),
                k as isize,
                (cin * k) as isize,
                src.as_ptr().add(off),
                1,
                lp as isize,
                1.0f32,
                1.0f32,
                false,
                false,
                false,
                par,
            );
        }
    }
    add_bias(out, bias, cout, lo);
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

/// Geometry of one `nn.ConvTranspose1d` (one group, no dilation, no output padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose1d {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel taps `K`.
    pub kernel: usize,
    /// Stride `s`.
    pub stride: usize,
    /// Cropped from each end of the full output `p`.
    pub padding: usize,
}

impl ConvTranspose1d {
    /// Output length `(L − 1)·s + K − 2p`.
    pub fn out_len(&self, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        ((len - 1) * self.stride + self.kernel).saturating_sub(2 * self.padding)
    }

    /// Elements of the weight `[Cin, Cout, K]`.
    pub fn weight_len(&self) -> usize {
        self.in_channels * self.out_channels * self.kernel
    }

    /// Zero padding (left, right) the phases read around an input of `len`.
    fn pads(&self, len: usize) -> (usize, usize) {
        let (s, p, k) = (self.stride, self.padding, self.kernel);
        let lo = self.out_len(len);
        let (mut pl, mut pr) = (0usize, 0usize);
        for r in 0..s.min(lo) {
            let c = (r + p) / s;
            let j0 = (r + p) % s;
            if j0 >= k {
                continue;
            }
            let m_max = (k - 1 - j0) / s;
            let nq = (lo - r).div_ceil(s);
            pl = pl.max(m_max.saturating_sub(c));
            pr = pr.max((nq - 1 + c).saturating_sub(len - 1));
        }
        (pl, pr)
    }

    /// Scratch [`conv_transpose1d`] needs for an input of `len`: the padded input.
    pub fn scratch_len(&self, len: usize) -> usize {
        let (pl, pr) = self.pads(len);
        self.in_channels * (pl + len + pr)
    }

    fn is_valid(&self) -> bool {
        self.in_channels > 0 && self.out_channels > 0 && self.kernel > 0 && self.stride > 0
    }
}

/// `out[Cout, Lo] = ConvTranspose1d(x[Cin, len]) (+ bias)` with `weight` in
/// PyTorch's `[Cin, Cout, K]` layout and `scratch` of at least
/// [`ConvTranspose1d::scratch_len`]. Overwrites `out`.
pub fn conv_transpose1d(
    x: &[f32],
    len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: ConvTranspose1d,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let lo = shape.out_len(len);
    let (cin, cout, k, s, p) = (
        shape.in_channels,
        shape.out_channels,
        shape.kernel,
        shape.stride,
        shape.padding,
    );
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && scratch.len() >= shape.scratch_len(len)
        && bias.is_none_or(|b| b.len() >= cout);
    debug_assert!(ok, "conv_transpose1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let (pl, pr) = shape.pads(len);
    let lp = pl + len + pr;
    pad_into(x, cin, len, pl, pr, scratch);
    let xp = &scratch[..cin * lp];
    let par = parallelism(2 * cout * cin * len * k / s.max(1));
    for r in 0..s.min(lo) {
        let c = (r + p) / s;
        let j0 = (r + p) % s;
        let nq = (lo - r).div_ceil(s);
        let mut first = true;
        let mut j = j0;
        let mut m = 0usize;
        while j < k {
            // Output q·s + r reads input q + c − m, at padded column q + c − m + pl ≥ 0.
            let start = c + pl - m;
            // SAFETY: lengths checked above; dst(co, q) = out[co·lo + r + q·s] with
            // r + (nq − 1)·s < lo; lhs(co, ci) = weight[ci·cout·k + co·k + j];
            // rhs(ci, q) = xp[ci·lp + start + q] with start + nq − 1 < lp by `pads`.
            unsafe {
                gemm::gemm(
                    cout,
                    nq,
                    cin,
                    out.as_mut_ptr().add(r),
                    s as isize,
                    lo as isize,
                    !first,
                    weight.as_ptr().add(j),
                    (cout * k) as isize,
                    k as isize,
                    xp.as_ptr().add(start),
                    1,
                    lp as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    par,
                );
            }
            first = false;
            j += s;
            m += 1;
        }
        if first {
            // No tap reaches this phase: its outputs are zero (before the bias).
            for row in out[..cout * lo].chunks_exact_mut(lo) {
                row.iter_mut().skip(r).step_by(s).for_each(|v| *v = 0.0);
            }
        }
    }
    add_bias(out, bias, cout, lo);
}
