//! MXFP4 / MXFP8 GEMV on the tensor cores (`kernels/gemv_mma.cu`).
//!
//! Key design choice: x is prepared once per vector ([`GemvMma::prep_x`]: per 32-value
//! block a power-of-two scale and an f16 hi + lo split, ~22 bits), so every GEMV that
//! reads the same x (q/k/v, gate/up) shares it, and the GEMV itself only decodes the
//! weights to f16 and issues `mma.sync`. The launch picks the warps per block so the
//! grid is about one wave of 16 warps per multiprocessor.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use favlo_mx::ElementFormat;

use super::compile::load_or_compile;
use super::context::{CudaContext, DeviceBuffer};
use super::kernels::MxDevice;
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

const SRC: &str = include_str!("../../kernels/gemv_mma.cu");
/// Rows per block (`TILE_ROWS` in gemv_mma.cu).
const TILE_ROWS: usize = 32;
/// Most warps per block (the kernel's shared partial-sum array holds 16).
const MAX_WARPS: usize = 16;

/// x prepared for [`GemvMma::gemv`]: per 32-value block 32 f16 hi + 32 f16 lo values
/// and one f32 factor.
pub struct XPrep {
    hl: DeviceBuffer<u16>,
    xs: DeviceBuffer<f32>,
    cols: usize,
}

impl XPrep {
    /// Scratch for vectors of up to `padded_cols` values (a multiple of 32).
    pub fn new(ctx: &CudaContext, owner: &Owner, padded_cols: usize) -> Result<XPrep, CudaError> {
        let cols = padded_cols.div_ceil(32) * 32;
        Ok(XPrep {
            hl: ctx.alloc(owner, SpanKind::Scratch, cols * 2)?,
            xs: ctx.alloc(owner, SpanKind::Scratch, cols / 32)?,
            cols,
        })
    }

    /// Values it can hold.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// The tensor-core GEMV kernels of one context.
pub struct GemvMma {
    ctx: Arc<CudaContext>,
    fp4: CudaFunction,
    fp8: CudaFunction,
    prep: CudaFunction,
    sms: usize,
    /// True when the module came from the disk cache.
    pub from_cache: bool,
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

/// Warps per block for `tiles` row tiles of `chunks` 128-byte chunks: the largest power
/// of two ≤ 16 (and ≤ chunks) that keeps the grid within one wave of 16 warps per SM.
pub fn warps_per_block(tiles: usize, chunks: usize, sms: usize) -> usize {
    let budget = (sms * 16).max(1);
    let mut w = 1;
    while w * 2 <= MAX_WARPS && w * 2 <= chunks.max(1) && tiles * w * 2 <= budget {
        w *= 2;
    }
    w
}

impl GemvMma {
    /// Compiles (or reads from the cache) and loads the module for `ctx`'s arch.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<GemvMma, CudaError> {
        let k = load_or_compile("gemv_mma", SRC, &ctx.arch())?;
        let m = ctx
            .raw()
            .load_module(Ptx::from_binary(k.cubin))
            .map_err(driver_err("cuModuleLoadData"))?;
        let f = |n: &str| {
            m.load_function(n)
                .map_err(driver_err("cuModuleGetFunction"))
        };
        let sms = ctx
            .raw()
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        Ok(GemvMma {
            fp4: f("gemv_mxfp4_mma")?,
            fp8: f("gemv_mxfp8_mma")?,
            prep: f("gemv_prep_x")?,
            sms: sms.max(1) as usize,
            ctx: Arc::clone(ctx),
            from_cache: k.from_cache,
        })
    }

    /// Prepares the first `cols` values of `x` (rounded up to 32; `x` must hold them,
    /// zero past the real columns) into `out`.
    pub fn prep_x(
        &self,
        x: &DeviceBuffer<f32>,
        cols: usize,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "gemv_prep_x";
        let n = cols.div_ceil(32) * 32;
        if x.len() < n || out.cols < n {
            return Err(shape(
                op,
                format!("x {} / prep {} for {n} values", x.len(), out.cols),
            ));
        }
        let blocks = n / 32;
        if blocks == 0 {
            return Ok(());
        }
        let nb = int(blocks, op)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.prep);
        b.arg(&x.slice)
            .arg(&mut out.hl.slice)
            .arg(&mut out.xs.slice)
            .arg(&nb);
        // SAFETY: types match the kernel; n ≤ x.len(), 2n ≤ hl, n/32 ≤ xs.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemv_prep_x)"))?;
        Ok(())
    }

    /// y = W·x (`accumulate`: y += W·x) for an MXFP4 or MXFP8 (E4M3) weight, x prepared
    /// by [`Self::prep_x`] over the layout's padded columns.
    pub fn gemv(
        &self,
        w: &MxDevice,
        x: &XPrep,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let op = "gemv_mma";
        let l = w.layout;
        let f = match l.format {
            ElementFormat::Fp4E2M1 => &self.fp4,
            ElementFormat::Fp8E4M3 => &self.fp8,
            ElementFormat::Fp8E5M2 => {
                return Err(shape(op, "E5M2 has no tensor-core GEMV yet".into()));
            }
        };
        if w.bytes.len() != l.total_bytes()
            || x.cols < l.padded_cols()
            || y.len() < l.rows
            || !l.data_row_bytes().is_multiple_of(128)
        {
            return Err(shape(
                op,
                format!(
                    "W {} bytes (layout {}, row {}), x prep {} (need {}), y {} (need {})",
                    w.bytes.len(),
                    l.total_bytes(),
                    l.data_row_bytes(),
                    x.cols,
                    l.padded_cols(),
                    y.len(),
                    l.rows
                ),
            ));
        }
        if l.rows == 0 {
            return Ok(());
        }
        let tiles = l.rows.div_ceil(TILE_ROWS);
        let warps = warps_per_block(tiles, l.data_row_bytes() / 128, self.sms);
        let rows = int(l.rows, op)?;
        let drb = int(l.data_row_bytes(), op)?;
        let soff = l.scale_offset() as i64;
        let srb = int(l.scale_row_bytes(), op)?;
        let acc = i32::from(accumulate);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(tiles).map_err(|_| shape(op, format!("{tiles} blocks")))?,
                1,
                1,
            ),
            block_dim: ((warps * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(f);
        b.arg(&w.bytes.slice)
            .arg(&x.hl.slice)
            .arg(&x.xs.slice)
            .arg(&mut y.slice)
            .arg(&rows)
            .arg(&drb)
            .arg(&soff)
            .arg(&srb)
            .arg(&acc);
        // SAFETY: argument types match the kernel; the layout and sizes are checked above
        // (rows clamp to rows-1, chunks cover data_row_bytes, x covers padded_cols).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemv_mma)"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::warps_per_block;

    #[test]
    fn one_wave_of_warps() {
        // 8192 rows (256 tiles) on 132 SMs: 8 warps, 2048 ≤ 2112.
        assert_eq!(warps_per_block(256, 32, 132), 8);
        assert_eq!(warps_per_block(128, 56, 132), 16);
        // Few chunks cap the warps; many tiles give one warp per block.
        assert_eq!(warps_per_block(8, 2, 132), 2);
        assert_eq!(warps_per_block(4748, 16, 132), 1);
    }
}
