//! The batched MX GEMV (`kernels/gemv_batch.cu`): y_b = W·x_b (or y_b += W·x_b) for up
//! to [`GEMV_BATCH_MAX`] prepared vectors in one launch.
//!
//! Key design choice: the weights are streamed and decoded once for the batch; each
//! decoded fragment feeds one mma pair per vector, with the batch-1 kernel's fragments,
//! block order and f32 scale-and-add, so vector b's rows are what [`GemvMma::gemv`]
//! gives for x_b up to the order of the final sum over the block's warps (the batch
//! kernel runs at most 8 warps per block). Each vector keeps its own buffers (an
//! [`XPrep`] in, a row vector out), so one sequence's step buffers serve both the
//! batch-1 step and the batched one.

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};
use favlo_mx::ElementFormat;

use super::context::DeviceBuffer;
use super::gemv::{BATCH_WARPS, GemvMma, XPrep, int, shape, warps_per_block};
use super::gemv_tile::{MxTiled, TILE_ROWS, scale_tile_bytes};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};

/// Most vectors one batched GEMV launch takes (`GEMV_BATCH_MAX` in gemv_batch.cu).
pub const GEMV_BATCH_MAX: usize = 4;

/// `GemvBatchIo` as the kernels take it: per vector its x planes and its rows.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct BatchIoRaw {
    xhl: [u64; GEMV_BATCH_MAX],
    xs: [u64; GEMV_BATCH_MAX],
    y: [u64; GEMV_BATCH_MAX],
    accumulate: i32,
    pad: i32,
}

/// Warps per block of a batched launch over `tiles` row tiles of `chunks` chunks, for a
/// kernel of which `fit8` blocks of 8 warps fit one multiprocessor. Where two fit (16
/// warps per SM), the batch-1 rule ([`warps_per_block`]). Where one fits (the FP4
/// kernels and the FP8 3- and 4-vector ones, 170–186 registers): blocks of 8 warps
/// when the tiles fit one wave of them, else blocks of 4, two per multiprocessor, so
/// one block's reduction and tail overlap the other's stream. H200 sweep of 1–8 warps
/// over six shapes (docs/CUDA.md): the best or within 3% of it on every shape but
/// one, where the batch-1 rule picked 2 or 8 warps and was up to 22% slower.
pub(super) fn batch_warps(tiles: usize, chunks: usize, sms: usize, fit8: usize) -> usize {
    let w = if fit8 >= 2 {
        warps_per_block(tiles, chunks, sms)
    } else if tiles <= sms {
        BATCH_WARPS
    } else {
        4
    };
    w.min(chunks.max(1)).clamp(1, BATCH_WARPS)
}

impl GemvMma {
    /// y_b = W·x_b for every b (`accumulate`: y_b += W·x_b), W an MXFP4 or MXFP8
    /// matrix, each x_b prepared over the layout's padded columns. One vector runs the
    /// batch-1 kernel ([`Self::gemv`]); 2..=[`GEMV_BATCH_MAX`] run one batched launch.
    pub fn gemv_batch(
        &self,
        w: &MxTiled,
        xs: &[&XPrep],
        ys: &mut [&mut DeviceBuffer<f32>],
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let op = "gemv_batch";
        let l = w.layout;
        let n = xs.len();
        if n != ys.len() || n == 0 || n > GEMV_BATCH_MAX {
            return Err(shape(
                op,
                format!(
                    "{n} inputs and {} outputs (1..={GEMV_BATCH_MAX} pairs)",
                    ys.len()
                ),
            ));
        }
        if n == 1 {
            return self.gemv(w, xs[0], &mut *ys[0], accumulate);
        }
        let fi = match l.format {
            ElementFormat::Fp4E2M1 => 0,
            ElementFormat::Fp8E4M3 => 1,
            ElementFormat::Fp8E5M2 => {
                return Err(shape(op, "E5M2 has no tensor-core GEMV yet".into()));
            }
        };
        let tiles = l.rows.div_ceil(TILE_ROWS);
        let chunks = l.data_row_bytes() / 128;
        let bad_io =
            xs.iter().any(|x| x.cols() < l.padded_cols()) || ys.iter().any(|y| y.len() < l.rows);
        if w.data.len() != tiles * chunks * 4096
            || w.scales.len() != tiles * chunks * scale_tile_bytes(l.format)
            || !l.data_row_bytes().is_multiple_of(128)
            || bad_io
        {
            return Err(shape(
                op,
                format!(
                    "W {}+{} bytes for {tiles}x{chunks} tiles; x preps of {:?} values (need {}); y of {:?} (need {})",
                    w.data.len(),
                    w.scales.len(),
                    xs.iter().map(|x| x.cols()).collect::<Vec<_>>(),
                    l.padded_cols(),
                    ys.iter().map(|y| y.len()).collect::<Vec<_>>(),
                    l.rows
                ),
            ));
        }
        if l.rows == 0 {
            return Ok(());
        }
        let warps = self
            .batch_warps
            .unwrap_or_else(|| batch_warps(tiles, chunks, self.sms, self.batch_fit[fi][n - 2]))
            .clamp(1, BATCH_WARPS);
        let rows = int(l.rows, op)?;
        let nch = int(chunks, op)?;
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(tiles).map_err(|_| shape(op, format!("{tiles} tiles")))?,
                1,
                1,
            ),
            block_dim: ((warps * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx().stream();
        let mut guards = Vec::new();
        let mut io = BatchIoRaw {
            accumulate: i32::from(accumulate),
            ..BatchIoRaw::default()
        };
        for (b, x) in xs.iter().enumerate() {
            let (h, g0) = x.hl.slice.device_ptr(s);
            let (f, g1) = x.xs.slice.device_ptr(s);
            io.xhl[b] = h;
            io.xs[b] = f;
            guards.push(g0);
            guards.push(g1);
        }
        let mut out_guards = Vec::new();
        for (b, y) in ys.iter_mut().enumerate() {
            let (p, g) = y.slice.device_ptr_mut(s);
            io.y[b] = p;
            out_guards.push(g);
        }
        let (wd, _g0) = w.data.slice.device_ptr(s);
        let (wsc, _g1) = w.scales.slice.device_ptr(s);
        let mut args = [
            arg_ptr(&wd),
            arg_ptr(&wsc),
            arg_ptr(&io),
            arg_ptr(&rows),
            arg_ptr(&nch),
        ];
        let f = &self.batch[fi][n - 2];
        // SAFETY: the kernel's parameters in order and type; the tile planes hold
        // tiles·chunks tiles, each x_b covers the padded columns and each y_b the rows
        // (checked above), the kernel touches only the first `n` entries of each array;
        // with PDL it waits before it reads x or y.
        unsafe { launch_raw(s, f, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(gemv_batch)"))
    }
}

#[cfg(test)]
mod tests {
    use super::batch_warps;

    /// The H200 sweep's best warps per block (132 SMs, decode and benchmark shapes).
    #[test]
    fn batch_warps_follow_the_sweep() {
        // One 8-warp block per SM (FP4 kernels): 8 warps within one wave, else 4.
        assert_eq!(batch_warps(128, 16, 132, 1), 8); // o
        assert_eq!(batch_warps(128, 48, 132, 1), 8); // down
        assert_eq!(batch_warps(192, 16, 132, 1), 4); // q|k|v
        assert_eq!(batch_warps(768, 16, 132, 1), 4); // gate|up
        assert_eq!(batch_warps(256, 32, 132, 1), 4); // 8192²
        // Two blocks per SM (the FP8 2-vector kernel): the batch-1 rule.
        assert_eq!(batch_warps(192, 16, 132, 2), 8);
        assert_eq!(batch_warps(768, 16, 132, 2), 2);
        // Few chunks cap the warps.
        assert_eq!(batch_warps(100, 2, 132, 1), 2);
    }
}
