//! MXFP4 / MXFP8 GEMV on the tensor cores (`kernels/gemv_*.cu`, `kernels/gemv_common.cuh`).
//!
//! Key design choice: x is prepared once per vector ([`GemvMma::prep_x`]: per 32-value
//! block a power-of-two scale and an f16 hi + lo split, ~22 bits), so every GEMV that
//! reads the same x (q/k/v, gate/up) shares it, and the GEMV itself only decodes the
//! weights to f16 and issues `mma.sync`. The launch picks the warps per block so the
//! grid is about one wave of 16 warps per multiprocessor. Weights are re-tiled on the
//! host before upload ([`tile_mx`](super::tile_mx), in `gemv_tile.rs`) so each warp
//! streams 4 KB contiguous per step. The same fragments and arithmetic are fed four
//! ways ([`GemvKernel`]): register double buffer, register ping-pong, a per-warp
//! shared-memory ring filled by `cp.async` ([`ring_config`] picks its warps and
//! depth), or the same ring filled by bulk copies; [`GemvKernel::Auto`] resolves per
//! format to the fastest measured on the H200 ([`GemvMma::resolve`]).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use favlo_mx::ElementFormat;

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::gemv_epi::Epilogue;
use super::gemv_tile::{MxTiled, TILE_ROWS, scale_tile_bytes};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

const SRC: &str = concat!(
    include_str!("../../kernels/prep32.cuh"),
    include_str!("../../kernels/fp8_sw.cuh"),
    include_str!("../../kernels/gemv_common.cuh"),
    include_str!("../../kernels/gemv_mma.cu"),
    include_str!("../../kernels/gemv_pp.cu"),
    include_str!("../../kernels/gemv_read_probe.cu"),
    include_str!("../../kernels/gemv_ring.cu"),
    include_str!("../../kernels/gemv_prep.cu"),
    include_str!("../../kernels/gemv_batch.cu"),
    include_str!("../../kernels/gemv_chain.cu")
);
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "gemv_mma",
    src: SRC,
};
/// Most warps per block (the kernel's shared partial-sum array holds 16).
const MAX_WARPS: usize = 16;

/// x prepared for [`GemvMma::gemv`]: per 32-value block 32 f16 hi + 32 f16 lo values
/// and one f32 factor.
pub struct XPrep {
    pub(crate) hl: DeviceBuffer<u16>,
    pub(crate) xs: DeviceBuffer<f32>,
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

    /// The first `n` prepared values, reconstructed on the host as (hi + lo)·2^-e
    /// (for tests: what the GEMV will multiply with).
    pub fn values(&self, ctx: &CudaContext, n: usize) -> Result<Vec<f32>, CudaError> {
        let hl = ctx.download(&self.hl)?;
        let xs = ctx.download(&self.xs)?;
        let h16 = |b: u16| half::f16::from_bits(b).to_f64();
        Ok((0..n.min(self.cols))
            .map(|i| {
                let (blk, k) = (i / 32, i % 32);
                let j = k % 8;
                let pos = (k - j) + if j % 2 == 1 { 4 + j / 2 } else { j / 2 };
                let v = h16(hl[blk * 64 + pos]) + h16(hl[blk * 64 + 32 + pos]);
                (v * xs[blk] as f64) as f32
            })
            .collect())
    }
}

/// Which tensor-core GEMV kernel [`GemvMma::gemv`] launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemvKernel {
    /// Per format and shape the kernel measured fastest (see [`GemvMma::resolve`]).
    Auto,
    /// Register double buffer (one chunk in flight per warp while it computes).
    Regs,
    /// Register ping-pong buffers, two chunks per loop trip (no register moves).
    PingPong,
    /// Per-warp shared-memory ring of D stages filled by `cp.async`.
    Ring,
    /// The same ring filled by bulk copies (`cp.async.bulk`, one lane, mbarrier).
    Tma,
}

/// Bytes of one ring stage (weights 4 KB + scales + x slice and factors).
pub fn ring_stage_bytes(format: ElementFormat) -> usize {
    if format == ElementFormat::Fp4E2M1 {
        4096 + 256 + 8 * 128 + 8 * 4
    } else {
        4096 + 128 + 4 * 128 + 4 * 4
    }
}

/// Static shared memory of the ring kernels: partial sums (two buffers) + per-warp
/// mbarriers.
const RING_STATIC: usize = 4096 + 512;
/// Shared memory the driver reserves per block (sm_80 and newer).
const SMEM_PER_BLOCK_RESERVED: usize = 1024;

/// Shared memory available to the ring kernels (from the device).
#[derive(Clone, Copy, Debug)]
pub struct SmemLimits {
    /// Multiprocessors.
    pub sms: usize,
    /// Shared memory per multiprocessor.
    pub per_sm: usize,
    /// Most dynamic + static shared memory one block may opt into.
    pub per_block: usize,
}

/// (warps per block, ring depth) for `tiles` row tiles of `chunks` chunks: 8 warps
/// (fewer if the row has fewer chunks) and 2 stages, two blocks per multiprocessor.
/// Measured on the H200 (docs/CUDA.md) over 12 (warps, depth) pairs and six shapes:
/// deeper rings and 14–16 warps per block were slower or no faster, so the depth
/// that keeps 16 warps per SM wins; the shared memory limit only shrinks the warps.
pub fn ring_config(
    format: ElementFormat,
    _tiles: usize,
    chunks: usize,
    lim: SmemLimits,
) -> (usize, usize) {
    let stage = ring_stage_bytes(format);
    let mut w = 8usize.min(chunks.max(1));
    while w > 1 && w * 2 * stage + RING_STATIC > lim.per_block {
        w -= 1;
    }
    (w, 2)
}

/// Whether two blocks of the ring that [`ring_config`] picks fit one multiprocessor's
/// shared memory (16 warps per SM, as on the H200). Where only one fits (GPUs with
/// ≤ 164 KB per SM: sm_80, sm_86, sm_89, sm_120), the ring runs 8 warps per SM and
/// measured slower than the ping-pong kernel's 16 (docs/CUDA.md).
pub fn ring_two_blocks(
    format: ElementFormat,
    tiles: usize,
    chunks: usize,
    lim: SmemLimits,
) -> bool {
    let (w, d) = ring_config(format, tiles, chunks, lim);
    2 * (w * d * ring_stage_bytes(format) + RING_STATIC + SMEM_PER_BLOCK_RESERVED) <= lim.per_sm
}

/// Most warps per block of the batched kernels (`__launch_bounds__(256)` in
/// gemv_batch.cu).
pub(super) const BATCH_WARPS: usize = 8;

/// Blocks of 8 warps of each batched kernel that fit one multiprocessor (`batch` ->
/// `GemvMma::batch_fit`; the kernels' registers decide).
fn batch_occupancy(batch: &[[CudaFunction; 3]; 2]) -> Result<[[usize; 3]; 2], CudaError> {
    let mut fit = [[1; 3]; 2];
    for (row, fns) in fit.iter_mut().zip(batch) {
        for (b, f) in row.iter_mut().zip(fns) {
            let n = f
                .occupancy_max_active_blocks_per_multiprocessor((BATCH_WARPS * 32) as u32, 0, None)
                .map_err(driver_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            *b = (n as usize).max(1);
        }
    }
    Ok(fit)
}

/// The tensor-core GEMV kernels of one context.
pub struct GemvMma {
    ctx: Arc<CudaContext>,
    fp4: CudaFunction,
    fp8: CudaFunction,
    fp4_pf: CudaFunction,
    fp8_pf: CudaFunction,
    pp: [CudaFunction; 2],
    /// Ping-pong with L2 prefetch [FP4, FP8] × distance 2, 3.
    pp_pf: [[CudaFunction; 2]; 2],
    /// Ping-pong with the first chunk requested after the PDL wait [FP4, FP8] × by every
    /// warp, by the odd warps ([`Self::pp_first_loads`]).
    pp_pre: [[CudaFunction; 2]; 2],
    /// Ring kernels, [FP4, FP8] × depth 2, 3, 4.
    ring: [[CudaFunction; 3]; 2],
    /// Bulk-copy ring kernels, [FP4, FP8] × depth 2, 3, 4.
    tma: [[CudaFunction; 3]; 2],
    /// Timing probes of the depth-2 ring ([FP4, FP8] × mode 1..=3, see gemv_ring.cu),
    /// (mode 4) of the depth-3 bulk-copy ring, loads only, (mode 5) the read ceiling of
    /// the GEMV's bytes and (modes 6..=8) the ping-pong loop without decode, without
    /// mma, with loads only.
    probe: [[CudaFunction; 8]; 2],
    prep: CudaFunction,
    rms_prep: CudaFunction,
    swiglu_prep: CudaFunction,
    norm_parts: CudaFunction,
    /// Batched GEMVs ([`Self::gemv_batch`]), [FP4, FP8] × 2, 3, 4 vectors.
    pub(super) batch: [[CudaFunction; 3]; 2],
    /// Blocks of 8 warps of each batched kernel that fit one multiprocessor (its
    /// registers decide), as `batch`.
    pub(super) batch_fit: [[usize; 3]; 2],
    /// Chains of dependent GEMVs in one launch ([FP4, FP8], `gemv_chain.rs`).
    pub(super) chain: [CudaFunction; 2],
    /// RMSNorm and SwiGLU preparations over several sequences (`decode_batch.rs`).
    pub(super) rms_prep_z: CudaFunction,
    pub(super) swiglu_prep_z: CudaFunction,
    pub(super) sms: usize,
    smem: SmemLimits,
    /// The kernel [`Self::gemv`] launches (default [`GemvKernel::Ring`]).
    pub kernel: GemvKernel,
    /// (warps per block, ring depth 2..=4) for the ring kernels instead of
    /// [`ring_config`]'s choice, and (warps, ignored) for the ping-pong kernel
    /// (benchmarks).
    pub ring_override: Option<(usize, usize)>,
    /// Launch with programmatic dependent launch (default off): the GEMV requests its
    /// first weights while the kernel before it (which triggers early) finishes; the
    /// RMSNorm and SwiGLU preparations launch early too and wait before reading.
    pub pdl: bool,
    /// [`GemvKernel::Auto`] picks kernels as if [`Self::pdl`] were on (benchmarks that
    /// compare PDL on and off with the same kernels).
    pub select_as_pdl: bool,
    /// [`GemvKernel::PingPong`]: prefetch the chunk this many loop steps ahead into L2
    /// (0 = off, 2 or 3).
    pub pp_prefetch: u8,
    /// [`GemvKernel::PingPong`], a timing probe of the decode step: which warps request
    /// their first chunk before the PDL wait (0 = all, the default; 1 = none; 2 = the
    /// even warps). Takes precedence over [`Self::pp_prefetch`].
    pub pp_first_loads: u8,
    /// True when the module came from the disk cache.
    pub from_cache: bool,
    /// [`GemvKernel::Regs`] only: the weight loads with the L2 256-byte prefetch hint
    /// (default off: measured 0–2% slower on the H200 in `cuda_bench`).
    pub l2_prefetch: bool,
    /// The ring kernels run at most one wave of blocks, each looping over its tiles
    /// (default on); off, one block per tile.
    pub persistent: bool,
    /// At most this many warps per block for the register kernels (Regs, PingPong)
    /// instead of [`warps_per_block`]'s up to 16 (benchmarks: smaller blocks leave room
    /// on a multiprocessor for the next kernel's blocks under PDL).
    pub warps_cap: Option<usize>,
    /// Warps per block of the batched GEMV ([`Self::gemv_batch`], 1..=8) instead of
    /// its own choice (benchmarks).
    pub batch_warps: Option<usize>,
}

pub(super) fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

pub(super) fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
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
        Self::load_module(ctx, LoadedModule::load(ctx, MODULE)?)
    }

    /// [`Self::load`] with the register and ring kernels' weight and scale loads marked
    /// evict-first in L2 (`FAVLO_W_EVICT_FIRST`; a timing probe of the decode step, whose
    /// weights are read once per token while its small lines are reused every layer).
    pub fn load_evict_first(ctx: &Arc<CudaContext>) -> Result<GemvMma, CudaError> {
        let prelude = "#define FAVLO_W_EVICT_FIRST 1\n";
        Self::load_module(
            ctx,
            LoadedModule::load_variant(ctx, MODULE, "gemv_mma_ef", prelude)?,
        )
    }

    fn load_module(ctx: &Arc<CudaContext>, m: LoadedModule) -> Result<GemvMma, CudaError> {
        let f = |n: &str| m.function(n);
        use cudarc::driver::sys::CUdevice_attribute as A;
        let attr = |a: A| {
            ctx.raw()
                .attribute(a)
                .map_err(driver_err("cuDeviceGetAttribute"))
        };
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let (per_sm, per_block) = ctx.shared_memory_limits()?;
        let smem = SmemLimits {
            sms: sms.max(1) as usize,
            per_sm,
            per_block,
        };
        let dyn_max = i32::try_from(smem.per_block.saturating_sub(RING_STATIC)).unwrap_or(0);
        let ring_fn = |n: &str| -> Result<CudaFunction, CudaError> {
            let func = f(n)?;
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dyn_max,
            )
            .map_err(driver_err("cuFuncSetAttribute"))?;
            Ok(func)
        };
        let batch = [
            [
                f("gemv_mxfp4_batch2")?,
                f("gemv_mxfp4_batch3")?,
                f("gemv_mxfp4_batch4")?,
            ],
            [
                f("gemv_mxfp8_batch2")?,
                f("gemv_mxfp8_batch3")?,
                f("gemv_mxfp8_batch4")?,
            ],
        ];
        Ok(GemvMma {
            ring: [
                [
                    ring_fn("gemv_mxfp4_ring2")?,
                    ring_fn("gemv_mxfp4_ring3")?,
                    ring_fn("gemv_mxfp4_ring4")?,
                ],
                [
                    ring_fn("gemv_mxfp8_ring2")?,
                    ring_fn("gemv_mxfp8_ring3")?,
                    ring_fn("gemv_mxfp8_ring4")?,
                ],
            ],
            tma: [
                [
                    ring_fn("gemv_mxfp4_tma2")?,
                    ring_fn("gemv_mxfp4_tma3")?,
                    ring_fn("gemv_mxfp4_tma4")?,
                ],
                [
                    ring_fn("gemv_mxfp8_tma2")?,
                    ring_fn("gemv_mxfp8_tma3")?,
                    ring_fn("gemv_mxfp8_tma4")?,
                ],
            ],
            probe: [
                [
                    ring_fn("gemv_mxfp4_probe1")?,
                    ring_fn("gemv_mxfp4_probe2")?,
                    ring_fn("gemv_mxfp4_probe3")?,
                    ring_fn("gemv_mxfp4_tmaprobe3")?,
                    f("gemv_mxfp4_read_probe")?,
                    f("gemv_mxfp4_pp_probe1")?,
                    f("gemv_mxfp4_pp_probe2")?,
                    f("gemv_mxfp4_pp_probe3")?,
                ],
                [
                    ring_fn("gemv_mxfp8_probe1")?,
                    ring_fn("gemv_mxfp8_probe2")?,
                    ring_fn("gemv_mxfp8_probe3")?,
                    ring_fn("gemv_mxfp8_tmaprobe3")?,
                    f("gemv_mxfp8_read_probe")?,
                    f("gemv_mxfp8_pp_probe1")?,
                    f("gemv_mxfp8_pp_probe2")?,
                    f("gemv_mxfp8_pp_probe3")?,
                ],
            ],
            smem,
            kernel: GemvKernel::Auto,
            ring_override: None,
            batch_warps: None,
            pdl: false,
            select_as_pdl: false,
            pp_prefetch: 0,
            pp_first_loads: 0,
            fp4: f("gemv_mxfp4_mma")?,
            fp8: f("gemv_mxfp8_mma")?,
            fp4_pf: f("gemv_mxfp4_mma_pf")?,
            fp8_pf: f("gemv_mxfp8_mma_pf")?,
            pp: [f("gemv_mxfp4_pp")?, f("gemv_mxfp8_pp")?],
            pp_pf: [
                [f("gemv_mxfp4_pp_pf2")?, f("gemv_mxfp4_pp_pf3")?],
                [f("gemv_mxfp8_pp_pf2")?, f("gemv_mxfp8_pp_pf3")?],
            ],
            pp_pre: [
                [f("gemv_mxfp4_pp_late")?, f("gemv_mxfp4_pp_half")?],
                [f("gemv_mxfp8_pp_late")?, f("gemv_mxfp8_pp_half")?],
            ],
            prep: f("gemv_prep_x")?,
            rms_prep: f("rms_norm_prep")?,
            swiglu_prep: f("swiglu_prep")?,
            norm_parts: f("norm_parts_prep")?,
            rms_prep_z: f("rms_norm_prep_z")?,
            swiglu_prep_z: f("swiglu_prep_z")?,
            batch_fit: batch_occupancy(&batch)?,
            chain: [f("gemv_mxfp4_chain")?, f("gemv_mxfp8_chain")?],
            batch,
            sms: sms.max(1) as usize,
            ctx: Arc::clone(ctx),
            from_cache: m.from_cache,
            l2_prefetch: false,
            persistent: true,
            warps_cap: None,
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

    /// RMSNorm of `x` (one row of `weight.len()` values, a multiple of 32) written
    /// straight into `out` (the normalized vector is never stored as f32). Blocks of
    /// `out` past the row are left as they are (zero in a fresh [`XPrep`]), so a GEMV
    /// over a K padded past the row reads zeros there.
    pub fn rms_norm_prep(
        &self,
        x: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        eps: f32,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "rms_norm_prep";
        let dim = weight.len();
        if dim == 0 || !dim.is_multiple_of(32) || x.len() < dim || out.cols < dim {
            return Err(shape(
                op,
                format!("x {} weight {dim} prep {}", x.len(), out.cols),
            ));
        }
        let d = int(dim, op)?;
        let cfg = LaunchConfig {
            grid_dim: (dim.div_ceil(128) as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let s = self.ctx.stream();
        let (xp, _g0) = x.slice.device_ptr(s);
        let (wp, _g1) = weight.slice.device_ptr(s);
        let (hp, _g2) = out.hl.slice.device_ptr_mut(s);
        let (sp, _g3) = out.xs.slice.device_ptr_mut(s);
        let mut args = [
            arg_ptr(&xp),
            arg_ptr(&wp),
            arg_ptr(&eps),
            arg_ptr(&d),
            arg_ptr(&hp),
            arg_ptr(&sp),
        ];
        // SAFETY: the kernel's parameters in order and type; dim values read from x and
        // weight, dim/32 blocks written (checked above); with PDL the kernel waits for
        // the previous kernel before it reads x.
        unsafe { launch_raw(s, &self.rms_prep, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(rms_norm_prep)"))
    }

    /// silu(gu[i])·gu[n + i] for i < n (n a multiple of 32) straight into `out`.
    pub fn swiglu_prep(
        &self,
        gu: &DeviceBuffer<f32>,
        n: usize,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "swiglu_prep";
        if n == 0 || !n.is_multiple_of(32) || gu.len() < 2 * n || out.cols < n {
            return Err(shape(
                op,
                format!("gate|up {} n {n} prep {}", gu.len(), out.cols),
            ));
        }
        let ni = int(n, op)?;
        let cfg = LaunchConfig {
            grid_dim: ((n / 32).div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let s = self.ctx.stream();
        let (gp, _g0) = gu.slice.device_ptr(s);
        let (hp, _g1) = out.hl.slice.device_ptr_mut(s);
        let (sp, _g2) = out.xs.slice.device_ptr_mut(s);
        let mut args = [arg_ptr(&gp), arg_ptr(&ni), arg_ptr(&hp), arg_ptr(&sp)];
        // SAFETY: the kernel's parameters in order and type; 2n values read, n/32 blocks
        // written (checked above); with PDL the kernel waits for the previous kernel
        // before it reads gate|up.
        unsafe { launch_raw(s, &self.swiglu_prep, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(swiglu_prep)"))
    }

    /// Whether a ring of `warps` × `depth` stages of `format` fits one block's shared
    /// memory on this device (a [`Self::ring_override`] that does not is refused).
    pub fn ring_fits(&self, format: ElementFormat, warps: usize, depth: usize) -> bool {
        warps * depth * ring_stage_bytes(format) + RING_STATIC <= self.smem.per_block
    }

    /// Warps per block of the register kernels: [`warps_per_block`], at most
    /// [`Self::warps_cap`].
    fn reg_warps(&self, tiles: usize, chunks: usize) -> usize {
        let w = warps_per_block(tiles, chunks, self.sms);
        self.warps_cap.map_or(w, |c| w.min(c.max(1)))
    }

    /// The kernel [`Self::gemv`] runs for a `format` matrix of `tiles` row tiles and
    /// `chunks` chunks: `kernel`, with [`GemvKernel::Auto`] resolved to the fastest
    /// measured on the H200 (docs/CUDA.md): ping-pong registers for FP8; for FP4 the
    /// ping-pong kernel when the grid is at most one block per multiprocessor and either
    /// PDL is on or the row has at most 16 chunks (the o and down projections of the
    /// decode step), or, with PDL, when all its blocks fit in one wave with at least 8
    /// chunks per warp (gate|up: 768 blocks of 2 warps, 8 chunks each); else the
    /// `cp.async` ring (q|k|v, lm_head, and 8192×8192 chained: 4 chunks per warp, where
    /// the ring measured 74% of copy and the ping-pong kernel 70%), but only where two
    /// ring blocks fit a multiprocessor ([`ring_two_blocks`]; elsewhere the ping-pong
    /// kernel decoded 16% faster).
    pub fn resolve(&self, format: ElementFormat, tiles: usize, chunks: usize) -> GemvKernel {
        let pdl = self.pdl || self.select_as_pdl;
        let w = warps_per_block(tiles, chunks, self.sms);
        let one_wave = tiles * w <= self.sms * MAX_WARPS && chunks >= 8 * w;
        match (self.kernel, format) {
            (GemvKernel::Auto, ElementFormat::Fp4E2M1)
                if (tiles <= self.sms && (pdl || chunks <= 16))
                    || (pdl && one_wave)
                    || !ring_two_blocks(format, tiles, chunks, self.smem) =>
            {
                GemvKernel::PingPong
            }
            (GemvKernel::Auto, ElementFormat::Fp4E2M1) => GemvKernel::Ring,
            (GemvKernel::Auto, _) => GemvKernel::PingPong,
            (k, _) => k,
        }
    }

    /// y = W·x (`accumulate`: y += W·x) for an MXFP4 or MXFP8 (E4M3) weight, x prepared
    /// by [`Self::prep_x`] over the layout's padded columns.
    pub fn gemv(
        &self,
        w: &MxTiled,
        x: &XPrep,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        self.launch(w, x, y, Epilogue::plain(accumulate), None, (0, 0))
    }

    /// [`Self::gemv`] with a fused epilogue ([`Epilogue`]: the RMSNorm factor applied to
    /// the rows, the next RMSNorm's or the SwiGLU's x preparation written by the blocks
    /// that finish its input).
    pub fn gemv_fused(
        &self,
        w: &MxTiled,
        x: &XPrep,
        y: &mut DeviceBuffer<f32>,
        epi: Epilogue<'_>,
    ) -> Result<(), CudaError> {
        self.launch(w, x, y, epi, None, (0, 0))
    }

    pub(crate) fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub(super) fn sms_count(&self) -> usize {
        self.sms
    }

    pub(super) fn smem_per_sm(&self) -> usize {
        self.smem.per_sm
    }

    pub(crate) fn norm_parts_fn(&self) -> &CudaFunction {
        &self.norm_parts
    }

    /// [`Self::gemv`] on one row of multi-row buffers: x is the prepared vector at
    /// value `x_off` of `x` (a multiple of 32; e.g. row i of t rows prepared at a
    /// stride ≥ the layout's padded columns), and the result goes to `y[y_off..]`.
    /// Prefill uses it per token of a chunk whose other steps run batched.
    pub fn gemv_at(
        &self,
        w: &MxTiled,
        x: &XPrep,
        x_off: usize,
        y: &mut DeviceBuffer<f32>,
        y_off: usize,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        if !x_off.is_multiple_of(32) {
            return Err(shape(
                "gemv_mma",
                format!("x offset {x_off} not a multiple of 32"),
            ));
        }
        self.launch(w, x, y, Epilogue::plain(accumulate), None, (x_off, y_off))
    }

    /// A timing probe of the depth-2 ring kernel with `ring_override`'s warps (default
    /// 8): mode 1 skips the weight decode, 2 the mma, 3 both (loads only); mode 4 is
    /// the depth-3 bulk-copy ring, loads only; mode 5 streams the same bytes with a
    /// plain grid-stride read (the ceiling of any kernel that reads them once), modes
    /// 6, 7, 8 are the ping-pong loop without decode, without mma, with loads only. The output is meaningless; benchmarks
    /// use it to split the kernel's time.
    pub fn gemv_probe(
        &self,
        mode: usize,
        w: &MxTiled,
        x: &XPrep,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        self.launch(w, x, y, Epilogue::plain(false), Some(mode), (0, 0))
    }

    fn launch(
        &self,
        w: &MxTiled,
        x: &XPrep,
        y: &mut DeviceBuffer<f32>,
        mut epi: Epilogue<'_>,
        probe: Option<usize>,
        (x_off, y_off): (usize, usize),
    ) -> Result<(), CudaError> {
        let op = "gemv_mma";
        let l = w.layout;
        let f = match (l.format, self.l2_prefetch) {
            (ElementFormat::Fp4E2M1, false) => &self.fp4,
            (ElementFormat::Fp8E4M3, false) => &self.fp8,
            (ElementFormat::Fp4E2M1, true) => &self.fp4_pf,
            (ElementFormat::Fp8E4M3, true) => &self.fp8_pf,
            (ElementFormat::Fp8E5M2, _) => {
                return Err(shape(op, "E5M2 has no tensor-core GEMV yet".into()));
            }
        };
        let tiles = l.rows.div_ceil(TILE_ROWS);
        let chunks = l.data_row_bytes() / 128;
        if w.data.len() != tiles * chunks * 4096
            || w.scales.len() != tiles * chunks * scale_tile_bytes(l.format)
            || x.cols < x_off + l.padded_cols()
            || y.len() < y_off + l.rows
            || !l.data_row_bytes().is_multiple_of(128)
        {
            return Err(shape(
                op,
                format!(
                    "W {}+{} bytes for {}x{} tiles, x prep {} (need {}), y {} (need {})",
                    w.data.len(),
                    w.scales.len(),
                    tiles,
                    chunks,
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
        let kernel = self.resolve(l.format, tiles, chunks);
        if (kernel == GemvKernel::Tma || probe == Some(4)) && self.ctx.compute_capability() < (9, 0)
        {
            return Err(shape(
                op,
                format!(
                    "the bulk-copy (TMA) GEMV needs sm_90 or newer; device is {}",
                    self.ctx.arch()
                ),
            ));
        }
        let fi = usize::from(l.format != ElementFormat::Fp4E2M1);
        let (f, warps, smem) = match (kernel, probe) {
            (_, Some(mode @ 5..=8)) => {
                let w = if mode == 5 {
                    MAX_WARPS
                } else {
                    warps_per_block(tiles, chunks, self.sms)
                };
                (&self.probe[fi][mode - 1], w, 0)
            }
            (_, Some(mode)) => {
                let w = self.ring_override.map_or(8, |o| o.0).clamp(1, MAX_WARPS);
                let f = self.probe[fi]
                    .get(mode.wrapping_sub(1))
                    .ok_or_else(|| shape(op, format!("probe mode {mode}")))?;
                let d = if mode == 4 { 3 } else { 2 };
                (f, w, w * d * ring_stage_bytes(l.format))
            }
            (GemvKernel::Regs | GemvKernel::Auto, None) => (f, self.reg_warps(tiles, chunks), 0),
            (GemvKernel::PingPong, None) => {
                let w = self.ring_override.map_or_else(
                    || self.reg_warps(tiles, chunks),
                    |o| o.0.clamp(1, MAX_WARPS),
                );
                let f = match (self.pp_first_loads, self.pp_prefetch) {
                    (1, _) => &self.pp_pre[fi][0],
                    (2, _) => &self.pp_pre[fi][1],
                    (_, 2) => &self.pp_pf[fi][0],
                    (_, 3) => &self.pp_pf[fi][1],
                    _ => &self.pp[fi],
                };
                (f, w, 0)
            }
            (GemvKernel::Ring | GemvKernel::Tma, None) => {
                let (w, d) = self
                    .ring_override
                    .unwrap_or_else(|| ring_config(l.format, tiles, chunks, self.smem));
                let smem = w * d * ring_stage_bytes(l.format);
                if !(1..=MAX_WARPS).contains(&w)
                    || !(2..=4).contains(&d)
                    || smem + RING_STATIC > self.smem.per_block
                {
                    return Err(shape(
                        op,
                        format!("ring of {w} warps × {d} stages ({smem} bytes of shared memory)"),
                    ));
                }
                let set = if kernel == GemvKernel::Tma {
                    &self.tma
                } else {
                    &self.ring
                };
                (&set[fi][d - 2], w, smem)
            }
        };
        // The ring kernels loop over tiles: one wave of blocks streams the matrix.
        let blocks = if probe == Some(5) {
            // The read ceiling: two 16-warp blocks per multiprocessor.
            self.sms * 2
        } else if matches!(kernel, GemvKernel::Ring | GemvKernel::Tma)
            && probe.is_none()
            && self.persistent
        {
            let per_sm = (MAX_WARPS / warps.max(1))
                .min(self.smem.per_sm / (smem + RING_STATIC + SMEM_PER_BLOCK_RESERVED))
                .max(1);
            tiles.min(self.sms * per_sm)
        } else {
            tiles
        };
        let rows = int(l.rows, op)?;
        let nch = int(chunks, op)?;
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(blocks).map_err(|_| shape(op, format!("{blocks} blocks")))?,
                1,
                1,
            ),
            block_dim: ((warps * 32) as u32, 1, 1),
            shared_mem_bytes: u32::try_from(smem).map_err(|_| shape(op, format!("{smem}")))?,
        };
        if !epi.is_plain() && (x_off, y_off) != (0, 0) {
            return Err(shape(op, "a fused epilogue on an offset row".into()));
        }
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let s = self.ctx.stream();
        let mut guards = Vec::new();
        let e = epi.raw(l.rows, l.cols, s, &mut guards)?;
        let (wd, _g0) = w.data.slice.device_ptr(s);
        let (wsc, _g1) = w.scales.slice.device_ptr(s);
        let (xh, _g2) = x.hl.slice.device_ptr(s);
        let (xf, _g3) = x.xs.slice.device_ptr(s);
        let (yp, _g4) = y.slice.device_ptr_mut(s);
        // Byte offsets of the row (checked against the buffers above).
        let (xh, xf, yp) = (
            xh + (x_off * 4) as u64,
            xf + (x_off / 32 * 4) as u64,
            yp + (y_off * 4) as u64,
        );
        let mut args = [
            arg_ptr(&wd),
            arg_ptr(&wsc),
            arg_ptr(&xh),
            arg_ptr(&xf),
            arg_ptr(&yp),
            arg_ptr(&rows),
            arg_ptr(&nch),
            arg_ptr(&e),
        ];
        // SAFETY: the arguments are in the kernel's order and types and outlive the
        // call; the tile planes hold tiles·chunks tiles, x covers chunks·128 bytes of
        // codes, y ≥ rows (checked above), the epilogue's buffers by `Epilogue::raw`.
        // With PDL every GEMV kernel waits before it reads x, y or the partials.
        unsafe { launch_raw(s, f, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(gemv_mma)"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{SmemLimits, ring_config, ring_stage_bytes, ring_two_blocks, warps_per_block};
    use favlo_mx::{ElementFormat, MxLayout};

    /// The ring choice stays within the shared memory of an H200, of an RTX 3090 / 4090
    /// (sm_86 / sm_89: 99 KB per block) and of an A100 (sm_80), and keeps several
    /// chunks in flight per warp on the benchmark and decode shapes.
    #[test]
    fn ring_config_fits_the_h200_and_older_gpus() {
        for lim in [
            (132, 233_472, 232_448),
            (82, 102_400, 101_376),
            (108, 167_936, 166_912),
        ]
        .map(|(sms, per_sm, per_block)| SmemLimits {
            sms,
            per_sm,
            per_block,
        }) {
            ring_configs_fit(lim);
        }
    }

    fn ring_configs_fit(lim: SmemLimits) {
        for (format, rows, cols) in [
            (ElementFormat::Fp4E2M1, 8192, 8192),
            (ElementFormat::Fp8E4M3, 8192, 8192),
            (ElementFormat::Fp4E2M1, 4096, 14336),
            (ElementFormat::Fp8E4M3, 4096, 14336),
            (ElementFormat::Fp4E2M1, 6144, 4096),
            (ElementFormat::Fp4E2M1, 4096, 4096),
            (ElementFormat::Fp4E2M1, 24576, 4096),
            (ElementFormat::Fp4E2M1, 4096, 12288),
            (ElementFormat::Fp4E2M1, 151_936, 4096),
        ] {
            let l = MxLayout { format, rows, cols };
            let (tiles, chunks) = (rows.div_ceil(32), l.data_row_bytes() / 128);
            let (w, d) = ring_config(format, tiles, chunks, lim);
            let block = w * d * ring_stage_bytes(format) + super::RING_STATIC;
            println!("{format:?} {rows}x{cols}: {w} warps x {d} stages, {block} B");
            assert!((1..=16).contains(&w) && (2..=4).contains(&d) && w <= chunks);
            assert!(block <= lim.per_block, "{block}");
        }
    }

    /// Two FP4 ring blocks fit an H200's multiprocessor, not an A100's or an RTX 3090's.
    #[test]
    fn two_ring_blocks_only_on_hopper() {
        let lim = |sms, per_sm, per_block| SmemLimits {
            sms,
            per_sm,
            per_block,
        };
        // The FP4 decode shapes: q|k|v, o, gate|up, down (tiles, chunks).
        for (tiles, chunks) in [(192, 16), (128, 16), (768, 16), (128, 48)] {
            let two = |l| ring_two_blocks(ElementFormat::Fp4E2M1, tiles, chunks, l);
            assert!(two(lim(132, 233_472, 232_448)));
            assert!(!two(lim(108, 167_936, 166_912)));
            assert!(!two(lim(82, 102_400, 101_376)));
        }
    }

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
