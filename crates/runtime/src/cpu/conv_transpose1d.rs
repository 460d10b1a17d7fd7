//! `ConvTranspose1d` (stride, padding, one group) on channel-major `[C, L]` f32
//! slices with PyTorch's `[Cin, Cout, K]` weight layout, optionally on
//! `leaky_relu(x)` (fused into the column gather).
//!
//! Key design choice: polyphase. Output `t = q·s + r` only sees the taps
//! `j ≡ r + p (mod s)`, so phase `r` is a small dense convolution: with
//! `c = ⌊(r + p)/s⌋` and taps `j = j₀ + m·s`, `out[co, q·s + r] =
//! Σ_{m, ci} w[ci, co, j] · x[ci, q + c − m]`. Per call, the weight is
//! repacked into per-phase `[Cout, taps·Cin]` matrices and the input copied
//! once, zero-padded (and activated), into the scratch; each output tile of
//! `q` then runs one row-offset GEMM per phase (row `(m, ci)` = the padded
//! input at `ci·Lp + pl + c − m`) into a contiguous staging tile that is
//! interleaved into `out`. No zero-stuffing, no column copies, no scatter-add;
//! tiles are independent, so the result does not depend on the thread count.

use rayon::prelude::*;

use super::conv1d::pad_act;
use super::linear::SyncPtr;

/// Output columns `q` per tile (a multiple of the GEMM's micro-tile width).
const TILE: usize = 4 * super::sgemm::NR;

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
        let lo = self.out_len(len);
        let (mut pl, mut pr) = (0usize, 0usize);
        for r in 0..self.stride.min(lo) {
            let (_, c, taps) = phase(*self, r);
            if taps == 0 {
                continue;
            }
            let nq = (lo - r).div_ceil(self.stride);
            pl = pl.max((taps - 1).saturating_sub(c));
            pr = pr.max((nq - 1 + c).saturating_sub(len - 1));
        }
        (pl, pr)
    }

    fn tiles(&self, len: usize) -> usize {
        self.out_len(len)
            .div_ceil(self.stride.max(1))
            .div_ceil(TILE)
    }

    /// Scratch [`conv_transpose1d`] needs for an input of `len`: the repacked
    /// weight, the padded input and a staging tile per worker.
    pub fn scratch_len(&self, len: usize) -> usize {
        let (pl, pr) = self.pads(len);
        let workers = rayon::current_num_threads().clamp(1, self.tiles(len).max(1));
        self.weight_len() + self.in_channels * (pl + len + pr) + workers * self.out_channels * TILE
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
    let (pl, pr) = shape.pads(len);
    let lp = pl + len + pr;
    let fixed = shape.weight_len() + cin * lp;
    let ok = shape.is_valid()
        && x.len() >= cin * len
        && weight.len() >= shape.weight_len()
        && out.len() >= cout * lo
        && scratch.len() >= fixed + cout * TILE
        && bias.is_none_or(|b| b.len() >= cout);
    debug_assert!(ok, "conv_transpose1d: bad shape or short operand");
    if !ok || lo == 0 {
        return;
    }
    let (packed, rest) = scratch.split_at_mut(shape.weight_len());
    let (xp, stages) = rest.split_at_mut(cin * lp);
    pad_act(x, cin, len, pl, pr, input_slope, xp);
    let xp = &xp[..];
    // Per-phase A_r[co, m·Cin + ci] = w[ci, co, j0 + m·s], phases back to back,
    // with the row offsets of their column matrices.
    let mut phases = Vec::with_capacity(s);
    let mut off = 0;
    for r in 0..s.min(lo) {
        let (j0, c, taps) = phase(shape, r);
        // One row of A_r per output channel, repacked on the workers (a
        // strided gather of the whole weight, once per call).
        let pack_row = |(co, row): (usize, &mut [f32])| {
            for m in 0..taps {
                for ci in 0..cin {
                    row[m * cin + ci] = weight[ci * cout * k + co * k + j0 + m * s];
                }
            }
        };
        if taps > 0 {
            let block = &mut packed[off..off + cout * taps * cin];
            if cout * taps * cin >= 1 << 15 {
                block
                    .par_chunks_exact_mut(taps * cin)
                    .enumerate()
                    .for_each(pack_row);
            } else {
                block
                    .chunks_exact_mut(taps * cin)
                    .enumerate()
                    .for_each(pack_row);
            }
        }
        // Row (m, ci) reads x[ci, q + c − m] at padded column pl + c − m + q ≥ 0.
        let offs: Vec<usize> = (0..taps)
            .flat_map(|m| (0..cin).map(move |ci| ci * lp + pl + c - m))
            .collect();
        phases.push((off, taps, offs));
        off += cout * taps * cin;
    }
    let packed = &packed[..];
    let tiles = shape.tiles(len);
    let workers = (stages.len() / (cout * TILE)).clamp(1, tiles);
    let dst = SyncPtr(out.as_mut_ptr());
    let work = |(w, stage): (usize, &mut [f32])| {
        for ti in (w..tiles).step_by(workers) {
            let q0 = ti * TILE;
            for (r, (po, taps, offs)) in phases.iter().enumerate() {
                let nq = (lo - r).div_ceil(s);
                if q0 >= nq {
                    continue;
                }
                let n = TILE.min(nq - q0);
                if *taps > 0 {
                    let a = &packed[*po..*po + cout * taps * cin];
                    // SAFETY: row (m, ci) reads xp[ci·lp + pl + c − m + q0 + jj]
                    // for jj < n, inside the padding computed by `pads`; stage
                    // holds cout·TILE elements.
                    unsafe {
                        super::sgemm::sgemm_rows_raw(
                            cout,
                            n,
                            taps * cin,
                            a,
                            taps * cin,
                            xp.as_ptr().add(q0),
                            offs,
                            stage.as_mut_ptr(),
                            TILE,
                            std::ptr::null(),
                            std::ptr::null(),
                        );
                    }
                } else {
                    stage[..cout * TILE].fill(0.0);
                }
                for co in 0..cout {
                    let b = bias.map_or(0.0, |b| b[co]);
                    let src = &stage[co * TILE..co * TILE + n];
                    for (jj, v) in src.iter().enumerate() {
                        // SAFETY: lengths checked above; (q0 + jj)·s + r < lo, and
                        // output positions of this q-tile belong to no other tile.
                        unsafe { *dst.ptr().add(co * lo + (q0 + jj) * s + r) = v + b };
                    }
                }
            }
        }
    };
    let chunks = stages[..workers * cout * TILE]
        .chunks_exact_mut(cout * TILE)
        .enumerate();
    if workers > 1 {
        chunks.par_bridge().for_each(work);
    } else {
        chunks.for_each(work);
    }
}
