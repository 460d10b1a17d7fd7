//! `ConvTranspose1d` (stride, padding, one group) on channel-major `[C, L]` f32
//! slices with PyTorch's `[Cin, Cout, K]` weight layout, optionally on
//! `leaky_relu(x)` (fused into the column gather).
//!
//! Key design choice: polyphase. Output `t = q·s + r` only sees the taps
//! `j ≡ r + p (mod s)`, so phase `r` is a small dense convolution: with
//! `c = ⌊(r + p)/s⌋` and taps `j = j₀ + m·s`, `out[co, q·s + r] =
//! Σ_{m, ci} w[ci, co, j] · x[ci, q + c − m]`. The weight is repacked once per
//! call into per-phase `[Cout, taps·Cin]` matrices; then output tiles of `q`
//! gather per-phase columns and run one [`super::sgemm_nn`] per phase into a
//! contiguous staging tile that is interleaved into `out`. No zero-stuffing,
//! no scatter-add; tiles are independent, so the result does not depend on
//! the thread count.

use rayon::prelude::*;

use super::conv1d::{TILE_FLOATS, copy_act};
use super::linear::SyncPtr;

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

    fn max_taps(&self) -> usize {
        self.kernel.div_ceil(self.stride.max(1))
    }

    /// Columns `q` per tile.
    fn tile(&self, len: usize) -> usize {
        let rows = (self.in_channels * self.max_taps()).max(1);
        let nq = self.out_len(len).div_ceil(self.stride.max(1)).max(1);
        ((TILE_FLOATS / rows) / 16 * 16).clamp(32, 4096).min(nq)
    }

    fn worker_len(&self, len: usize) -> usize {
        let tile = self.tile(len);
        (self.in_channels * self.max_taps() + self.out_channels) * tile
    }

    /// Scratch [`conv_transpose1d`] needs for an input of `len`: the repacked
    /// weight plus, per worker, a column tile and a staging tile.
    pub fn scratch_len(&self, len: usize) -> usize {
        let tiles = self
            .out_len(len)
            .div_ceil(self.stride.max(1))
            .div_ceil(self.tile(len));
        let workers = rayon::current_num_threads().clamp(1, tiles.max(1));
        self.weight_len() + workers * self.worker_len(len)
    }

    fn is_valid(&self) -> bool {
        self.in_channels > 0 && self.out_channels > 0 && self.kernel > 0 && self.stride > 0
    }
}

/// Phase `r`'s first tap, input offset and tap count.
fn phase(s: ConvTranspose1d, r: usize) -> (usize, usize, usize) {
    let j0 = (r + s.padding) % s.stride;
    let c = (r + s.padding) / s.stride;
    let taps = if j0 < s.kernel {
        (s.kernel - j0).div_ceil(s.stride)
    } else {
        0
    };
    (j0, c, taps)
}

/// `out[Cout, Lo] = ConvTranspose1d(act(x[Cin, len])) (+ bias)`, where `act` is
/// `leaky_relu(·, slope)` when `input_slope` is given, with `weight` in
/// PyTorch's `[Cin, Cout, K]` layout and `scratch` of at least
/// [`ConvTranspose1d::scratch_len`]. Overwrites `out`.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d(
    x: &[f32],
    len: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    shape: ConvTranspose1d,
    out: &mut [f32],
    scratch: &mut [f32],
    input_slope: Option<f32>,
) {
    let lo = shape.out_len(len);
    let (cin, cout, k, s) = (
        shape.in_channels,
        shape.out_channels,
        shape.kernel,
        shape.stride,
    );
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && scratch.len() >= shape.weight_len() + shape.worker_len(len)
        && bias.is_none_or(|b| b.len() >= cout);
    debug_assert!(ok, "conv_transpose1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let (packed, rest) = scratch.split_at_mut(shape.weight_len());
    // Per-phase A_r[co, m·Cin + ci] = w[ci, co, j0 + m·s], phases back to back.
    let mut offsets = Vec::with_capacity(s);
    let mut off = 0;
    for r in 0..s {
        let (j0, _, taps) = phase(shape, r);
        offsets.push(off);
        for co in 0..cout {
            for m in 0..taps {
                for ci in 0..cin {
                    packed[off + co * taps * cin + m * cin + ci] =
                        weight[ci * cout * k + co * k + j0 + m * s];
                }
            }
        }
        off += cout * taps * cin;
    }
    let packed = &packed[..];
    let tile = shape.tile(len);
    let nq_max = lo.div_ceil(s);
    let tiles = nq_max.div_ceil(tile);
    let wl = shape.worker_len(len);
    let workers = (rest.len() / wl).clamp(1, tiles);
    let dst = SyncPtr(out.as_mut_ptr());
    let work = |(w, buf): (usize, &mut [f32])| {
        let (cols, stage) = buf.split_at_mut(cin * shape.max_taps() * tile);
        for ti in (w..tiles).step_by(workers) {
            let q0 = ti * tile;
            for (r, &po) in offsets.iter().enumerate().take(s.min(lo)) {
                let (_, c, taps) = phase(shape, r);
                let nq = (lo - r).div_ceil(s);
                if q0 >= nq {
                    continue;
                }
                let n = tile.min(nq - q0);
                if taps > 0 {
                    // cols[(m·Cin + ci)·tile + jj] = act(x[ci, q0 + jj + c − m]).
                    for m in 0..taps {
                        let start = (q0 + c) as isize - m as isize;
                        let j0 = (-start).clamp(0, n as isize) as usize;
                        let j1 = (len as isize - start).clamp(j0 as isize, n as isize) as usize;
                        for ci in 0..cin {
                            let row = &mut cols[(m * cin + ci) * tile..][..n];
                            row[..j0].fill(0.0);
                            if j1 > j0 {
                                let s0 = (start + j0 as isize) as usize;
                                let xs = &x[ci * len + s0..ci * len + s0 + (j1 - j0)];
                                copy_act(&mut row[j0..j1], xs, input_slope);
                            }
                            row[j1..].fill(0.0);
                        }
                    }
                    let a = &packed[po..po + cout * taps * cin];
                    super::sgemm_nn(cout, n, taps * cin, a, taps * cin, cols, tile, stage, tile);
                } else {
                    stage[..cout * tile].fill(0.0);
                }
                for co in 0..cout {
                    let b = bias.map_or(0.0, |b| b[co]);
                    let src = &stage[co * tile..co * tile + n];
                    for (jj, v) in src.iter().enumerate() {
                        // SAFETY: lengths checked above; (q0 + jj)·s + r < lo, and
                        // output positions of this q-tile belong to no other tile.
                        unsafe { *dst.ptr().add(co * lo + (q0 + jj) * s + r) = v + b };
                    }
                }
            }
        }
    };
    let chunks = rest[..workers * wl].chunks_exact_mut(wl).enumerate();
    if workers > 1 {
        chunks.par_bridge().for_each(work);
    } else {
        chunks.for_each(work);
    }
}
