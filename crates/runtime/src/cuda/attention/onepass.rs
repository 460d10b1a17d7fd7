//! The one-launch attention decode (`kernels/attention_onepass.cu`): q from a buffer
//! ([`AttentionDecode::decode`] with [`super::AttnKernel::OnePass`]) or built in the
//! kernel's prologue from the fused q|k|v projection together with the KV store
//! ([`AttentionDecode::decode_qkv`], replacing `qk_norm_rope_store` /
//! `bias_rope_store` + attention).
//!
//! Key design choice: the grid is one wave of blocks (the kernel's occupancy × the SM
//! count, over the kv heads), independent of the cache capacity; the kernel sizes each
//! block's key range from the length it reads on the device, and the last block of a
//! kv head (a counter at the end of the partials buffer) merges the partials, so a
//! captured graph replays at any position with a single launch per layer.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use cudarc::driver::{DriverError, sys};

use super::{AttentionDecode, AttnOut, COUNTERS, KvCache, attn_partials_len, shape};
use crate::cuda::context::{CudaContext, DeviceBuffer};
use crate::cuda::launch::{arg_ptr, launch_ex};
use crate::cuda::{CudaError, driver_err};

const THREADS: u32 = 256;
/// Most blocks per kv head (the merge's shared weights, `A1_MAX_SPLITS`).
const MAX_SPLITS: usize = 64;

/// The kernels and their occupancy.
pub(super) struct OnePass {
    /// [head dim 64?][f16?][group - 1].
    f: [[[CudaFunction; 8]; 2]; 2],
    /// Resident blocks per SM of each kernel.
    occ: [[[u32; 8]; 2]; 2],
    sms: usize,
}

/// The fused prologue's inputs: the q|k|v projection [(n_heads + 2·n_kv_heads)·hd] and
/// what turns it into q, the new key and value.
pub struct QkvRope<'a> {
    pub qkv: &'a DeviceBuffer<f32>,
    /// q|k|v bias, same layout (Qwen2), added first.
    pub bias: Option<&'a DeviceBuffer<f32>>,
    /// (q norm weight [hd], k norm weight [hd], eps): per-head RMSNorm (Qwen3).
    pub qk_norm: Option<(&'a DeviceBuffer<f32>, &'a DeviceBuffer<f32>, f32)>,
    /// RoPE tables [capacity, hd/2] ([`crate::cuda::rope_tables`]).
    pub cos: &'a DeviceBuffer<f32>,
    pub sin: &'a DeviceBuffer<f32>,
    /// Pairs (2i, 2i+1) (GGUF Llama) instead of NeoX (i, i + hd/2).
    pub interleaved: bool,
}

/// Shapes and scalars of one launch.
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub(super) capacity: usize,
    pub(super) n_heads: usize,
    pub(super) n_kv_heads: usize,
    pub(super) head_dim: usize,
    pub(super) len_add: i32,
    pub(super) scale: f32,
}

impl OnePass {
    pub(super) fn load(ctx: &CudaContext, m: &Arc<CudaModule>) -> Result<OnePass, CudaError> {
        let sms = ctx
            .raw()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_err("cuDeviceGetAttribute"))?
            .max(1) as usize;
        let set = |t: &str, hd: usize| -> Result<([CudaFunction; 8], [u32; 8]), CudaError> {
            let mut occ = [1u32; 8];
            let mut v = Vec::with_capacity(8);
            for (g, o) in (1..=8).zip(occ.iter_mut()) {
                let f = m
                    .load_function(&format!("attn1_{t}_g{g}_hd{hd}"))
                    .map_err(driver_err("cuModuleGetFunction"))?;
                *o = f
                    .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                    .map_err(driver_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
                    .max(1);
                v.push(f);
            }
            let f = v
                .try_into()
                .map_err(|_| shape("eight group kernels expected".into()))?;
            Ok((f, occ))
        };
        let (a, oa) = set("f32", 128)?;
        let (b, ob) = set("f16", 128)?;
        let (c, oc) = set("f32", 64)?;
        let (d, od) = set("f16", 64)?;
        Ok(OnePass {
            f: [[a, b], [c, d]],
            occ: [[oa, ob], [oc, od]],
            sms,
        })
    }
}

/// Device pointers of one launch (0 = absent).
#[derive(Default)]
struct Ptrs {
    q: u64,
    qkv: u64,
    bias: u64,
    qw: u64,
    kw: u64,
    cos: u64,
    sin: u64,
    k: u64,
    v: u64,
    part: u64,
    cnt: u64,
    len: u64,
    out: u64,
    xhl: u64,
    xs: u64,
}

/// `cuLaunchKernel` (plain stream order).
///
/// # Safety
/// As [`launch_ex`]'s, without the PDL requirement.
unsafe fn launch_plain(
    s: &Arc<CudaStream>,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe {
        sys::cuLaunchKernel(
            f.cu_function(),
            cfg.grid_dim.0,
            cfg.grid_dim.1,
            cfg.grid_dim.2,
            cfg.block_dim.0,
            cfg.block_dim.1,
            cfg.block_dim.2,
            cfg.shared_mem_bytes,
            s.cu_stream(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
}

impl AttentionDecode {
    /// Checks shapes common to both entry points; returns (head-dim index, group index).
    fn onepass_check(
        &self,
        cache: &KvCache,
        d: Dims,
        partials: &DeviceBuffer<f32>,
        out: &AttnOut<'_>,
    ) -> Result<(usize, usize), CudaError> {
        let (nh, nkv, hd, cap) = (d.n_heads, d.n_kv_heads, d.head_dim, d.capacity);
        let group = if nkv > 0 && nh.is_multiple_of(nkv) {
            nh / nkv
        } else {
            0
        };
        if !(1..=8).contains(&group) {
            return Err(shape(format!(
                "{nh} heads over {nkv} kv heads: the group must be 1..=8"
            )));
        }
        let hi = match hd {
            128 => 0,
            64 => 1,
            _ => return Err(shape(format!("head_dim {hd}: 64 or 128 only"))),
        };
        if cap == 0
            || nkv > COUNTERS
            || i32::try_from(cap).is_err()
            || cache.len() < cap * nkv * hd
            || match out {
                AttnOut::F32(o) => o.len() < nh * hd,
                AttnOut::Prep(p) => p.cols() < nh * hd,
            }
            || partials.len() < attn_partials_len(nh, cap)
        {
            return Err(shape(format!(
                "capacity {cap}, cache {}, partials {}, heads {nh}/{nkv}",
                cache.len(),
                partials.len()
            )));
        }
        Ok((hi, group - 1))
    }

    /// Blocks per kv head: one wave of the kernel (or `splits`), at most 64 and at most
    /// what the partials buffer holds (capacity / 32 per head).
    fn onepass_splits(&self, hi: usize, f16: bool, gi: usize, d: Dims) -> usize {
        let one = self.one();
        let occ = one.occ[hi][usize::from(f16)][gi] as usize;
        let wave = (one.sms * occ / d.n_kv_heads).max(1);
        self.splits
            .unwrap_or(wave)
            .clamp(1, MAX_SPLITS)
            .min(d.capacity.div_ceil(super::KEYS_PER_BLOCK))
    }

    /// `decode_hd` with the one-pass kernel (shapes of q checked here).
    pub(super) fn onepass_q(
        &self,
        q: &DeviceBuffer<f32>,
        cache: &KvCache,
        d: Dims,
        lenp: &DeviceBuffer<i32>,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        let (hi, gi) = self.onepass_check(cache, d, partials, &out)?;
        if q.len() < d.n_heads * d.head_dim || lenp.is_empty() {
            return Err(shape(format!("q {} for {} heads", q.len(), d.n_heads)));
        }
        let s = self.ctx.stream();
        let mut p = Ptrs::default();
        let (qp, _g0) = q.slice.device_ptr(s);
        p.q = qp;
        let ((kp, _g1), (vp, _g2)) = match cache {
            KvCache::F16 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
            KvCache::F32 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
        };
        (p.k, p.v) = (kp, vp);
        let f16 = matches!(cache, KvCache::F16 { .. });
        self.onepass_launch(p, hi, f16, gi, d, lenp, partials, out, false, 0.0)
    }

    /// Attention for the token at position `*pos` straight from the q|k|v projection:
    /// per block, q heads (+ bias) RMSNorm'd ([`QkvRope::qk_norm`]) and rotated; the
    /// block holding the new key also stores k and v in cache row `*pos` (clamped to
    /// capacity − 1) and attends over keys `0..=*pos`. Replaces `qk_norm_rope_store` (or
    /// `RopeStore::bias_rope_store`) followed by [`Self::decode_hd`] with `len_add` 1;
    /// always the one-pass kernel. The tables and cache hold `capacity` rows.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_qkv(
        &self,
        src: &QkvRope<'_>,
        cache: &mut KvCache,
        capacity: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        pos: &DeviceBuffer<i32>,
        scale: f32,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        let d = Dims {
            capacity,
            n_heads,
            n_kv_heads,
            head_dim,
            len_add: 1,
            scale,
        };
        let (hi, gi) = self.onepass_check(cache, d, partials, &out)?;
        let hd = head_dim;
        let heads = n_heads + 2 * n_kv_heads;
        if src.qkv.len() < heads * hd
            || src.bias.is_some_and(|b| b.len() < heads * hd)
            || src
                .qk_norm
                .is_some_and(|(qn, kn, _)| qn.len() < hd || kn.len() < hd)
            || src.cos.len() < capacity * hd / 2
            || src.sin.len() < capacity * hd / 2
            || pos.is_empty()
        {
            return Err(shape(format!(
                "qkv {} tables {}/{} for {heads} heads × {hd}, capacity {capacity}",
                src.qkv.len(),
                src.cos.len(),
                src.sin.len()
            )));
        }
        let s = self.ctx.stream();
        let mut p = Ptrs::default();
        let (a, _g0) = src.qkv.slice.device_ptr(s);
        p.qkv = a;
        let gb = src.bias.map(|b| b.slice.device_ptr(s));
        p.bias = gb.as_ref().map_or(0, |g| g.0);
        let gn = src
            .qk_norm
            .map(|(qn, kn, _)| (qn.slice.device_ptr(s), kn.slice.device_ptr(s)));
        if let Some(((qp, _), (kp, _))) = &gn {
            (p.qw, p.kw) = (*qp, *kp);
        }
        let eps = src.qk_norm.map_or(0.0, |n| n.2);
        let (cp, _g1) = src.cos.slice.device_ptr(s);
        let (sp, _g2) = src.sin.slice.device_ptr(s);
        (p.cos, p.sin) = (cp, sp);
        let f16 = matches!(cache, KvCache::F16 { .. });
        let ((kp, _g3), (vp, _g4)) = match cache {
            KvCache::F16 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
            KvCache::F32 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
        };
        (p.k, p.v) = (kp, vp);
        self.onepass_launch(p, hi, f16, gi, d, pos, partials, out, src.interleaved, eps)
    }

    /// Fills the partials, counter, length and output pointers and launches.
    #[allow(clippy::too_many_arguments)]
    fn onepass_launch(
        &self,
        mut p: Ptrs,
        hi: usize,
        f16: bool,
        gi: usize,
        d: Dims,
        lenp: &DeviceBuffer<i32>,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
        interleaved: bool,
        eps: f32,
    ) -> Result<(), CudaError> {
        let s = self.ctx.stream();
        let cnt_off = ((partials.len() - COUNTERS) * 4) as u64;
        let (pp, _g0) = partials.slice.device_ptr_mut(s);
        (p.part, p.cnt) = (pp, pp + cnt_off);
        let (lp, _g1) = lenp.slice.device_ptr(s);
        p.len = lp;
        let mut guards = Vec::new();
        match out {
            AttnOut::F32(o) => {
                let (op, g) = o.slice.device_ptr_mut(s);
                p.out = op;
                guards.push(g);
            }
            AttnOut::Prep(x) => {
                let (hp, g) = x.hl.slice.device_ptr_mut(s);
                p.xhl = hp;
                guards.push(g);
                let (xp, g) = x.xs.slice.device_ptr_mut(s);
                p.xs = xp;
                guards.push(g);
            }
        }
        let splits = self.onepass_splits(hi, f16, gi, d);
        let cfg = LaunchConfig {
            grid_dim: (splits as u32, d.n_kv_heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // Checked in `onepass_check`: capacity and kv heads fit i32.
        let cap = d.capacity as i32;
        let nkv = d.n_kv_heads as i32;
        let il = i32::from(interleaved);
        let mk = i32::try_from(self.min_keys.max(1)).unwrap_or(i32::MAX);
        let light = i32::from(self.light_fence);
        let mut args = [
            arg_ptr(&p.q),
            arg_ptr(&p.qkv),
            arg_ptr(&p.bias),
            arg_ptr(&p.qw),
            arg_ptr(&p.kw),
            arg_ptr(&p.cos),
            arg_ptr(&p.sin),
            arg_ptr(&p.k),
            arg_ptr(&p.v),
            arg_ptr(&p.part),
            arg_ptr(&p.cnt),
            arg_ptr(&p.len),
            arg_ptr(&d.len_add),
            arg_ptr(&cap),
            arg_ptr(&nkv),
            arg_ptr(&il),
            arg_ptr(&mk),
            arg_ptr(&light),
            arg_ptr(&eps),
            arg_ptr(&d.scale),
            arg_ptr(&p.out),
            arg_ptr(&p.xhl),
            arg_ptr(&p.xs),
        ];
        let f = &self.one().f[hi][usize::from(f16)][gi];
        // SAFETY: the kernel's parameters in order and type (pointers as u64, ints as
        // i32, floats as f32). The callers checked every buffer against the shapes:
        // the cache and tables hold `capacity` rows and the kernel clamps the length to
        // 1..=capacity; the partials hold n_heads × splits × (hd + 4) values (splits ≤
        // capacity / 32) before the counters; q / qkv / out / the x prep hold n_heads ×
        // hd values (qkv n_heads + 2 n_kv heads). The kernel waits (griddepcontrol.wait)
        // before reading anything.
        unsafe {
            if self.pdl {
                launch_ex(s, f, cfg, &mut args)
            } else {
                launch_plain(s, f, cfg, &mut args)
            }
        }
        .map_err(driver_err("cuLaunchKernel(attn1)"))?;
        drop(guards);
        Ok(())
    }
}
