//! 1-D convolutions for audio models: dense `Conv1d` (dilation, symmetric zero
//! padding, stride 1), depthwise `Conv1d` (`groups == channels`) and
//! `ConvTranspose1d` (stride, padding), on channel-major `[C, L]` f32 slices
//! with PyTorch's weight layouts.
//!
//! Key design choices:
//! - A dense convolution is an im2col GEMM over time tiles: each tile of output
//!   columns gathers its `[Cin·K, tile]` columns (zeros where the window leaves
//!   the input) into a cache-sized scratch and multiplies it by the weight,
//!   which PyTorch's `[Cout, Cin, K]` layout already stores as `[Cout, Cin·K]`.
//!   Tiles are spread over rayon workers, each with its own slice of the
//!   caller-owned scratch ([`Conv1d::scratch_len`]); a tile's result does not
//!   depend on which worker ran it, so the output is the same at every thread
//!   count. A 1×1 convolution without padding is one GEMM on the input.
//! - A transposed convolution is split into its `stride` output phases
//!   (polyphase): output `t = q·s + r` only sees taps `j ≡ r + p (mod s)`, so each
//!   phase is a small dense convolution written with output stride `s`. Every
//!   weight tap is one GEMM and no column buffer or scatter is needed.
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in
//!   release builds the kernel returns without writing (it never panics).

use rayon::prelude::*;

use super::linear::SyncPtr;

/// Target size of one im2col tile, in floats (fits a core's L2 with the weight).
const TILE_FLOATS: usize = 1 << 17;

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

    /// Output columns per im2col tile: about 128 Ki floats of columns.
    fn tile(&self, len: usize) -> usize {
        let rows = (self.in_channels * self.kernel).max(1);
        ((TILE_FLOATS / rows) / 16 * 16)
            .clamp(32, 4096)
            .min(self.out_len(len).max(1))
    }

    fn direct(&self) -> bool {
        self.kernel == 1 && self.padding == 0
    }

    /// Scratch [`conv1d`] needs for an input of `len`: one column tile per
    /// worker (`min(threads, tiles)` of them); 0 for an unpadded 1×1.
    pub fn scratch_len(&self, len: usize) -> usize {
        if self.direct() {
            return 0;
        }
        let tile = self.tile(len);
        let tiles = self.out_len(len).div_ceil(tile);
        let workers = rayon::current_num_threads().clamp(1, tiles.max(1));
        workers * self.in_channels * self.kernel * tile
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
    if shape.direct() {
        // lo == len: out[Cout, len] = W[Cout, Cin] · x[Cin, len].
        super::sgemm_nn_par(cout, lo, cin, weight, cin, x, len, out, lo);
        add_bias(out, bias, cout, lo);
        return;
    }
    let tile = shape.tile(len);
    let rows = cin * k;
    let tiles = lo.div_ceil(tile);
    let workers = (scratch.len() / (rows * tile)).clamp(1, tiles);
    let dst = SyncPtr(out.as_mut_ptr());
    let work = |(w, cols): (usize, &mut [f32])| {
        for ti in (w..tiles).step_by(workers) {
            let t0 = ti * tile;
            let n = tile.min(lo - t0);
            // cols[(ci·K + tap)·tile + j] = x[ci, t0 + j + tap·d − p] (0 outside).
            for ci in 0..cin {
                let xs = &x[ci * len..(ci + 1) * len];
                for tap in 0..k {
                    let row = &mut cols[(ci * k + tap) * tile..][..n];
                    let start = (t0 + tap * shape.dilation) as isize - shape.padding as isize;
                    let j0 = (-start).clamp(0, n as isize) as usize;
                    let j1 = (len as isize - start).clamp(j0 as isize, n as isize) as usize;
                    row[..j0].fill(0.0);
                    if j1 > j0 {
                        let s0 = (start + j0 as isize) as usize;
                        row[j0..j1].copy_from_slice(&xs[s0..s0 + (j1 - j0)]);
                    }
                    row[j1..].fill(0.0);
                }
            }
            // SAFETY: lengths checked above; this tile writes only columns
            // t0..t0+n of every row of out, disjoint from every other tile.
            unsafe {
                let o = dst.ptr().add(t0);
                super::sgemm::sgemm_nn_raw(cout, n, rows, weight, rows, cols, tile, o, lo);
                if let Some(b) = bias {
                    for (co, bv) in b.iter().enumerate().take(cout) {
                        let r = std::slice::from_raw_parts_mut(o.add(co * lo), n);
                        r.iter_mut().for_each(|v| *v += bv);
                    }
                }
            }
        }
    };
    let chunks = scratch[..workers * rows * tile]
        .chunks_exact_mut(rows * tile)
        .enumerate();
    if workers > 1 {
        chunks.par_bridge().for_each(work);
    } else {
        chunks.for_each(work);
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
