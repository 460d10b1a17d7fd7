//! A relative-position transformer encoder's non-convolution ops on the GPU
//! (`kernels/rel_encoder.cu`): multi-head self-attention with windowed relative keys
//! and values ([`crate::cpu::attention_rel_window`]) and the layer norm over channels
//! ([`crate::cpu::layer_norm_channels`]), on `[C, T]` f32 tensors of one unpadded
//! sequence — with [`super::Conv1dOps`] for the 1×1 and FFN convolutions, a VITS text
//! encoder runs here unchanged.
//!
//! Key design choice: one thread per output element and plain fixed-order loops (the
//! tensors are a sentence's phonemes × 192 channels), with the attention in three
//! launches over a `[heads, T, T]` score scratch (scores, row softmax, weighted sum),
//! so every kernel is short enough to check by reading.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::cpu::RelAttnShape;

const SRC: &str = include_str!("../../kernels/rel_encoder.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "rel_encoder",
    src: SRC,
};
const THREADS: u32 = 256;

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

/// One thread per element of `n`.
fn grid(n: usize, op: &'static str) -> Result<LaunchConfig, CudaError> {
    let blocks = u32::try_from(n.div_ceil(THREADS as usize))
        .map_err(|_| shape(op, format!("{n} threads")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The encoder kernels of one context.
pub struct RelEncoderOps {
    ctx: Arc<CudaContext>,
    scores: CudaFunction,
    softmax: CudaFunction,
    out: CudaFunction,
    norm: CudaFunction,
}

impl std::fmt::Debug for RelEncoderOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelEncoderOps").finish_non_exhaustive()
    }
}

impl RelEncoderOps {
    /// Compiles (or reads from the disk cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<RelEncoderOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(RelEncoderOps {
            scores: f("rel_scores")?,
            softmax: f("softmax_rows")?,
            out: f("rel_out")?,
            norm: f("ln_channels")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The kernel source (for NVRTC compile checks).
    pub fn source() -> &'static str {
        SRC
    }

    /// `out = attention(q, k, v)` with windowed relative keys `emb_k` and values `emb_v`
    /// (`[2w + 1, d]`, shared by the heads), as [`crate::cpu::attention_rel_window`]:
    /// `q`, `k`, `v`, `out` `[heads·d, T]`, `scores` a scratch of
    /// [`RelAttnShape::scratch_len`]. `out` and `scores` must not alias the inputs.
    #[allow(clippy::too_many_arguments)]
    pub fn rel_attention(
        &self,
        q: &DeviceBuffer<f32>,
        k: &DeviceBuffer<f32>,
        v: &DeviceBuffer<f32>,
        emb_k: &DeviceBuffer<f32>,
        emb_v: &DeviceBuffer<f32>,
        s: RelAttnShape,
        scores: &mut DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "rel_attention";
        let n = s.heads * s.head_dim * s.len;
        let ne = (2 * s.window + 1) * s.head_dim;
        let ns = s.scratch_len();
        if q.len() < n
            || k.len() < n
            || v.len() < n
            || out.len() < n
            || emb_k.len() < ne
            || emb_v.len() < ne
            || scores.len() < ns
        {
            return Err(shape(
                op,
                format!(
                    "{s:?}: q {} k {} v {} out {} emb {} / {} scores {}",
                    q.len(),
                    k.len(),
                    v.len(),
                    out.len(),
                    emb_k.len(),
                    emb_v.len(),
                    scores.len()
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let (h, d, t, w) = (
            int(s.heads, op)?,
            int(s.head_dim, op)?,
            int(s.len, op)?,
            int(s.window, op)?,
        );
        let rows = int(s.heads * s.len, op)?;
        let scale = 1.0 / (s.head_dim as f32).sqrt();
        let mut b = self.ctx.stream().launch_builder(&self.scores);
        b.arg(&q.slice)
            .arg(&k.slice)
            .arg(&emb_k.slice)
            .arg(&mut scores.slice)
            .arg(&h)
            .arg(&d)
            .arg(&t)
            .arg(&w)
            .arg(&scale);
        // SAFETY: argument order and types match `rel_scores`; q and k hold heads·d·T
        // values, emb_k (2w + 1)·d and scores heads·T·T (checked); scores is a distinct
        // buffer (borrowed mutably).
        unsafe { b.launch(grid(ns, op)?) }.map_err(driver_err("cuLaunchKernel(rel_scores)"))?;
        let mut b = self.ctx.stream().launch_builder(&self.softmax);
        b.arg(&mut scores.slice).arg(&rows).arg(&t);
        // SAFETY: argument order and types match `softmax_rows`; scores holds rows·T
        // values (checked), T ≥ 1 (n > 0).
        unsafe { b.launch(grid(s.heads * s.len, op)?) }
            .map_err(driver_err("cuLaunchKernel(softmax_rows)"))?;
        let mut b = self.ctx.stream().launch_builder(&self.out);
        b.arg(&scores.slice)
            .arg(&v.slice)
            .arg(&emb_v.slice)
            .arg(&mut out.slice)
            .arg(&h)
            .arg(&d)
            .arg(&t)
            .arg(&w);
        // SAFETY: argument order and types match `rel_out`; scores holds heads·T·T
        // values, v and out heads·d·T, emb_v (2w + 1)·d (checked); out is a distinct
        // buffer (borrowed mutably).
        unsafe { b.launch(grid(n, op)?) }.map_err(driver_err("cuLaunchKernel(rel_out)"))?;
        Ok(())
    }

    /// `out = LN(x[channels, len])` over the channel axis with `gamma` / `beta`
    /// (`[channels]`), as [`crate::cpu::layer_norm_channels`]. `out` must not alias `x`.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_channels(
        &self,
        x: &DeviceBuffer<f32>,
        channels: usize,
        len: usize,
        gamma: &DeviceBuffer<f32>,
        beta: &DeviceBuffer<f32>,
        eps: f32,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "ln_channels";
        let n = channels * len;
        if x.len() < n || out.len() < n || gamma.len() < channels || beta.len() < channels {
            return Err(shape(
                op,
                format!(
                    "[{channels}, {len}]: x {}, out {}, gamma {}, beta {}",
                    x.len(),
                    out.len(),
                    gamma.len(),
                    beta.len()
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let (c, t) = (int(channels, op)?, int(len, op)?);
        let mut b = self.ctx.stream().launch_builder(&self.norm);
        b.arg(&x.slice)
            .arg(&gamma.slice)
            .arg(&beta.slice)
            .arg(&mut out.slice)
            .arg(&c)
            .arg(&t)
            .arg(&eps);
        // SAFETY: argument order and types match `ln_channels`; x and out hold
        // channels·len values, gamma and beta channels (checked); out is a distinct
        // buffer (borrowed mutably).
        unsafe { b.launch(grid(len, op)?) }.map_err(driver_err("cuLaunchKernel(ln_channels)"))?;
        Ok(())
    }
}
