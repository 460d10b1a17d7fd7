//! One HiFi-GAN stage's multi-receptive-field residual blocks (type 2: each
//! block is a chain `y ← y + conv(leaky_relu(y))`), summed over the blocks,
//! computed over time chunks.
//!
//! Key design choice: cache blocking along time. The late stages are long and
//! narrow (`[32, 77 312]`: 10 MB per tensor), so convolution by convolution
//! every pass streams memory. Instead each chunk of output columns gathers its
//! input window with a halo (the sum of the chain's paddings) once, runs every
//! convolution of every block "valid" (unpadded) inside the window while it
//! sits in the core's cache, and writes only the block sum, straight into its
//! own columns of the result. Chunks are independent, so rayon runs them in
//! parallel with no barrier per convolution, and the result does not depend
//! on the thread count. Columns
//! outside `[0, len)` are zeroed after each convolution, which is what the
//! whole-tensor zero padding of each convolution means.

use rayon::prelude::*;

use crate::error::VitsError;
use crate::weights::{Conv, Workspace};

/// Floats of one chunk tensor `[C, cols]` (256 KiB: a few of them fit in L2).
const CHUNK_FLOATS: usize = 1 << 16;

/// Output columns per chunk for `channels` channels and `len` columns: about
/// [`CHUNK_FLOATS`] per chunk tensor, but at least 8 chunks when `len` allows
/// (a function of the shape only, so the split never depends on the thread
/// count — nor do the bits, since every column is computed the same way).
pub fn chunk_cols(channels: usize, len: usize) -> usize {
    (CHUNK_FLOATS / channels.max(1))
        .min(len.div_ceil(8))
        .max(64)
}

/// `acc`'s base pointer, shared by the chunk tasks.
#[derive(Clone, Copy)]
struct AccPtr(*mut f32);
// SAFETY: each task writes only its own columns [t0, t1) of every row.
unsafe impl Send for AccPtr {}
// SAFETY: as above.
unsafe impl Sync for AccPtr {}

impl AccPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `acc[C, len] = Σ_b block_b(x)` for `x = up[C, len]`, where each block is a
/// chain of residual convolutions on `leaky_relu(·, slope)`.
pub fn run_blocks(
    ws: &Workspace,
    blocks: &[Vec<Conv>],
    up: &[f32],
    channels: usize,
    len: usize,
    slope: f32,
    acc: &mut [f32],
) -> Result<(), VitsError> {
    if acc.len() < channels * len || up.len() < channels * len {
        return Err(VitsError::Graph {
            path: Default::default(),
            what: "dec".into(),
            reason: "short stage buffer".into(),
        });
    }
    let cols = chunk_cols(channels, len).min(len.max(1));
    let chunks = len.div_ceil(cols);
    let dst = AccPtr(acc.as_mut_ptr());
    (0..chunks).into_par_iter().try_for_each(|i| {
        let t0 = i * cols;
        let t1 = (t0 + cols).min(len);
        chunk(
            ws,
            blocks,
            up,
            channels,
            len,
            t0,
            t1,
            slope,
            |b, ch, row| {
                // SAFETY: acc holds channels·len floats (checked above); this
                // task alone writes columns [t0, t1) of row ch.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(dst.get().add(ch * len + t0), t1 - t0)
                };
                if b == 0 {
                    out.copy_from_slice(row);
                } else {
                    out.iter_mut().zip(row).for_each(|(a, v)| *a += v);
                }
            },
        )
    })
}

/// The blocks over output columns `[t0, t1)`: block `b`'s result, row `ch`,
/// goes to `emit(b, ch, row)`.
#[allow(clippy::too_many_arguments)]
fn chunk(
    ws: &Workspace,
    blocks: &[Vec<Conv>],
    up: &[f32],
    channels: usize,
    len: usize,
    t0: usize,
    t1: usize,
    slope: f32,
    emit: impl Fn(usize, usize, &[f32]),
) -> Result<(), VitsError> {
    let w = t1 - t0;
    for (b, convs) in blocks.iter().enumerate() {
        let halo: usize = convs.iter().map(Conv::padding).sum();
        // y = up over global columns [t0 − halo, t1 + halo), zeros outside [0, len).
        let mut start = t0 as isize - halo as isize;
        let mut width = w + 2 * halo;
        let mut y = ws.buf(channels * width)?;
        gather(up, channels, len, start, width, &mut y);
        let mut out = ws.buf(channels * width)?;
        for conv in convs {
            let h = conv.padding();
            let ow = width - 2 * h;
            conv.run_valid(ws, &y, width, &mut out[..channels * ow], Some(slope))?;
            // out += y cropped by the halo (the residual), then zero what
            // lies outside the sequence.
            let ostart = start + h as isize;
            let lo = (-ostart).clamp(0, ow as isize) as usize;
            let hi = (len as isize - ostart).clamp(0, ow as isize) as usize;
            for ch in 0..channels {
                let o = &mut out[ch * ow..(ch + 1) * ow];
                let r = &y[ch * width + h..ch * width + h + ow];
                o.iter_mut().zip(r).for_each(|(a, b)| *a += b);
                o[..lo].fill(0.0);
                o[hi.max(lo)..].fill(0.0);
            }
            std::mem::swap(&mut y, &mut out);
            start = ostart;
            width = ow;
        }
        // y is now [C, w] over [t0, t1).
        for ch in 0..channels {
            emit(b, ch, &y[ch * w..(ch + 1) * w]);
        }
    }
    Ok(())
}

/// `dst[C, width] = src[C, len]` over global columns `[start, start + width)`,
/// zero where a column lies outside `[0, len)`.
fn gather(src: &[f32], channels: usize, len: usize, start: isize, width: usize, dst: &mut [f32]) {
    let lo = (-start).clamp(0, width as isize) as usize;
    let hi = (len as isize - start).clamp(0, width as isize) as usize;
    for ch in 0..channels {
        let d = &mut dst[ch * width..(ch + 1) * width];
        d[..lo].fill(0.0);
        if hi > lo {
            let s0 = (start + lo as isize) as usize + ch * len;
            d[lo..hi].copy_from_slice(&src[s0..s0 + (hi - lo)]);
        }
        d[hi.max(lo)..].fill(0.0);
    }
}
