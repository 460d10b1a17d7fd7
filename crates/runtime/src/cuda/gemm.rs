//! MX GEMM on the Hopper FP8 tensor cores for prefill (`kernels/gemm_common.cuh`,
//! `gemm_epilogue.cuh`, `gemm_mx.cu`, `gemm_quant.cu`): `Y[m, n] = X[m, k] · W[n, k]ᵀ`
//! (or `Y += …`) with W an MXFP8 matrix (E4M3 or E5M2 codes, E8M0 scale per 32
//! values) or an MXFP4 one (folded exactly into E4M3 codes by
//! [`super::gemm_fold`], one scale per (row, 128 k) where it can be, so the grouped
//! kernel promotes once per 128 k) and X f32 activations.
//!
//! Key design choice: the product is computed transposed on the tensor cores (`wgmma`
//! M = weight rows, N = tokens), one k = 32 step (= one MX block) at a time, and each
//! step's result is promoted into the f32 accumulator with one FFMA by a factor that
//! depends on the weight row only. That works because X is quantized ([`GemmMx::quantize`])
//! to E4M3 with a power of two per token row (applied in the epilogue) times a power of
//! two per (128-token tile, 32-value block) shared by the tile's rows; the weight's
//! per-(row, block) E8M0 scale times that shared block factor is then the only per-step
//! scale. Weights are re-tiled once on upload ([`tile_gemm`](super::tile_gemm), in
//! `gemm_tile.rs`) into the exact shared memory order the tensor cores read, so one bulk
//! copy per operand fills a pipeline stage. Only sm_90a (Hopper) runs it.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use favlo_mx::ElementFormat;

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::gemm_tile::{GEMM_KB, GEMM_TILE, GemmWeights, TILE_BYTES, tile_offset};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

const SRC: &str = concat!(
    include_str!("../../kernels/silu_fp8.cuh"),
    include_str!("../../kernels/gemm_common.cuh"),
    include_str!("../../kernels/gemm_epilogue.cuh"),
    include_str!("../../kernels/gemm_mx.cu"),
    include_str!("../../kernels/gemm_quant.cu")
);
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "gemm_mx",
    src: SRC,
};
/// Dynamic shared memory of the GEMM kernel: `GM_STAGES` × `GM_STAGE_BYTES`.
const GEMM_SMEM: usize = 6 * 33792;
/// Dynamic shared memory of the staged-epilogue kernels (`GEMM_STAGED_KERNEL`): 5 ring
/// stages plus two `GM_STG_BYTES` (64 tokens × 68 floats) staging buffers.
const GEMM_STAGED_SMEM: usize = 5 * 33792 + 2 * 64 * 68 * 4;
/// Dynamic shared memory of the three-consumer kernel: `G3_STAGES` × `G3_STAGE_BYTES`.
const GEMM_W3_SMEM: usize = 5 * 41984;
/// Dynamic shared memory of the tensor-core ceiling kernel: `GEMM_TC_SLOTS` ring stages.
const GEMM_TC_SMEM: usize = 4 * 33792;
/// Hopper's largest dynamic shared memory per block (227 KB) less the kernels' 1 KB of
/// static shared memory (the mbarriers, aligned to the ring's 1 KB).
const SM90_DYNAMIC_SMEM: usize = 227 * 1024 - 1024;
const _: () = assert!(
    GEMM_SMEM <= SM90_DYNAMIC_SMEM
        && GEMM_STAGED_SMEM <= SM90_DYNAMIC_SMEM
        && GEMM_W3_SMEM <= SM90_DYNAMIC_SMEM
        && GEMM_TC_SMEM <= SM90_DYNAMIC_SMEM,
    "a GEMM kernel's shared memory does not fit a Hopper block"
);

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

/// Activations quantized for [`GemmMx::gemm`]: E4M3 codes in tiles, a power of two per
/// (128-token tile, 32-value block) and one per token row.
pub struct GemmActs {
    /// Tokens it can hold.
    pub m_cap: usize,
    /// One C per (tile, 128-value k block) instead of per 32 values ([`Self::grouped`]).
    grouped: bool,
    /// 128-value k blocks.
    pub kblocks: usize,
    /// Tokens and columns of the last quantization.
    m: usize,
    k: usize,
    codes: DeviceBuffer<u8>,
    block_scales: DeviceBuffer<f32>,
    row_scales: DeviceBuffer<f32>,
}

impl GemmActs {
    /// Scratch for up to `m_cap` tokens of `cols` values (rounded up to 128).
    pub fn new(
        ctx: &CudaContext,
        owner: &Owner,
        m_cap: usize,
        cols: usize,
    ) -> Result<GemmActs, CudaError> {
        let tiles = m_cap.div_ceil(GEMM_TILE).max(1);
        let kblocks = cols.div_ceil(GEMM_KB).max(1);
        Ok(GemmActs {
            m_cap,
            grouped: false,
            kblocks,
            m: 0,
            k: 0,
            codes: ctx.alloc(owner, SpanKind::Scratch, tiles * kblocks * TILE_BYTES)?,
            block_scales: ctx.alloc(owner, SpanKind::Scratch, tiles * kblocks * 4)?,
            row_scales: ctx.alloc(owner, SpanKind::Scratch, tiles * GEMM_TILE)?,
        })
    }

    /// Device bytes [`Self::new`] takes for these sizes (for a caller's memory fit).
    pub fn bytes_for(m_cap: usize, cols: usize) -> u64 {
        let tiles = m_cap.div_ceil(GEMM_TILE).max(1);
        let kblocks = cols.div_ceil(GEMM_KB).max(1);
        (tiles * kblocks * (TILE_BYTES + 4 * 4) + tiles * GEMM_TILE * 4) as u64
    }

    /// Quantized with one C per (tile, 128-value k block) instead of per 32 values:
    /// with grouped weights the GEMM then promotes once per stage. Fixed at creation.
    pub fn grouped(mut self, grouped: bool) -> GemmActs {
        self.grouped = grouped;
        self
    }

    /// The row-scale buffer a producer writes for [`GemmMx::quantize_codes`].
    pub(crate) fn row_scales_mut(&mut self) -> &mut DeviceBuffer<f32> {
        &mut self.row_scales
    }

    /// Tokens of the last quantization.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// The quantized activations decoded on the host, `[m][k]` row-major: code ·
    /// R[row] · C[tile, block] (what the GEMM multiplies with; for tests).
    pub fn values(&self, ctx: &CudaContext) -> Result<Vec<f32>, CudaError> {
        let codes = ctx.download(&self.codes)?;
        let c = ctx.download(&self.block_scales)?;
        let r = ctx.download(&self.row_scales)?;
        let mut out = vec![0f32; self.m * self.k];
        for (row, o) in out.chunks_mut(self.k.max(1)).enumerate().take(self.m) {
            let (tile, rr) = (row / GEMM_TILE, row % GEMM_TILE);
            for (col, v) in o.iter_mut().enumerate() {
                let (kb, kk) = (col / GEMM_KB, col % GEMM_KB);
                let code = codes[(tile * self.kblocks + kb) * TILE_BYTES + tile_offset(rr, kk)];
                let cs = c[(tile * self.kblocks + kb) * 4 + kk / 32];
                *v = favlo_mx::decode_fp8_e4m3(code) * r[row] * cs;
            }
        }
        Ok(out)
    }

    /// (per-row powers of two R, per-(tile, block) powers of two C) of the last
    /// quantization (for tests).
    pub fn scales(&self, ctx: &CudaContext) -> Result<(Vec<f32>, Vec<f32>), CudaError> {
        let mut r = ctx.download(&self.row_scales)?;
        r.truncate(self.m);
        let c = ctx.download(&self.block_scales)?;
        Ok((r, c))
    }
}

/// Which consumer loop [`GemmMx::gemm`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmKernel {
    /// Each k step: wgmma, wait, promote (the two consumer warpgroups overlap each
    /// other only). The first version.
    Serial,
    /// Two temporary accumulators per warpgroup: step i + 1 runs on the tensor cores
    /// while step i is promoted (7 of 8 steps), registers moved from the producer
    /// warpgroup with `setmaxnreg`.
    Pipelined,
    /// The pipelined loop in a persistent grid (one block per multiprocessor walking
    /// the output tiles): the next tile's loads overlap this tile's epilogue. Default.
    Persistent,
    /// Three consumer warpgroups per block (192 weight rows × 128 tokens, 512 threads),
    /// the serial loop in each (experimental).
    Wide3,
}

/// The MXFP8 GEMM kernels of one context.
pub struct GemmMx {
    ctx: Arc<CudaContext>,
    e4m3: CudaFunction,
    e5m2: CudaFunction,
    e4m3_pipe: CudaFunction,
    e5m2_pipe: CudaFunction,
    e4m3_persist: CudaFunction,
    e5m2_persist: CudaFunction,
    e4m3_w3: CudaFunction,
    e5m2_w3: CudaFunction,
    /// The persistent kernel with grouped promotion, 2 and 4 stages per call.
    e4m3_group: [CudaFunction; 2],
    /// The three-consumer kernel with grouped promotion.
    e4m3_w3_group: CudaFunction,
    /// The persistent kernels with staged epilogues ([`TileStore::Bulk`],
    /// [`TileStore::Vector`], [`TileStore::VectorAdd`], [`TileStore::Lean`]): per-step
    /// promotion, then grouped.
    e4m3_persist_s: [CudaFunction; 4],
    e4m3_group_s: [CudaFunction; 4],
    /// The staged kernels with the SwiGLU epilogue ([`Self::gemm_swiglu`]): per-step
    /// promotion, grouped.
    e4m3_swiglu: [CudaFunction; 2],
    sms: usize,
    e4m3_swap: CudaFunction,
    probe: CudaFunction,
    tc_ceiling: CudaFunction,
    row_scale: CudaFunction,
    quant: CudaFunction,
    /// The consumer loop (default [`GemmKernel::Persistent`]).
    pub kernel: GemmKernel,
    /// Use the descriptor variant with the leading/stride byte offsets exchanged
    /// (diagnostics only; wrong results expected).
    pub desc_swap: bool,
    /// True when the module came from the disk cache.
    pub from_cache: bool,
    /// Stages per grouped call (2 or 4, default 4).
    pub group_stages: usize,
    /// How the persistent E4M3 kernels write a finished tile.
    pub store: TileStore,
}

/// How the persistent E4M3 GEMM writes a finished 128 × 128 tile of `y`. The staged
/// kinds run a 5-stage ring instead of 6 (the staging takes the sixth stage's shared
/// memory) and fall back to per-thread stores when `n` is not a multiple of 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileStore {
    /// Per-thread 4-byte stores in the wgmma fragment order (`y +=`: the residuals
    /// loaded first).
    Direct,
    /// Through shared memory and the copy engine: bulk stores of token rows, `y +=` as
    /// bulk reduce-adds in L2 (no residual loads).
    Bulk,
    /// `y +=` as [`Self::Bulk`]; plain results through shared memory and stored 16 bytes
    /// per thread (two whole 256-byte token rows per warp instruction). The default
    /// before [`Self::VectorAdd`].
    Vector,
    /// Threads for both: plain results as [`Self::Vector`], `y +=` as 16-byte loads of
    /// a round's residuals, adds and 16-byte stores (no copy engine): the `y +=` GEMMs
    /// 3–10% faster than [`Self::Vector`] on the H200 (docs/CUDA.md). The default
    /// before [`Self::Lean`].
    VectorAdd,
    /// The values of [`Self::VectorAdd`], bit for bit, by a leaner epilogue
    /// (`gm_epilogue_lean`: `y +=` chosen once per tile, a full tile's pieces stored
    /// from one base pointer with no bounds tests). Default since session 41: on an H100,
    /// alternated with [`Self::VectorAdd`] in the same calls, the prefill's GEMMs ran
    /// level to 1.5% faster on average and q|k|v and o faster in nearly every pair
    /// (docs/CUDA.md, "Staged tile epilogues").
    Lean,
}

impl GemmMx {
    /// Whether the GEMM runs on a device of `arch` (`CudaContext::arch`): Hopper's
    /// wgmma, sm_90a only.
    pub fn supports(arch: &str) -> bool {
        arch == "sm_90a"
    }

    /// Compiles (or reads from the cache) and loads the module. Needs sm_90a.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<GemmMx, CudaError> {
        let arch = ctx.arch();
        if !Self::supports(&arch) {
            return Err(CudaError::Unavailable {
                reason: format!("the MXFP8 GEMM needs sm_90a (Hopper wgmma); device is {arch}"),
            });
        }
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        let big_with = |n: &str, smem: usize| -> Result<CudaFunction, CudaError> {
            let func = f(n)?;
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(driver_err("cuFuncSetAttribute"))?;
            Ok(func)
        };
        let big = |n: &str| big_with(n, GEMM_SMEM);
        Ok(GemmMx {
            ctx: Arc::clone(ctx),
            e4m3: big("gemm_mxfp8_e4m3")?,
            e5m2: big("gemm_mxfp8_e5m2")?,
            e4m3_pipe: big("gemm_mxfp8_e4m3_pipe")?,
            e5m2_pipe: big("gemm_mxfp8_e5m2_pipe")?,
            e4m3_persist: big("gemm_mxfp8_e4m3_persist")?,
            e5m2_persist: big("gemm_mxfp8_e5m2_persist")?,
            e4m3_w3: big_with("gemm_mxfp8_e4m3_w3", GEMM_W3_SMEM)?,
            e5m2_w3: big_with("gemm_mxfp8_e5m2_w3", GEMM_W3_SMEM)?,
            e4m3_group: [
                big("gemm_mxfp8_e4m3_group2")?,
                big("gemm_mxfp8_e4m3_group4")?,
            ],
            e4m3_w3_group: big_with("gemm_mxfp8_e4m3_w3g", GEMM_W3_SMEM)?,
            e4m3_persist_s: [
                big_with("gemm_mxfp8_e4m3_persist_s", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_persist_v", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_persist_a", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_persist_l", GEMM_STAGED_SMEM)?,
            ],
            e4m3_group_s: [
                big_with("gemm_mxfp8_e4m3_group4_s", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_group4_v", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_group4_a", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_group4_l", GEMM_STAGED_SMEM)?,
            ],
            e4m3_swiglu: [
                big_with("gemm_mxfp8_e4m3_persist_swiglu", GEMM_STAGED_SMEM)?,
                big_with("gemm_mxfp8_e4m3_group4_swiglu", GEMM_STAGED_SMEM)?,
            ],
            group_stages: 4,
            store: TileStore::Lean,
            sms: ctx
                .raw()
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                )
                .map_err(driver_err("cuDeviceGetAttribute"))?
                .max(1) as usize,
            kernel: GemmKernel::Persistent,
            e4m3_swap: big("gemm_mxfp8_e4m3_swap")?,
            probe: big("gemm_mxfp8_e4m3_probe")?,
            tc_ceiling: big_with("gemm_tc_ceiling", GEMM_TC_SMEM)?,
            row_scale: f("gemm_row_scale")?,
            quant: f("gemm_quant_x")?,
            desc_swap: false,
            from_cache: m.from_cache,
        })
    }

    /// Quantizes `x` (`m` rows of `k` values, row stride `ldx`) into `out`.
    pub fn quantize(
        &self,
        x: &DeviceBuffer<f32>,
        m: usize,
        k: usize,
        ldx: usize,
        out: &mut GemmActs,
    ) -> Result<(), CudaError> {
        let op = "gemm_quantize";
        check_quantize(op, x, m, k, ldx, out)?;
        let m_pad = m.div_ceil(GEMM_TILE) * GEMM_TILE;
        let (mi, ki, ldxi, m_padi) = (int(m, op)?, int(k, op)?, int(ldx, op)?, int(m_pad, op)?);
        let cfg = LaunchConfig {
            grid_dim: (m_pad.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.row_scale);
        b.arg(&x.slice)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldxi)
            .arg(&mut out.row_scales.slice)
            .arg(&m_padi);
        // SAFETY: types match; rows < m read k values at stride ldx (checked above),
        // m_pad ≤ row_scales.len() written.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemm_row_scale)"))?;
        self.quantize_codes(x, m, k, ldx, out)
    }

    /// The codes and block scales of [`Self::quantize`] for rows whose row scales (rows
    /// < `m`) are already in `out`: written by the producer that made the rows, in the
    /// same call ([`super::PrefillOps::rms_norm_quantize`], `swiglu_quantize`).
    pub(crate) fn quantize_codes(
        &self,
        x: &DeviceBuffer<f32>,
        m: usize,
        k: usize,
        ldx: usize,
        out: &mut GemmActs,
    ) -> Result<(), CudaError> {
        let op = "gemm_quantize";
        check_quantize(op, x, m, k, ldx, out)?;
        let tiles = m.div_ceil(GEMM_TILE);
        let (mi, ki, ldxi, kbi) = (
            int(m, op)?,
            int(k, op)?,
            int(ldx, op)?,
            int(out.kblocks, op)?,
        );
        let group = i32::from(out.grouped);
        let cfg = LaunchConfig {
            grid_dim: (out.kblocks as u32, tiles as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.quant);
        b.arg(&x.slice)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldxi)
            .arg(&out.row_scales.slice)
            .arg(&mut out.codes.slice)
            .arg(&mut out.block_scales.slice)
            .arg(&kbi)
            .arg(&group);
        // SAFETY: types match; reads rows < m of k values at stride ldx (checked) and
        // their row scales; writes tiles·kblocks code tiles and block scales, within the
        // buffers sized by `GemmActs::new` for m_cap ≥ m.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemm_quant_x)"))?;
        out.m = m;
        out.k = k;
        Ok(())
    }

    /// `y[m, n] = x · wᵀ` (`accumulate`: `y +=`), `y` row-major with `n = w.rows`
    /// columns, for the activations quantized last into `x`.
    pub fn gemm(
        &self,
        x: &GemmActs,
        w: &GemmWeights,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        if w.swiglu {
            return Err(shape(
                "gemm_mx",
                "gate | up weights tiled for SwiGLU go through gemm_swiglu".into(),
            ));
        }
        self.launch(x, w, y, accumulate, false)
    }

    /// `y[m, ff] = silu(x · gateᵀ) ∘ (x · upᵀ)` for gate | up weights tiled by
    /// [`tile_gemm_swiglu`](super::tile_gemm_swiglu) (`ff = w.rows / 2`): the GEMM's tiles are finished in
    /// shared memory and only the SwiGLU product is stored, so the `[m, 2·ff]` gate |
    /// up rows and the pass over them are never made. The values equal those of
    /// [`Self::gemm`] over the plain tiling followed by the SwiGLU rows kernel.
    pub fn gemm_swiglu(
        &self,
        x: &GemmActs,
        w: &GemmWeights,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "gemm_mx_swiglu";
        let grouped = w.grouped && x.grouped;
        if !w.swiglu || self.kernel != GemmKernel::Persistent || (grouped && self.group_stages < 4)
        {
            return Err(shape(
                op,
                format!(
                    "needs weights from tile_gemm_swiglu (swiglu {}) and the persistent kernel \
                     with 4 grouped stages ({:?}, {})",
                    w.swiglu, self.kernel, self.group_stages
                ),
            ));
        }
        let ff = w.rows / 2;
        check_gemm(op, x, w, y, ff)?;
        let tiles = x.m.div_ceil(GEMM_TILE) * w.rows.div_ceil(GEMM_TILE);
        let cfg = self.persistent_cfg(tiles, true);
        // Rows a multiple of 128 (tile_gemm_swiglu): every tile holds 64 outputs.
        self.run(
            &self.e4m3_swiglu[usize::from(grouped)],
            cfg,
            x,
            w,
            y,
            (ff, false),
            op,
        )
    }

    /// Threads of [`Self::tensor_ceiling`]'s grid: one float of `sink` each.
    pub fn tensor_ceiling_threads(&self) -> usize {
        self.sms * 256
    }

    /// FLOPs of one [`Self::tensor_ceiling`] launch of `stages` stages.
    pub fn tensor_ceiling_flop(&self, stages: usize) -> f64 {
        2.0 * (GEMM_TILE * GEMM_TILE * GEMM_KB) as f64 * stages as f64 * self.sms as f64
    }

    /// The tensor cores' ceiling (`gemm_tc_ceiling`): one block per multiprocessor whose
    /// two warpgroups chain `stages` × 4 m64n128k32 E4M3 wgmmas, the instruction of
    /// [`Self::gemm`], on operands already in shared memory: no loads, no promotion, one
    /// float per thread into `sink`. Timed by the caller; under load the power cap sets
    /// the clock, so its rate is what a GEMM of these instructions could reach on this
    /// card as it runs (the datasheet's peak assumes a higher clock).
    pub fn tensor_ceiling(
        &self,
        stages: usize,
        sink: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "gemm_tc_ceiling";
        let threads = self.tensor_ceiling_threads();
        if sink.len() < threads {
            return Err(shape(
                op,
                format!("sink holds {} floats, needs {threads}", sink.len()),
            ));
        }
        let st = int(stages, op)?;
        let cfg = LaunchConfig {
            grid_dim: (self.sms as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: GEMM_TC_SMEM as u32,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.tc_ceiling);
        b.arg(&st).arg(&mut sink.slice);
        // SAFETY: types match; the grid's threads write sink[0 .. threads) (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemm_tc_ceiling)"))?;
        Ok(())
    }

    /// A timing probe with the same loads and tensor-core steps as [`Self::gemm`] but no
    /// scale promotion (each k step accumulates straight into the accumulator): its
    /// output is meaningless; benchmarks use it to split the kernel's time.
    pub fn gemm_probe(
        &self,
        x: &GemmActs,
        w: &GemmWeights,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        self.launch(x, w, y, false, true)
    }

    fn launch(
        &self,
        x: &GemmActs,
        w: &GemmWeights,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
        probe: bool,
    ) -> Result<(), CudaError> {
        let op = "gemm_mx";
        let m = x.m;
        check_gemm(op, x, w, y, w.rows)?;
        let kernel = if probe || self.desc_swap {
            GemmKernel::Serial
        } else {
            self.kernel
        };
        let grouped = w.grouped && x.grouped;
        // The staged kernel, if any (index into `e4m3_persist_s` / `e4m3_group_s`). Two
        // grouped stages per call have none (the slower choice).
        let staged = match self.store {
            _ if kernel != GemmKernel::Persistent
                || (grouped && self.group_stages < 4)
                || w.format != ElementFormat::Fp8E4M3 =>
            {
                None
            }
            TileStore::Direct => None,
            TileStore::Bulk => Some(0),
            TileStore::Vector => Some(1),
            TileStore::VectorAdd => Some(2),
            TileStore::Lean => Some(3),
        };
        let f = match (w.format, kernel) {
            (ElementFormat::Fp8E4M3, _) if probe => &self.probe,
            (ElementFormat::Fp8E4M3, _) if self.desc_swap => &self.e4m3_swap,
            (ElementFormat::Fp8E4M3, GemmKernel::Serial) => &self.e4m3,
            (ElementFormat::Fp8E4M3, GemmKernel::Pipelined) => &self.e4m3_pipe,
            (ElementFormat::Fp8E4M3, GemmKernel::Persistent) => match (staged, grouped) {
                (Some(i), true) => &self.e4m3_group_s[i],
                (Some(i), false) => &self.e4m3_persist_s[i],
                (None, true) => &self.e4m3_group[usize::from(self.group_stages >= 4)],
                (None, false) => &self.e4m3_persist,
            },
            (ElementFormat::Fp8E4M3, GemmKernel::Wide3) if grouped => &self.e4m3_w3_group,
            (ElementFormat::Fp8E4M3, GemmKernel::Wide3) => &self.e4m3_w3,
            (ElementFormat::Fp8E5M2, GemmKernel::Serial) => &self.e5m2,
            (ElementFormat::Fp8E5M2, GemmKernel::Pipelined) => &self.e5m2_pipe,
            (ElementFormat::Fp8E5M2, GemmKernel::Persistent) => &self.e5m2_persist,
            (ElementFormat::Fp8E5M2, GemmKernel::Wide3) => &self.e5m2_w3,
            (ElementFormat::Fp4E2M1, _) => {
                return Err(shape(op, "MXFP4 codes must be folded by tile_gemm".into()));
            }
        };
        let (mt, nt) = (m.div_ceil(GEMM_TILE), w.rows.div_ceil(GEMM_TILE));
        let cfg = match kernel {
            GemmKernel::Persistent => self.persistent_cfg(mt * nt, staged.is_some()),
            GemmKernel::Wide3 => LaunchConfig {
                grid_dim: (mt as u32, w.rows.div_ceil(192) as u32, 1),
                block_dim: (512, 1, 1),
                shared_mem_bytes: GEMM_W3_SMEM as u32,
            },
            GemmKernel::Serial | GemmKernel::Pipelined => LaunchConfig {
                grid_dim: (mt as u32, nt as u32, 1),
                block_dim: (384, 1, 1),
                shared_mem_bytes: GEMM_SMEM as u32,
            },
        };
        self.run(f, cfg, x, w, y, (w.rows, accumulate), op)
    }

    /// The persistent kernels' launch over `tiles` output tiles: at most one block per
    /// multiprocessor, and the ring's shared memory with or without the epilogue's
    /// staging.
    fn persistent_cfg(&self, tiles: usize, staged: bool) -> LaunchConfig {
        let smem = if staged { GEMM_STAGED_SMEM } else { GEMM_SMEM };
        LaunchConfig {
            grid_dim: (tiles.min(self.sms) as u32, 1, 1),
            block_dim: (384, 1, 1),
            shared_mem_bytes: smem as u32,
        }
    }

    /// Launches GEMM kernel `f` (every variant takes the same arguments) on shapes
    /// `check_gemm` accepted: `y` rows of `ldy` columns (`w.rows`, or `w.rows / 2` for
    /// SwiGLU), `y +=` when `accumulate`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        x: &GemmActs,
        w: &GemmWeights,
        y: &mut DeviceBuffer<f32>,
        (ldy, accumulate): (usize, bool),
        op: &'static str,
    ) -> Result<(), CudaError> {
        let (mi, ni, kbi, ldyi, acc) = (
            int(x.m, op)?,
            int(w.rows, op)?,
            int(w.kblocks, op)?,
            int(ldy, op)?,
            i32::from(accumulate),
        );
        let s = self.ctx.stream();
        let mut b = s.launch_builder(f);
        b.arg(&w.data.slice)
            .arg(&w.scales.slice)
            .arg(&x.codes.slice)
            .arg(&x.block_scales.slice)
            .arg(&x.row_scales.slice)
            .arg(&mut y.slice)
            .arg(&mi)
            .arg(&ni)
            .arg(&kbi)
            .arg(&ldyi)
            .arg(&acc);
        // SAFETY: types match the kernel; the tiles read exist for m_tiles × kblocks
        // (x) and n_tiles × kblocks (w); y writes rows < m, columns < ldy (checked by
        // `check_gemm` against the same ldy).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemm_mx)"))?;
        Ok(())
    }
}

/// `x` quantized for `w` (same k) and `y` room for `x.m` rows of `cols` outputs.
fn check_gemm(
    op: &'static str,
    x: &GemmActs,
    w: &GemmWeights,
    y: &DeviceBuffer<f32>,
    cols: usize,
) -> Result<(), CudaError> {
    let m = x.m;
    if m == 0 || x.k != w.cols || x.kblocks != w.kblocks || y.len() < m * cols {
        return Err(shape(
            op,
            format!(
                "x {m}x{} ({} k blocks), w {}x{} ({} k blocks), y {} (need {})",
                x.k,
                x.kblocks,
                w.rows,
                w.cols,
                w.kblocks,
                y.len(),
                m * cols
            ),
        ));
    }
    Ok(())
}

/// `x` holds `m` rows of `k` values at stride `ldx`, and `out` room for them.
fn check_quantize(
    op: &'static str,
    x: &DeviceBuffer<f32>,
    m: usize,
    k: usize,
    ldx: usize,
    out: &GemmActs,
) -> Result<(), CudaError> {
    if m == 0 || k == 0 {
        return Err(shape(op, format!("empty input {m}x{k}")));
    }
    if m > out.m_cap || k.div_ceil(GEMM_KB) > out.kblocks || ldx < k {
        return Err(shape(
            op,
            format!(
                "{m}x{k} (ldx {ldx}) into scratch of {} tokens x {} k blocks",
                out.m_cap, out.kblocks
            ),
        ));
    }
    if x.len() < (m - 1) * ldx + k {
        return Err(shape(op, format!("x holds {} values", x.len())));
    }
    Ok(())
}
