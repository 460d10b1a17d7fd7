//! 1-D convolutions for audio models: dense `Conv1d` (dilation, symmetric zero
//! padding, stride 1) and depthwise `Conv1d` (`groups == channels`), on
//! channel-major `[C, L]` f32 slices with PyTorch's weight layouts.
//!
//! Key design choices:
//! - A dense convolution is an im2col GEMM over time tiles: each tile of output
//!   columns gathers its `[Cin·K, tile]` columns (zeros where the window leaves
//!   the input) into a cache-sized scratch and multiplies it by the weight,
//!   which PyTorch's `[Cout, Cin, K]` layout already stores as `[Cout, Cin·K]`
//!   ([`super::sgemm_nn`]). Tiles are spread over rayon workers, each with its
//!   own slice of the caller-owned scratch ([`Conv1d::scratch_len`]); a tile's
//!   result does not depend on which worker ran it, so the output is the same
//!   at every thread count. An unfused 1×1 convolution is one GEMM on the input.
//! - Two fusions save whole passes over long activations ([`ConvFuse`]): a leaky
//!   ReLU applied to the input while the columns are gathered, and a residual
//!   the GEMM starts from (`out = residual + conv(x)`).
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in
//!   release builds the kernel returns without writing (it never panics).

use rayon::prelude::*;

use super::linear::SyncPtr;

/// Target size of one im2col tile, in floats (fits a core's L2 with the weight).
pub(crate) const TILE_FLOATS: usize = 1 << 17;

/// Optional work fused into a convolution.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvFuse<'a> {
    /// Apply `leaky_relu(·, slope)` to the input first.
    pub input_slope: Option<f32>,
    /// Add this `[Cout, Lo]` tensor to the output (a residual).
    pub residual: Option<&'a [f32]>,
}

/// Copies `src` into `dst`, through `leaky_relu(·, slope)` when `slope` is given.
#[inline]
pub(crate) fn copy_act(dst: &mut [f32], src: &[f32], slope: Option<f32>) {
    match slope {
        None => dst.copy_from_slice(src),
        Some(s) => dst
            .iter_mut()
            .zip(src)
            .for_each(|(d, v)| *d = if *v < 0.0 { s * v } else { *v }),
    }
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

    /// Output columns per im2col tile: about [`TILE_FLOATS`] floats of columns.
    fn tile(&self, len: usize) -> usize {
        let rows = (self.in_channels * self.kernel).max(1);
        ((TILE_FLOATS / rows) / 16 * 16)
            .clamp(32, 4096)
            .min(self.out_len(len).max(1))
    }

    fn direct(&self) -> bool {
        self.kernel == 1 && self.padding == 0
    }

    /// Scratch [`conv1d`] / [`conv1d_fused`] need for an input of `len`: one
    /// column tile per worker (`min(threads, tiles)` of them).
    pub fn scratch_len(&self, len: usize) -> usize {
        let tile = self.tile(len);
        let tiles = self.out_len(len).div_ceil(tile);
        let workers = rayon::current_num_threads().clamp(1, tiles.max(1));
        workers * self.in_channels * self.kernel * tile
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
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && bias.is_none_or(|b| b.len() >= cout)
        && fuse.residual.is_none_or(|r| r.len() >= cout * lo)
        && (scratch.len() >= cin * k * shape.tile(len)
            || (shape.direct() && fuse.input_slope.is_none()));
    debug_assert!(ok, "conv1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    if shape.direct() && fuse.input_slope.is_none() {
        // lo == len: out[Cout, len] = residual + W[Cout, Cin] · x[Cin, len].
        super::sgemm::sgemm_nn_par_init(cout, lo, cin, weight, cin, x, len, out, lo, fuse.residual);
        add_bias(out, bias, cout, lo);
        return;
    }
    let tile = shape.tile(len);
    let rows = cin * k;
    let tiles = lo.div_ceil(tile);
    let workers = (scratch.len() / (rows * tile)).clamp(1, tiles);
    let dst = SyncPtr(out.as_mut_ptr());
    let res = SyncPtr(
        fuse.residual
            .map_or(std::ptr::null_mut(), |r| r.as_ptr() as *mut f32),
    );
    let slope = fuse.input_slope;
    let work = |(w, cols): (usize, &mut [f32])| {
        for ti in (w..tiles).step_by(workers) {
            let t0 = ti * tile;
            let n = tile.min(lo - t0);
            // cols[(ci·K + tap)·tile + j] = act(x[ci, t0 + j + tap·d − p]) (0 outside).
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
                        copy_act(&mut row[j0..j1], &xs[s0..s0 + (j1 - j0)], slope);
                    }
                    row[j1..].fill(0.0);
                }
            }
            // SAFETY: lengths checked above; this tile writes only columns
            // t0..t0+n of every row of out, disjoint from every other tile, and
            // reads the same columns of the residual.
            unsafe {
                let o = dst.ptr().add(t0);
                let init = if res.ptr().is_null() {
                    std::ptr::null()
                } else {
                    res.ptr().add(t0) as *const f32
                };
                super::sgemm::sgemm_nn_raw(cout, n, rows, weight, rows, cols, tile, o, lo, init);
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

pub(crate) fn add_bias(out: &mut [f32], bias: Option<&[f32]>, channels: usize, len: usize) {
    if let Some(b) = bias {
        for (row, bv) in out[..channels * len].chunks_exact_mut(len).zip(b) {
            row.iter_mut().for_each(|v| *v += bv);
        }
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
