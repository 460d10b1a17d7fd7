//! Bias + RoPE + KV-cache store for Llama / Qwen2 decode (`kernels/rope_store.cu`): the
//! step between the fused q|k|v GEMV and attention when the model has no q/k norm.
//!
//! Key design choice: one kernel per (head size, cache type), taking the optional fused
//! q|k|v bias (a null pointer when absent) and the RoPE pair layout as arguments, and
//! reading the position from a one-value device buffer, so a decode step that uses it
//! can be captured once as a CUDA graph.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, DevicePtr, DevicePtrMut, LaunchConfig};

use super::attention::KvCache;
use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::launch::{arg_ptr, launch_ex};
use super::{CudaError, driver_err};

const SRC: &str = concat!(
    include_str!("../../kernels/prep32.cuh"),
    include_str!("../../kernels/rope_store.cu")
);
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "rope_store",
    src: SRC,
};

/// The bias + RoPE + store kernels of one context.
pub struct RopeStore {
    pub(super) ctx: Arc<CudaContext>,
    /// Launch with programmatic dependent launch (default off; the kernel waits for
    /// the previous kernel before reading).
    pub pdl: bool,
    /// [head dim 64?][f16 cache?].
    f: [[CudaFunction; 2]; 2],
    /// The same over several sequences.
    pub(super) f_z: [[CudaFunction; 2]; 2],
}

fn shape(detail: String) -> CudaError {
    CudaError::Shape {
        op: "bias_rope_store",
        detail,
    }
}

impl RopeStore {
    /// Compiles (or reads from the cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<RopeStore, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(RopeStore {
            f: [
                [
                    f("bias_rope_store_f32_hd128")?,
                    f("bias_rope_store_f16_hd128")?,
                ],
                [
                    f("bias_rope_store_f32_hd64")?,
                    f("bias_rope_store_f16_hd64")?,
                ],
            ],
            f_z: [
                [
                    f("bias_rope_store_f32_hd128_z")?,
                    f("bias_rope_store_f16_hd128_z")?,
                ],
                [
                    f("bias_rope_store_f32_hd64_z")?,
                    f("bias_rope_store_f16_hd64_z")?,
                ],
            ],
            pdl: false,
            ctx: Arc::clone(ctx),
        })
    }

    /// From the fused projection `qkv` [(nh + 2·nkv)·head_dim] (+ `bias`, same layout):
    /// q heads rotated at `*pos` → `q_out`; k heads rotated → cache row `*pos`; v heads
    /// → cache row `*pos`. `interleaved`: RoPE pairs (2i, 2i+1) (GGUF Llama), else NeoX
    /// (i, i + head_dim/2). `cos`/`sin` are [capacity, head_dim/2]
    /// ([`super::rope_tables`]). The caller keeps `*pos` below the cache's capacity.
    #[allow(clippy::too_many_arguments)]
    pub fn bias_rope_store(
        &self,
        qkv: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        pos: &DeviceBuffer<i32>,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        interleaved: bool,
        q_out: &mut DeviceBuffer<f32>,
        cache: &mut KvCache,
    ) -> Result<(), CudaError> {
        let hi = match head_dim {
            128 => 0,
            64 => 1,
            _ => return Err(shape(format!("head_dim {head_dim}: 64 or 128 only"))),
        };
        let heads = n_heads + 2 * n_kv_heads;
        let cap = cache.len() / (n_kv_heads.max(1) * head_dim);
        if n_kv_heads == 0
            || qkv.len() < heads * head_dim
            || bias.is_some_and(|b| b.len() < heads * head_dim)
            || q_out.len() < n_heads * head_dim
            || cos.len() < cap * head_dim / 2
            || sin.len() < cap * head_dim / 2
            || pos.is_empty()
        {
            return Err(shape(format!(
                "qkv {} q_out {} heads {n_heads}/{n_kv_heads}×{head_dim} tables {}/{} cache {}",
                qkv.len(),
                q_out.len(),
                cos.len(),
                sin.len(),
                cache.len()
            )));
        }
        let nh = i32::try_from(n_heads).map_err(|_| shape("n_heads".into()))?;
        let nkv = i32::try_from(n_kv_heads).map_err(|_| shape("n_kv_heads".into()))?;
        let il = i32::from(interleaved);
        let cfg = LaunchConfig {
            grid_dim: (heads as u32, 1, 1),
            block_dim: (head_dim as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let f16 = matches!(cache, KvCache::F16 { .. });
        let (p0, _g0) = qkv.slice.device_ptr(s);
        let (p1, _g1) = match bias {
            Some(b) => {
                let (p, g) = b.slice.device_ptr(s);
                (p, Some(g))
            }
            None => (0, None),
        };
        let (p2, _g2) = cos.slice.device_ptr(s);
        let (p3, _g3) = sin.slice.device_ptr(s);
        let (p4, _g4) = pos.slice.device_ptr(s);
        let (p5, _g5) = q_out.slice.device_ptr_mut(s);
        let ((p6, _g6), (p7, _g7)) = match cache {
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
            arg_ptr(&nh),
            arg_ptr(&nkv),
            arg_ptr(&il),
        ];
        let f = &self.f[hi][usize::from(f16)];
        if self.pdl {
            // SAFETY: the kernel's parameters in order and type (device pointers as
            // u64, null for no bias), shapes checked above; it waits before reading.
            return unsafe { launch_ex(s, f, cfg, &mut args) }
                .map_err(driver_err("cuLaunchKernelEx(bias_rope_store)"));
        }
        // SAFETY: as above, a plain launch on the context's stream.
        unsafe {
            cudarc::driver::sys::cuLaunchKernel(
                f.cu_function(),
                cfg.grid_dim.0,
                cfg.grid_dim.1,
                cfg.grid_dim.2,
                cfg.block_dim.0,
                cfg.block_dim.1,
                cfg.block_dim.2,
                0,
                s.cu_stream(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(driver_err("cuLaunchKernel(bias_rope_store)"))
    }
}
