//! Causal prefill attention and the row-batched steps of a prefill chunk
//! (`kernels/attn_prefill.cu`): t query tokens at positions `n_past..n_past + t` over the
//! contiguous [`KvCache`] the decode path uses, GQA groups 1..8, heads of 64 or 128.
//!
//! Key design choice: flash-attention on `mma.sync` (f16 × f16 → f32) with each K/V tile
//! staged once in shared memory for all the query heads of its kv head, and the f16
//! fragments made of hi + lo halves (q, p, and an f32 cache's k and v), so the result
//! keeps ~f32 accuracy while the cache and positions are exactly the decode path's: a
//! chunk prefilled here and the decode graph after it share one cache. The batched
//! helpers (bias + RoPE + store, RMSNorm, SwiGLU, x preparation over t rows) write the
//! GEMV's x preparation for t rows at a fixed row stride, one launch per chunk (or, for
//! the FP8 GEMM path, f32 rows: [`super::prefill_rows`]).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::attention::KvCache;
use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::gemv::XPrep;
use super::{CudaError, driver_err};

const SRC: &str = concat!(
    include_str!("../../kernels/prep32.cuh"),
    include_str!("../../kernels/silu_fp8.cuh"),
    include_str!("../../kernels/attn_prefill.cu")
);
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "attn_prefill",
    src: SRC,
};
/// Query rows (token × head-in-group) per attention block (`AP_ROWS`).
const ROWS: usize = 64;

pub(super) fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

pub(super) fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

fn hd_index(head_dim: usize, op: &'static str) -> Result<usize, CudaError> {
    match head_dim {
        128 => Ok(0),
        64 => Ok(1),
        _ => Err(shape(op, format!("head_dim {head_dim}: 64 or 128 only"))),
    }
}

/// The prefill kernels of one context.
pub struct PrefillOps {
    ctx: Arc<CudaContext>,
    /// [head dim 64?][f16 cache?].
    attn: [[CudaFunction; 2]; 2],
    /// [head dim 64?]: the f16-cache kernel with q and p as single f16 halves.
    attn_half: [CudaFunction; 2],
    rope: [[CudaFunction; 2]; 2],
    rms: CudaFunction,
    swiglu: CudaFunction,
    prep: CudaFunction,
    /// The f32-row producers of the FP8 GEMM path ([`super::prefill_rows`]).
    pub(super) rms_f32: CudaFunction,
    pub(super) swiglu_f32: CudaFunction,
}

/// Qwen3's per-head RMSNorm of q and k before RoPE: weights of `head_dim` values each.
#[derive(Clone, Copy)]
pub struct QkNorm<'a> {
    /// Weight of every q head's norm.
    pub q: &'a DeviceBuffer<f32>,
    /// Weight of every k head's norm.
    pub k: &'a DeviceBuffer<f32>,
    /// The norm's epsilon.
    pub eps: f32,
}

/// How [`PrefillOps::attention`] feeds q·scale and the probabilities to the tensor cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnPrecision {
    /// f16 hi + lo pairs (~22 bits, two mma each; ≤ 5e-5 of the output's max against f64
    /// in `tests/cuda_attn_prefill.rs`): the exact prefill.
    Split,
    /// Single f16 values (11 bits, half the tensor-core work) over an f16 cache; an f32
    /// cache runs [`Self::Split`]. For callers whose activations are coarser anyway (the
    /// FP8 prefill).
    Half,
}

/// Shape of one prefill attention call.
#[derive(Clone, Copy, Debug)]
pub struct PrefillShape {
    /// Query tokens of the chunk.
    pub t: usize,
    /// Tokens already in the cache (the chunk's first position).
    pub n_past: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl PrefillShape {
    fn check(&self, op: &'static str, cache: &KvCache) -> Result<(), CudaError> {
        let Self {
            t,
            n_past,
            n_heads,
            n_kv_heads,
            head_dim,
        } = *self;
        hd_index(head_dim, op)?;
        let cap = cache.len() / (n_kv_heads.max(1) * head_dim);
        if t == 0
            || n_kv_heads == 0
            || !n_heads.is_multiple_of(n_kv_heads)
            || !(1..=8).contains(&(n_heads / n_kv_heads))
            || n_past + t > cap
        {
            return Err(shape(
                op,
                format!(
                    "{t} tokens after {n_past}, heads {n_heads}/{n_kv_heads}×{head_dim}, cache of {cap}"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether the cache holds f16 bits (picks the kernel variant).
fn is_f16(cache: &KvCache) -> bool {
    matches!(cache, KvCache::F16 { .. })
}

impl PrefillOps {
    /// The context the kernels launch on.
    pub(super) fn ctx(&self) -> &CudaContext {
        &self.ctx
    }

    /// Compiles (or reads from the cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<PrefillOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(PrefillOps {
            attn: [
                [f("attn_prefill_f32_hd128")?, f("attn_prefill_f16_hd128")?],
                [f("attn_prefill_f32_hd64")?, f("attn_prefill_f16_hd64")?],
            ],
            attn_half: [f("attn_prefill_f16h_hd128")?, f("attn_prefill_f16h_hd64")?],
            rope: [
                [
                    f("rows_bias_rope_store_f32_hd128")?,
                    f("rows_bias_rope_store_f16_hd128")?,
                ],
                [
                    f("rows_bias_rope_store_f32_hd64")?,
                    f("rows_bias_rope_store_f16_hd64")?,
                ],
            ],
            rms: f("rows_rms_norm_prep")?,
            swiglu: f("rows_swiglu_prep")?,
            prep: f("rows_prep")?,
            rms_f32: f("rows_rms_norm_f32")?,
            swiglu_f32: f("rows_swiglu_f32")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// Causal attention of `s.t` query tokens at positions `s.n_past..`: row i of `q`
    /// (stride `ldq`, [n_heads][head_dim] f32) attends to cache keys `0..=n_past + i`
    /// with `scale`; row i of `out` (stride `ldo`) gets [n_heads][head_dim] f32 (values
    /// past that in the row are not touched). The chunk's own keys must already be in
    /// the cache ([`Self::bias_rope_store`]). `precision` picks how q·scale and the
    /// probabilities enter the tensor cores ([`AttnPrecision`]).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: &DeviceBuffer<f32>,
        ldq: usize,
        cache: &KvCache,
        s: PrefillShape,
        scale: f32,
        out: &mut DeviceBuffer<f32>,
        ldo: usize,
        precision: AttnPrecision,
    ) -> Result<(), CudaError> {
        let op = "attn_prefill";
        s.check(op, cache)?;
        let row = s.n_heads * s.head_dim;
        if ldq < row
            || ldo < row
            || !ldq.is_multiple_of(2)
            || !ldo.is_multiple_of(2)
            || q.len() < (s.t - 1) * ldq + row
            || out.len() < (s.t - 1) * ldo + row
        {
            return Err(shape(
                op,
                format!("q {} (ld {ldq}), out {} (ld {ldo})", q.len(), out.len()),
            ));
        }
        let g = s.n_heads / s.n_kv_heads;
        let blocks = (s.t * g).div_ceil(ROWS);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(blocks).map_err(|_| shape(op, format!("{blocks} blocks")))?,
                s.n_kv_heads as u32,
                1,
            ),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let hi = hd_index(s.head_dim, op)?;
        let f = if precision == AttnPrecision::Half && is_f16(cache) {
            &self.attn_half[hi]
        } else {
            &self.attn[hi][usize::from(is_f16(cache))]
        };
        let (ldqi, ldoi, ti, npi, nhi, nkvi) = (
            int(ldq, op)?,
            int(ldo, op)?,
            int(s.t, op)?,
            int(s.n_past, op)?,
            int(s.n_heads, op)?,
            int(s.n_kv_heads, op)?,
        );
        let st = self.ctx.stream();
        let mut b = st.launch_builder(f);
        b.arg(&q.slice).arg(&ldqi);
        match cache {
            KvCache::F16 { k, v } => b.arg(&k.slice).arg(&v.slice),
            KvCache::F32 { k, v } => b.arg(&k.slice).arg(&v.slice),
        };
        b.arg(&mut out.slice)
            .arg(&ldoi)
            .arg(&ti)
            .arg(&npi)
            .arg(&nhi)
            .arg(&nkvi)
            .arg(&scale);
        // SAFETY: argument order and types match the kernel; q rows < t read
        // n_heads·head_dim values at stride ldq, out rows written likewise (checked);
        // cache keys < n_past + t ≤ capacity read (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(attn_prefill)"))?;
        Ok(())
    }

    /// The decode step's bias + RoPE + KV store for `s.t` tokens: row i of `qkv` (stride
    /// `ldqkv`, fused [n_heads + 2·n_kv_heads][head_dim], + `bias`) at position
    /// `n_past + i`: q rotated → row i of `q_out` (stride `ldq`), k rotated and v → cache
    /// row `n_past + i`. `interleaved`: RoPE pairs (2i, 2i+1), else NeoX. `cos`/`sin`
    /// are [capacity, head_dim/2]. With `norm`, q and k heads are RMS-normalized (after
    /// the bias, before RoPE).
    #[allow(clippy::too_many_arguments)]
    pub fn bias_rope_store(
        &self,
        qkv: &DeviceBuffer<f32>,
        ldqkv: usize,
        bias: Option<&DeviceBuffer<f32>>,
        norm: Option<QkNorm<'_>>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        s: PrefillShape,
        interleaved: bool,
        q_out: &mut DeviceBuffer<f32>,
        ldq: usize,
        cache: &mut KvCache,
    ) -> Result<(), CudaError> {
        let op = "rows_bias_rope_store";
        s.check(op, cache)?;
        let heads = s.n_heads + 2 * s.n_kv_heads;
        let (hd, t) = (s.head_dim, s.t);
        let half = (s.n_past + t) * hd / 2;
        if ldqkv < heads * hd
            || ldq < s.n_heads * hd
            || qkv.len() < (t - 1) * ldqkv + heads * hd
            || bias.is_some_and(|b| b.len() < heads * hd)
            || norm.is_some_and(|n| n.q.len() < hd || n.k.len() < hd)
            || q_out.len() < (t - 1) * ldq + s.n_heads * hd
            || cos.len() < half
            || sin.len() < half
        {
            return Err(shape(
                op,
                format!(
                    "qkv {} (ld {ldqkv}) q_out {} (ld {ldq}) tables {}/{}",
                    qkv.len(),
                    q_out.len(),
                    cos.len(),
                    sin.len()
                ),
            ));
        }
        let cfg = LaunchConfig {
            grid_dim: (heads.div_ceil(8) as u32, t as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = &self.rope[hd_index(hd, op)?][usize::from(is_f16(cache))];
        let (ldqkvi, npi, ldqi, nhi, nkvi, il) = (
            int(ldqkv, op)?,
            int(s.n_past, op)?,
            int(ldq, op)?,
            int(s.n_heads, op)?,
            int(s.n_kv_heads, op)?,
            i32::from(interleaved),
        );
        let null = 0u64;
        let st = self.ctx.stream();
        let mut b = st.launch_builder(f);
        b.arg(&qkv.slice).arg(&ldqkvi);
        match bias {
            Some(x) => b.arg(&x.slice),
            None => b.arg(&null),
        };
        let eps = norm.map_or(0.0f32, |n| n.eps);
        match norm {
            Some(n) => b.arg(&n.q.slice).arg(&n.k.slice),
            None => b.arg(&null).arg(&null),
        };
        b.arg(&eps);
        b.arg(&cos.slice)
            .arg(&sin.slice)
            .arg(&npi)
            .arg(&mut q_out.slice)
            .arg(&ldqi);
        match cache {
            KvCache::F16 { k, v } => b.arg(&mut k.slice).arg(&mut v.slice),
            KvCache::F32 { k, v } => b.arg(&mut k.slice).arg(&mut v.slice),
        };
        b.arg(&nhi).arg(&nkvi).arg(&il);
        // SAFETY: argument order and types match (null pointers for no bias / norm); reads
        // and writes stay within the sizes checked above and the cache's capacity.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rows_bias_rope_store)"))?;
        Ok(())
    }

    /// `t` rows reading `read` values each at stride `ldx` from `x_len` values, writing
    /// `cols` prepared values per row at stride `pcols`.
    #[allow(clippy::too_many_arguments)]
    fn check_prep(
        op: &'static str,
        x_len: usize,
        ldx: usize,
        t: usize,
        read: usize,
        cols: usize,
        pcols: usize,
        out: &XPrep,
    ) -> Result<(), CudaError> {
        if t == 0
            || cols == 0
            || ldx < read
            || !pcols.is_multiple_of(32)
            || pcols < cols
            || x_len < (t - 1) * ldx + read
            || out.cols() < t * pcols
        {
            return Err(shape(
                op,
                format!(
                    "{t} rows of {cols} (ld {ldx}, {x_len} values) into prep rows of {pcols} ({} values)",
                    out.cols()
                ),
            ));
        }
        Ok(())
    }

    /// One block of 256 threads per row.
    pub(super) fn rows_cfg(t: usize, op: &'static str) -> Result<LaunchConfig, CudaError> {
        Ok(LaunchConfig {
            grid_dim: (
                u32::try_from(t).map_err(|_| shape(op, format!("{t} rows")))?,
                1,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
    }

    /// RMSNorm (`weight`, `eps`) of `t` rows of `x` (stride `ldx`, `weight.len()` values,
    /// a multiple of 32) into `out`'s x preparation, row i at values `i·pcols..` (zeros
    /// from the row's end to `pcols`).
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_prep(
        &self,
        x: &DeviceBuffer<f32>,
        ldx: usize,
        t: usize,
        weight: &DeviceBuffer<f32>,
        eps: f32,
        pcols: usize,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "rows_rms_norm_prep";
        let dim = weight.len();
        Self::check_prep(op, x.len(), ldx, t, dim, dim, pcols, out)?;
        if !dim.is_multiple_of(32) {
            return Err(shape(op, format!("dim {dim} not a multiple of 32")));
        }
        let (ldxi, di, pci) = (int(ldx, op)?, int(dim, op)?, int(pcols, op)?);
        let cfg = Self::rows_cfg(t, op)?;
        let st = self.ctx.stream();
        let mut b = st.launch_builder(&self.rms);
        b.arg(&x.slice)
            .arg(&ldxi)
            .arg(&weight.slice)
            .arg(&eps)
            .arg(&di)
            .arg(&pci)
            .arg(&mut out.hl.slice)
            .arg(&mut out.xs.slice);
        // SAFETY: argument order and types match the kernel; `check_prep` bounded every
        // row read and the t·pcols prepared values written.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(prefill rows)"))?;
        Ok(())
    }

    /// silu(gate)·up over `t` rows of fused gate|up (stride `ldgu`, `n` gate then `n` up
    /// values) into `out`'s x preparation (row stride `pcols`, zeros past `n`).
    pub fn swiglu_prep(
        &self,
        gu: &DeviceBuffer<f32>,
        ldgu: usize,
        t: usize,
        n: usize,
        pcols: usize,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "rows_swiglu_prep";
        Self::check_prep(op, gu.len(), ldgu, t, 2 * n, n, pcols, out)?;
        let (ldi, ni, pci) = (int(ldgu, op)?, int(n, op)?, int(pcols, op)?);
        let cfg = Self::rows_cfg(t, op)?;
        let st = self.ctx.stream();
        let mut b = st.launch_builder(&self.swiglu);
        b.arg(&gu.slice)
            .arg(&ldi)
            .arg(&ni)
            .arg(&pci)
            .arg(&mut out.hl.slice)
            .arg(&mut out.xs.slice);
        // SAFETY: argument order and types match the kernel; `check_prep` bounded every
        // row read and the t·pcols prepared values written.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(prefill rows)"))?;
        Ok(())
    }

    /// `t` rows of `cols` values of `x` (stride `ldx`) into `out`'s x preparation (row
    /// stride `pcols`, zeros past `cols`).
    pub fn prep_rows(
        &self,
        x: &DeviceBuffer<f32>,
        ldx: usize,
        t: usize,
        cols: usize,
        pcols: usize,
        out: &mut XPrep,
    ) -> Result<(), CudaError> {
        let op = "rows_prep";
        Self::check_prep(op, x.len(), ldx, t, cols, cols, pcols, out)?;
        let (ldi, ci, pci) = (int(ldx, op)?, int(cols, op)?, int(pcols, op)?);
        let cfg = Self::rows_cfg(t, op)?;
        let st = self.ctx.stream();
        let mut b = st.launch_builder(&self.prep);
        b.arg(&x.slice)
            .arg(&ldi)
            .arg(&ci)
            .arg(&pci)
            .arg(&mut out.hl.slice)
            .arg(&mut out.xs.slice);
        // SAFETY: argument order and types match the kernel; `check_prep` bounded every
        // row read and the t·pcols prepared values written.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(prefill rows)"))?;
        Ok(())
    }
}
