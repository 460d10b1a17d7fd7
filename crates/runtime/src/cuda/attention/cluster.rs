//! The cluster attention decode (`kernels/attention_cluster.cu`,
//! [`super::AttnKernel::Cluster`]): one launch per layer, q from a buffer.
//!
//! Key design choice: the CS blocks of a thread-block cluster share one kv head and
//! merge their softmax partials through distributed shared memory, so there is no
//! partials buffer, counter, fence or second launch, and the grid (CS, n_kv) does not
//! depend on the cache's capacity. Hopper (sm_90) and later only: on older devices the
//! kernels are absent and [`Cluster::load`] returns `None`.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaFunction, CudaModule, DevicePtr, DevicePtrMut, LaunchConfig};

use super::{AttnOut, KvCache, shape};
use crate::cuda::context::{CudaContext, DeviceBuffer};
use crate::cuda::launch::{arg_ptr, launch_raw};
use crate::cuda::{CudaError, driver_err};

/// Threads per block (8 warps of 8 keys per round).
const THREADS: u32 = 256;
/// The cluster sizes built: 8 (portable) and 16 (non-portable, allowed per function).
pub const CLUSTER_SIZES: [usize; 2] = [8, 16];

/// The kernels: [cluster 16?][prep out?][f16?][group - 1].
pub(super) struct Cluster {
    f: Box<[[[[CudaFunction; 8]; 2]; 2]; 2]>,
}

/// Shapes and scalars of one launch (checked by the caller).
pub(super) struct ClusterLaunch {
    pub(super) cluster: usize,
    pub(super) capacity: i32,
    pub(super) n_heads: usize,
    pub(super) n_kv_heads: i32,
    pub(super) len_add: i32,
    pub(super) scale: f32,
    pub(super) pdl: bool,
}

impl Cluster {
    /// The kernels of module `m`, or `None` before compute capability 9.0.
    pub(super) fn load(
        ctx: &CudaContext,
        m: &Arc<CudaModule>,
    ) -> Result<Option<Cluster>, CudaError> {
        if ctx.compute_capability().0 < 9 {
            return Ok(None);
        }
        let mut all = Vec::with_capacity(2);
        for cs in CLUSTER_SIZES {
            let mut by_out = Vec::with_capacity(2);
            for suf in ["", "_prep"] {
                let mut by_t = Vec::with_capacity(2);
                for t in ["f32", "f16"] {
                    let mut v = Vec::with_capacity(8);
                    for g in 1..=8 {
                        let f = m
                            .load_function(&format!("attn_cluster{cs}_{t}_g{g}{suf}"))
                            .map_err(driver_err("cuModuleGetFunction"))?;
                        if cs > 8 {
                            f.set_attribute(
                                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                1,
                            )
                            .map_err(driver_err("cuFuncSetAttribute"))?;
                        }
                        v.push(f);
                    }
                    by_t.push(arr(v)?);
                }
                by_out.push(arr(by_t)?);
            }
            all.push(arr(by_out)?);
        }
        Ok(Some(Cluster {
            f: Box::new(arr(all)?),
        }))
    }

    /// out = attention of q over the cache's first `*lenp + len_add` keys, one launch.
    pub(super) fn launch(
        &self,
        ctx: &CudaContext,
        q: &DeviceBuffer<f32>,
        cache: &KvCache,
        lenp: &DeviceBuffer<i32>,
        d: &ClusterLaunch,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        let ci = CLUSTER_SIZES
            .iter()
            .position(|&c| c == d.cluster)
            .ok_or_else(|| shape(format!("cluster size {}: 8 or 16", d.cluster)))?;
        let group = d.n_heads / d.n_kv_heads.max(1) as usize;
        let gi = group - 1;
        let f16 = matches!(cache, KvCache::F16 { .. });
        let prep = matches!(out, AttnOut::Prep(_));
        let f = &self.f[ci][usize::from(prep)][usize::from(f16)][gi];
        let s = ctx.stream();
        let cfg = LaunchConfig {
            grid_dim: (d.cluster as u32, d.n_kv_heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (qp, _g0) = q.slice.device_ptr(s);
        let ((kp, _g1), (vp, _g2)) = match cache {
            KvCache::F16 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
            KvCache::F32 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
        };
        let (lp, _g3) = lenp.slice.device_ptr(s);
        let cap = d.capacity;
        let nkv = d.n_kv_heads;
        match out {
            AttnOut::F32(o) => {
                let (op, _g4) = o.slice.device_ptr_mut(s);
                let mut args = [
                    arg_ptr(&qp),
                    arg_ptr(&kp),
                    arg_ptr(&vp),
                    arg_ptr(&op),
                    arg_ptr(&lp),
                    arg_ptr(&d.len_add),
                    arg_ptr(&cap),
                    arg_ptr(&nkv),
                    arg_ptr(&d.scale),
                ];
                // SAFETY: the kernel's parameters in order; the caller checked the
                // cache (capacity rows), q and out (n_heads · 128 values); the kernel
                // clamps the length to 1..=capacity.
                unsafe { launch_raw(s, f, cfg, &mut args, d.pdl) }
            }
            AttnOut::Prep(p) => {
                let (hp, _g4) = p.hl.slice.device_ptr_mut(s);
                let (xp, _g5) = p.xs.slice.device_ptr_mut(s);
                let mut args = [
                    arg_ptr(&qp),
                    arg_ptr(&kp),
                    arg_ptr(&vp),
                    arg_ptr(&hp),
                    arg_ptr(&xp),
                    arg_ptr(&lp),
                    arg_ptr(&d.len_add),
                    arg_ptr(&cap),
                    arg_ptr(&nkv),
                    arg_ptr(&d.scale),
                ];
                // SAFETY: as above; the preparation holds n_heads · 4 blocks of 32.
                unsafe { launch_raw(s, f, cfg, &mut args, d.pdl) }
            }
        }
        .map_err(driver_err("cuLaunchKernelEx(attn_cluster)"))
    }
}

fn arr<T, const N: usize>(v: Vec<T>) -> Result<[T; N], CudaError> {
    v.try_into()
        .map_err(|_| shape(format!("{N} cluster kernels expected")))
}
