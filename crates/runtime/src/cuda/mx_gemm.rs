//! Batched MX projections for prefill: `Y[t, n] (+)= X[t, k] · W[n, k]ᵀ` with W an MX
//! matrix re-tiled for the GEMV ([`MxTiled`]) and X rows of GEMV x preparations
//! ([`XPrep`]), through cuBLASLt's bf16 GEMM with f32 accumulation
//! (`kernels/mx_bf16.cu`).
//!
//! Key design choice: exact operands instead of rounded ones. W is expanded to bf16
//! with its block scales applied, which is exact (E4M3 and E2M1 codes have at most 4
//! significant bits, bf16 keeps 8 and f32's exponent range); each x row is split into
//! `terms` bf16 planes whose sum is the row (2 planes: 16 significant bits, 3: all of
//! the preparation's ~22), and one GEMM per plane accumulates into the same f32 output.
//! So the result agrees with the f32 CPU path to ~1e-5 (2 terms), where an FP8 GEMM
//! (E4M3 activations, 4 significant bits) cannot. W is expanded per call into one
//! scratch buffer sized for the largest matrix, so the resident weights stay MX.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, DevicePtrMut, LaunchConfig, PushKernelArg};
use favlo_mx::ElementFormat;

use super::blas::BlasLt;
use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::gemv::XPrep;
use super::gemv_tile::MxTiled;
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

const SRC: &str = include_str!("../../kernels/mx_bf16.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "mx_bf16",
    src: SRC,
};

/// Most bf16 planes an x row is split into.
pub const MAX_TERMS: usize = 3;

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

/// Values per row of `w` as the GEMM reads it: the layout's padded K (the padding
/// holds zero codes).
pub fn mx_gemm_k(w: &MxTiled) -> usize {
    let per = if w.layout.format == ElementFormat::Fp4E2M1 {
        2
    } else {
        1
    };
    w.layout.data_row_bytes() * per
}

/// The conversion kernels, cuBLASLt and the scratch of one context.
pub struct MxGemm {
    ctx: Arc<CudaContext>,
    dequant: CudaFunction,
    split: CudaFunction,
    blas: BlasLt,
    w: DeviceBuffer<u16>,
    x: Vec<DeviceBuffer<u16>>,
    terms: usize,
}

impl MxGemm {
    /// Loads the kernels and cuBLASLt and allocates scratch (under `owner`) for
    /// matrices of up to `max_w` values (rows × [`mx_gemm_k`]) and x blocks of up to
    /// `max_x` values (t × k), with x split into `terms` (1..=3) planes.
    pub fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        max_w: usize,
        max_x: usize,
        terms: usize,
    ) -> Result<MxGemm, CudaError> {
        if !(1..=MAX_TERMS).contains(&terms) {
            return Err(shape("MxGemm::new", format!("terms {terms} (1..=3)")));
        }
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        let x = (0..terms)
            .map(|_| ctx.alloc::<u16>(owner, SpanKind::Scratch, max_x.max(1)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MxGemm {
            dequant: f("mx_tiled_to_bf16")?,
            split: f("xprep_split_bf16")?,
            blas: BlasLt::new(ctx, owner)?,
            w: ctx.alloc(owner, SpanKind::Scratch, max_w.max(1))?,
            x,
            terms,
            ctx: Arc::clone(ctx),
        })
    }

    /// Device bytes [`MxGemm::new`] takes for these sizes (scratch + the cuBLASLt
    /// workspace on Hopper), for a caller's memory fit.
    pub fn bytes_for(max_w: usize, max_x: usize, terms: usize) -> u64 {
        ((max_w + terms * max_x) * 2 + (32 << 20)) as u64
    }

    /// `y[t, n] = x · wᵀ` (or `+=` when `accumulate`) for the `t` x rows whose
    /// preparations start at values 0, stride, 2·stride, … of `x`; n = `w`'s rows,
    /// k = [`mx_gemm_k`]`(w)` ≤ stride. Queued on the context's stream.
    pub fn run(
        &mut self,
        w: &MxTiled,
        x: &XPrep,
        t: usize,
        stride: usize,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let op = "MxGemm::run";
        let (n, k) = (w.layout.rows, mx_gemm_k(w));
        if t == 0 || n == 0 {
            return Ok(());
        }
        if k > stride || !stride.is_multiple_of(32) || x.cols() < t * stride {
            return Err(shape(
                op,
                format!(
                    "k {k}, stride {stride}, {t} rows, x holds {} values",
                    x.cols()
                ),
            ));
        }
        if n * k > self.w.len() || t * k > self.x[0].len() || y.len() < t * n {
            return Err(shape(
                op,
                format!(
                    "{n}×{k} matrix, {t} rows: scratch {}/{}, y {}",
                    self.w.len(),
                    self.x[0].len(),
                    y.len()
                ),
            ));
        }
        self.expand(w)?;
        self.split(x, t, stride, k)?;
        for p in 0..self.terms {
            self.blas
                .gemm_bf16(&self.x[p], &self.w, y, t, n, k, accumulate || p > 0)?;
        }
        Ok(())
    }

    /// `w` as row-major bf16 [rows, k] into the weight scratch.
    fn expand(&mut self, w: &MxTiled) -> Result<(), CudaError> {
        let l = w.layout;
        let chunks = l.data_row_bytes() / 128;
        // One thread per 16-byte piece; the kernel indexes pieces in 32 bits.
        let pieces = l.rows * chunks * 8;
        if pieces >= 1 << 31 {
            return Err(shape("mx_tiled_to_bf16", format!("{pieces} pieces")));
        }
        let rows = i32::try_from(l.rows).map_err(|_| shape("mx_tiled_to_bf16", "rows".into()))?;
        let ch = i32::try_from(chunks).map_err(|_| shape("mx_tiled_to_bf16", "chunks".into()))?;
        let fp4 = i32::from(l.format == ElementFormat::Fp4E2M1);
        let cfg = LaunchConfig {
            grid_dim: (pieces.div_ceil(256).clamp(1, 1 << 16) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.dequant);
        b.arg(&w.data.slice)
            .arg(&w.scales.slice)
            .arg(&mut self.w.slice)
            .arg(&rows)
            .arg(&ch)
            .arg(&fp4);
        // SAFETY: types match the kernel; the data and scale tiles hold tiles × chunks
        // × (4096 | 256 or 128) bytes (`tile_mx`), the output rows × k values (checked
        // by the caller; cudaMalloc'd, so its 16-byte stores are aligned: k·2 is a
        // multiple of 256); the grid-stride loop stays below the piece count.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(mx_tiled_to_bf16)"))?;
        Ok(())
    }

    /// x rows into the bf16 planes [t, k].
    fn split(&mut self, x: &XPrep, t: usize, stride: usize, k: usize) -> Result<(), CudaError> {
        let op = "xprep_split_bf16";
        let ti = i32::try_from(t).map_err(|_| shape(op, "t".into()))?;
        let si = i32::try_from(stride).map_err(|_| shape(op, "stride".into()))?;
        let ki = i32::try_from(k).map_err(|_| shape(op, "k".into()))?;
        let terms = self.terms as i32;
        let cfg = LaunchConfig {
            grid_dim: (k.div_ceil(256) as u32, t.min(65_535) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        // Plane pointers; planes past `terms` are never written, the first stands in.
        let planes = self.x.len();
        let mut guards = Vec::with_capacity(MAX_TERMS);
        let mut ptrs = [0u64; MAX_TERMS];
        for (i, plane) in self.x.iter_mut().enumerate().take(MAX_TERMS) {
            let (p, g) = plane.slice.device_ptr_mut(s);
            ptrs[i] = p;
            guards.push(g);
        }
        for i in planes..MAX_TERMS {
            ptrs[i] = ptrs[0];
        }
        let mut b = s.launch_builder(&self.split);
        b.arg(&x.hl.slice)
            .arg(&x.xs.slice)
            .arg(&ptrs[0])
            .arg(&ptrs[1])
            .arg(&ptrs[2]);
        b.arg(&ti).arg(&si).arg(&ki).arg(&terms);
        // SAFETY: types match; x holds t rows of `stride` prepared values (checked by
        // `run`), every plane t × k values; the kernel writes only planes < terms.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(xprep_split_bf16)"))?;
        drop(guards);
        Ok(())
    }
}
