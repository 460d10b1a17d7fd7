//! The two-pass attention decode fed by the q|k|v projection: the split kernel builds
//! q (+ bias, q norm, RoPE) in its prologue, and the warp whose keys hold the new
//! position builds, stores and uses the new key and value (`attn_decode_qkv_*` in
//! `kernels/attention.cu`); then the usual combine.
//!
//! Key design choice: the q/k norm, RoPE and KV store move into the split kernel, where
//! they run while its K/V rows are in flight, instead of a launch of their own before
//! it: a decode step has one launch fewer per layer, and the split's grid and partials
//! are [`AttentionDecode::decode_hd`]'s, so a captured graph replays at any position.

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

use super::onepass::Dims;
use super::{AttentionDecode, AttnOut, KEYS_PER_BLOCK, KvCache, MAX_SPLITS, QkvRope, shape};
use crate::cuda::context::DeviceBuffer;
use crate::cuda::launch::{arg_ptr, launch_raw};
use crate::cuda::{CudaError, driver_err};

impl AttentionDecode {
    /// [`Self::decode_qkv`] with the two-pass kernels; the caller checked the shapes of
    /// `src`, the cache, the partials and `out` (`ix` = head-dim and group indices).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn split_qkv(
        &self,
        src: &QkvRope<'_>,
        cache: &mut KvCache,
        d: Dims,
        ix: (usize, usize),
        pos: &DeviceBuffer<i32>,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        let (hi, gi) = ix;
        let splits = d.capacity.div_ceil(KEYS_PER_BLOCK);
        if splits > MAX_SPLITS {
            return Err(shape(format!(
                "capacity {}: the two-pass kernels take at most {} keys",
                d.capacity,
                MAX_SPLITS * KEYS_PER_BLOCK
            )));
        }
        let int = |v: usize, what: &str| i32::try_from(v).map_err(|_| shape(what.into()));
        let (cap, nkv, nh) = (
            int(d.capacity, "capacity")?,
            int(d.n_kv_heads, "n_kv_heads")?,
            int(d.n_heads, "n_heads")?,
        );
        let ns = int(splits, "splits")?;
        let eps = src.qk_norm.map_or(0.0f32, |n| n.2);
        let interleaved = i32::from(src.interleaved);
        let s = self.ctx.stream();
        let (qkv, _g0) = src.qkv.slice.device_ptr(s);
        let gb = src.bias.map(|b| b.slice.device_ptr(s));
        let bias = gb.as_ref().map_or(0, |g| g.0);
        let gn = src
            .qk_norm
            .map(|(qn, kn, _)| (qn.slice.device_ptr(s), kn.slice.device_ptr(s)));
        let (qw, kw) = gn.as_ref().map_or((0, 0), |((q, _), (k, _))| (*q, *k));
        let (cos, _g1) = src.cos.slice.device_ptr(s);
        let (sin, _g2) = src.sin.slice.device_ptr(s);
        let f16 = matches!(cache, KvCache::F16 { .. });
        let ((kp, _g3), (vp, _g4)) = match cache {
            KvCache::F16 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
            KvCache::F32 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
        };
        let (pp, _g5) = partials.slice.device_ptr_mut(s);
        let (lp, _g6) = pos.slice.device_ptr(s);
        let mut args = [
            arg_ptr(&qkv),
            arg_ptr(&bias),
            arg_ptr(&qw),
            arg_ptr(&kw),
            arg_ptr(&cos),
            arg_ptr(&sin),
            arg_ptr(&kp),
            arg_ptr(&vp),
            arg_ptr(&pp),
            arg_ptr(&lp),
            arg_ptr(&cap),
            arg_ptr(&nkv),
            arg_ptr(&nh),
            arg_ptr(&d.scale),
            arg_ptr(&eps),
            arg_ptr(&interleaved),
        ];
        let cfg = LaunchConfig {
            grid_dim: (ns as u32, nkv as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = &self.split_qkv[hi][usize::from(f16)][gi];
        // SAFETY: the kernel's parameters in order with matching types; the cache, the
        // tables and the projection hold what `decode_qkv` checked; the kernel clamps
        // the key count to the capacity and stores row *pos only below it.
        unsafe { launch_raw(s, f, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(attn_decode_qkv)"))?;
        self.combine_launch(pp, ns, out, d.n_heads, hi, self.pdl)
    }
}
