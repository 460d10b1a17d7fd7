//! The fused small steps of a Qwen3-style decode (`kernels/decode.cu`): q/k RMSNorm +
//! NeoX RoPE + KV-cache store, SwiGLU over a fused gate|up projection, and the
//! on-device position counter.
//!
//! Key design choice: the position lives in a one-value device buffer that the kernels
//! read, so one decode step is captured once as a CUDA graph and replayed per token.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::attention::{ATTN_HEAD_DIM, KvCache};
use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::launch::{arg_ptr, launch_ex};
use super::{CudaError, driver_err};

const SRC: &str = concat!(
    include_str!("../../kernels/prep32.cuh"),
    include_str!("../../kernels/decode.cu")
);
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "decode",
    src: SRC,
};

/// The decode-step kernels of one context.
pub struct DecodeOps {
    pub(super) ctx: Arc<CudaContext>,
    /// Launch `qk_norm_rope_store` with programmatic dependent launch (default off).
    pub pdl: bool,
    qk_f16: CudaFunction,
    qk_f32: CudaFunction,
    swiglu: CudaFunction,
    advance: CudaFunction,
    /// `qk_norm_rope_store` over several sequences, [f32 cache, f16 cache].
    pub(super) qk_z: [CudaFunction; 2],
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

impl DecodeOps {
    /// Compiles (or reads from the cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<DecodeOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(DecodeOps {
            qk_f16: f("qk_norm_rope_store_f16")?,
            qk_f32: f("qk_norm_rope_store_f32")?,
            swiglu: f("swiglu_fused")?,
            advance: f("advance_pos")?,
            qk_z: [
                f("qk_norm_rope_store_f32_z")?,
                f("qk_norm_rope_store_f16_z")?,
            ],
            pdl: false,
            ctx: Arc::clone(ctx),
        })
    }

    /// From the fused projection `qkv` [(nh + 2·nkv)·128]: q heads RMSNorm (`q_norm`) +
    /// RoPE → `q_out`; k heads RMSNorm (`k_norm`) + RoPE → cache row `*pos`; v heads →
    /// cache row `*pos`. `cos`/`sin` are [capacity, 64] ([`super::rope_tables`]).
    #[allow(clippy::too_many_arguments)]
    pub fn qk_norm_rope_store(
        &self,
        qkv: &DeviceBuffer<f32>,
        q_norm: &DeviceBuffer<f32>,
        k_norm: &DeviceBuffer<f32>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        pos: &DeviceBuffer<i32>,
        n_heads: usize,
        n_kv_heads: usize,
        eps: f32,
        q_out: &mut DeviceBuffer<f32>,
        cache: &mut KvCache,
    ) -> Result<(), CudaError> {
        let op = "qk_norm_rope_store";
        let hd = ATTN_HEAD_DIM;
        let heads = n_heads + 2 * n_kv_heads;
        let cap = cache.len() / (n_kv_heads.max(1) * hd);
        if n_kv_heads == 0
            || qkv.len() < heads * hd
            || q_out.len() < n_heads * hd
            || q_norm.len() < hd
            || k_norm.len() < hd
            || cos.len() < cap * hd / 2
            || sin.len() < cap * hd / 2
            || pos.is_empty()
        {
            return Err(shape(
                op,
                format!(
                    "qkv {} q_out {} heads {n_heads}/{n_kv_heads} tables {}/{} cache {}",
                    qkv.len(),
                    q_out.len(),
                    cos.len(),
                    sin.len(),
                    cache.len()
                ),
            ));
        }
        let nh = i32::try_from(n_heads).map_err(|_| shape(op, "n_heads".into()))?;
        let nkv = i32::try_from(n_kv_heads).map_err(|_| shape(op, "n_kv_heads".into()))?;
        let cfg = LaunchConfig {
            grid_dim: (heads as u32, 1, 1),
            block_dim: (hd as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let f = match cache {
            KvCache::F16 { .. } => &self.qk_f16,
            KvCache::F32 { .. } => &self.qk_f32,
        };
        if self.pdl {
            use cudarc::driver::{DevicePtr, DevicePtrMut};
            let (p0, _g0) = qkv.slice.device_ptr(s);
            let (p1, _g1) = q_norm.slice.device_ptr(s);
            let (p2, _g2) = k_norm.slice.device_ptr(s);
            let (p3, _g3) = cos.slice.device_ptr(s);
            let (p4, _g4) = sin.slice.device_ptr(s);
            let (p5, _g5) = pos.slice.device_ptr(s);
            let (p6, _g6) = q_out.slice.device_ptr_mut(s);
            let ((p7, _g7), (p8, _g8)) = match cache {
                KvCache::F16 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
                KvCache::F32 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
            };
            let mut args = [
                arg_ptr(&p0),
                arg_ptr(&p1),
                arg_ptr(&p2),
                arg_ptr(&p3),
                arg_ptr(&p4),
                arg_ptr(&p5),
                arg_ptr(&p6),
                arg_ptr(&p7),
                arg_ptr(&p8),
                arg_ptr(&nh),
                arg_ptr(&nkv),
                arg_ptr(&eps),
            ];
            // SAFETY: as for the builder launch below; the kernel waits for the
            // previous kernel before reading.
            return unsafe { launch_ex(s, f, cfg, &mut args) }
                .map_err(driver_err("cuLaunchKernelEx(qk_norm_rope_store)"));
        }
        let mut b = s.launch_builder(f);
        b.arg(&qkv.slice)
            .arg(&q_norm.slice)
            .arg(&k_norm.slice)
            .arg(&cos.slice)
            .arg(&sin.slice)
            .arg(&pos.slice)
            .arg(&mut q_out.slice);
        match cache {
            KvCache::F16 { k, v } => b.arg(&mut k.slice).arg(&mut v.slice),
            KvCache::F32 { k, v } => b.arg(&mut k.slice).arg(&mut v.slice),
        };
        b.arg(&nh).arg(&nkv).arg(&eps);
        // SAFETY: types match; the caller keeps *pos < capacity (cache rows and table
        // rows both hold capacity entries).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(qk_norm_rope_store)"))?;
        Ok(())
    }

    /// out[i] = silu(gu[i])·gu[n + i] for i < n = out.len().
    pub fn swiglu_fused(
        &self,
        gu: &DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let n = out.len();
        if gu.len() < 2 * n {
            return Err(shape(
                "swiglu_fused",
                format!("gate|up {} for {n} outputs", gu.len()),
            ));
        }
        let ni = i32::try_from(n).map_err(|_| shape("swiglu_fused", "n".into()))?;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256).clamp(1, 1024) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.swiglu);
        b.arg(&gu.slice).arg(&mut out.slice).arg(&ni);
        // SAFETY: types match; the grid-stride loop stays below n, gu holds 2n.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(swiglu_fused)"))?;
        Ok(())
    }

    /// *pos += 1 on the device.
    pub fn advance_pos(&self, pos: &mut DeviceBuffer<i32>) -> Result<(), CudaError> {
        if pos.is_empty() {
            return Err(shape("advance_pos", "empty position buffer".into()));
        }
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.advance);
        b.arg(&mut pos.slice);
        // SAFETY: one i32 written by thread 0.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(advance_pos)"))?;
        Ok(())
    }
}
