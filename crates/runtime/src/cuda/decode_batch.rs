//! The per-sequence steps of a batched decode, one launch for all sequences: RMSNorm and
//! SwiGLU x preparations, q/k norm or bias + RoPE + KV store, and the two-pass attention
//! (the `_z` kernels in gemv_prep.cu, decode.cu, rope_store.cu and attention.cu).
//!
//! Key design choice: every sequence keeps its own buffers, KV cache and position; a
//! launch takes up to [`SEQ_MAX`] of them as a table of device pointers (`SeqArgs`,
//! passed by value) and runs the batch-1 kernel's body for sequence `blockIdx.z`, so a
//! batched step has the same number of launches whatever its size, and each sequence's
//! numbers are the batch-1 kernel's.

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig, SyncOnDrop};

use super::attention::{
    ATTN_HEAD_DIM, AttentionDecode, KEYS_PER_BLOCK, KvCache, MAX_SPLITS, attn_partials_len,
};
use super::context::DeviceBuffer;
use super::decode::DecodeOps;
use super::gemv::{GemvMma, XPrep};
use super::launch::{arg_ptr, launch_raw};
use super::rope_store::RopeStore;
use super::{CudaError, driver_err};

/// Most sequences one batched launch takes (`SEQ_MAX` in prep32.cuh).
pub const SEQ_MAX: usize = 4;

/// `SeqArgs` as the kernels take it: p[i][z] is sequence z's i-th buffer.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SeqArgsRaw {
    p: [[u64; SEQ_MAX]; 5],
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

/// The batch size of `op`: every per-sequence list as long as the first, 1..=SEQ_MAX.
fn batch_len(op: &'static str, lens: &[usize]) -> Result<usize, CudaError> {
    let n = lens.first().copied().unwrap_or(0);
    if n == 0 || n > SEQ_MAX || lens.iter().any(|&l| l != n) {
        return Err(shape(
            op,
            format!("per-sequence lists of {lens:?} entries (equal, 1..={SEQ_MAX})"),
        ));
    }
    Ok(n)
}

/// Device pointers of a cache's K and V planes.
fn kv_ptrs<'a>(
    cache: &'a mut KvCache,
    s: &'a cudarc::driver::CudaStream,
    g: &mut Vec<SyncOnDrop<'a>>,
) -> (u64, u64) {
    let ((k, gk), (v, gv)) = match cache {
        KvCache::F16 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
        KvCache::F32 { k, v } => (k.slice.device_ptr_mut(s), v.slice.device_ptr_mut(s)),
    };
    g.push(gk);
    g.push(gv);
    (k, v)
}

/// An x preparation's two planes.
fn prep_ptrs<'a>(
    p: &'a mut XPrep,
    s: &'a cudarc::driver::CudaStream,
    g: &mut Vec<SyncOnDrop<'a>>,
) -> (u64, u64) {
    let (h, gh) = p.hl.slice.device_ptr_mut(s);
    let (x, gx) = p.xs.slice.device_ptr_mut(s);
    g.push(gh);
    g.push(gx);
    (h, x)
}

impl GemvMma {
    /// [`Self::rms_norm_prep`] of each `xs[z]` into `outs[z]`, one launch.
    pub fn rms_norm_prep_batch(
        &self,
        xs: &[&DeviceBuffer<f32>],
        weight: &DeviceBuffer<f32>,
        eps: f32,
        outs: &mut [&mut XPrep],
    ) -> Result<(), CudaError> {
        let op = "rms_norm_prep_z";
        let n = batch_len(op, &[xs.len(), outs.len()])?;
        let dim = weight.len();
        if dim == 0
            || !dim.is_multiple_of(32)
            || xs.iter().any(|x| x.len() < dim)
            || outs.iter().any(|o| o.cols() < dim)
        {
            return Err(shape(op, format!("weight {dim}, rows or preps shorter")));
        }
        let d = int(dim, op)?;
        let s = self.ctx().stream();
        let mut g = Vec::new();
        let mut a = SeqArgsRaw::default();
        for (z, x) in xs.iter().enumerate() {
            let (p, gx) = x.slice.device_ptr(s);
            a.p[0][z] = p;
            g.push(gx);
        }
        for (z, o) in outs.iter_mut().enumerate() {
            (a.p[1][z], a.p[2][z]) = prep_ptrs(o, s, &mut g);
        }
        let (wp, _gw) = weight.slice.device_ptr(s);
        let cfg = LaunchConfig {
            grid_dim: (dim.div_ceil(128) as u32, 1, n as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [arg_ptr(&a), arg_ptr(&wp), arg_ptr(&eps), arg_ptr(&d)];
        // SAFETY: the kernel's parameters in order and type; per sequence dim values
        // read, dim/32 blocks written (checked above); blocks past `n` in z do not exist.
        unsafe { launch_raw(s, &self.rms_prep_z, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(rms_norm_prep_z)"))
    }

    /// [`Self::swiglu_prep`] of each `gus[z]` into `outs[z]`, one launch.
    pub fn swiglu_prep_batch(
        &self,
        gus: &[&DeviceBuffer<f32>],
        n_values: usize,
        outs: &mut [&mut XPrep],
    ) -> Result<(), CudaError> {
        let op = "swiglu_prep_z";
        let n = batch_len(op, &[gus.len(), outs.len()])?;
        if n_values == 0
            || !n_values.is_multiple_of(32)
            || gus.iter().any(|x| x.len() < 2 * n_values)
            || outs.iter().any(|o| o.cols() < n_values)
        {
            return Err(shape(
                op,
                format!("{n_values} values: gate|up or preps shorter"),
            ));
        }
        let ni = int(n_values, op)?;
        let s = self.ctx().stream();
        let mut g = Vec::new();
        let mut a = SeqArgsRaw::default();
        for (z, x) in gus.iter().enumerate() {
            let (p, gx) = x.slice.device_ptr(s);
            a.p[0][z] = p;
            g.push(gx);
        }
        for (z, o) in outs.iter_mut().enumerate() {
            (a.p[1][z], a.p[2][z]) = prep_ptrs(o, s, &mut g);
        }
        let cfg = LaunchConfig {
            grid_dim: ((n_values / 32).div_ceil(8) as u32, 1, n as u32),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [arg_ptr(&a), arg_ptr(&ni)];
        // SAFETY: the kernel's parameters in order and type; per sequence 2n values
        // read, n/32 blocks written (checked above).
        unsafe { launch_raw(s, &self.swiglu_prep_z, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(swiglu_prep_z)"))
    }
}

/// One sequence's inputs and outputs of the step between the q|k|v GEMV and attention.
pub struct RopeSeq<'a> {
    /// The fused projection [(nh + 2·nkv)·head_dim].
    pub qkv: &'a DeviceBuffer<f32>,
    /// Its position (one i32): the cache row written and the RoPE angle.
    pub pos: &'a DeviceBuffer<i32>,
    /// The rotated q heads.
    pub q_out: &'a mut DeviceBuffer<f32>,
    /// Its KV cache.
    pub cache: &'a mut KvCache,
}

/// The shared side of [`DecodeOps::qk_norm_rope_store_batch`] and
/// [`RopeStore::bias_rope_store_batch`]: the per-sequence table, checked against the
/// head counts and tables.
fn rope_args<'a>(
    op: &'static str,
    seqs: &'a mut [RopeSeq<'_>],
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    (cos, sin): (&DeviceBuffer<f32>, &DeviceBuffer<f32>),
    s: &'a cudarc::driver::CudaStream,
    g: &mut Vec<SyncOnDrop<'a>>,
) -> Result<(SeqArgsRaw, usize), CudaError> {
    let n = batch_len(op, &[seqs.len()])?;
    let heads = n_heads + 2 * n_kv_heads;
    let f16 = matches!(seqs[0].cache, KvCache::F16 { .. });
    for q in seqs.iter() {
        let cap = q.cache.len() / (n_kv_heads.max(1) * head_dim);
        if n_kv_heads == 0
            || q.qkv.len() < heads * head_dim
            || q.q_out.len() < n_heads * head_dim
            || cos.len() < cap * head_dim / 2
            || sin.len() < cap * head_dim / 2
            || q.pos.is_empty()
            || matches!(q.cache, KvCache::F16 { .. }) != f16
        {
            return Err(shape(
                op,
                format!(
                    "qkv {} q_out {} heads {n_heads}/{n_kv_heads}×{head_dim} tables {}/{} cache {}",
                    q.qkv.len(),
                    q.q_out.len(),
                    cos.len(),
                    sin.len(),
                    q.cache.len()
                ),
            ));
        }
    }
    let mut a = SeqArgsRaw::default();
    for (z, q) in seqs.iter_mut().enumerate() {
        let (p0, g0) = q.qkv.slice.device_ptr(s);
        let (p1, g1) = q.pos.slice.device_ptr(s);
        let (p2, g2) = q.q_out.slice.device_ptr_mut(s);
        g.extend([g0, g1, g2]);
        let (k, v) = kv_ptrs(q.cache, s, g);
        a.p[0][z] = p0;
        a.p[1][z] = p1;
        a.p[2][z] = p2;
        a.p[3][z] = k;
        a.p[4][z] = v;
    }
    Ok((a, n))
}

impl DecodeOps {
    /// [`Self::qk_norm_rope_store`] for every sequence of `seqs` (heads of 128), one
    /// launch; the caches must share their element type.
    #[allow(clippy::too_many_arguments)]
    pub fn qk_norm_rope_store_batch(
        &self,
        seqs: &mut [RopeSeq<'_>],
        q_norm: &DeviceBuffer<f32>,
        k_norm: &DeviceBuffer<f32>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        n_heads: usize,
        n_kv_heads: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        let op = "qk_norm_rope_store_z";
        let hd = ATTN_HEAD_DIM;
        if q_norm.len() < hd || k_norm.len() < hd {
            return Err(shape(
                op,
                format!("norms {} / {}", q_norm.len(), k_norm.len()),
            ));
        }
        let s = self.ctx.stream();
        let mut g = Vec::new();
        let f16 = seqs
            .first()
            .is_some_and(|q| matches!(q.cache, KvCache::F16 { .. }));
        let (a, n) = rope_args(op, seqs, (n_heads, n_kv_heads, hd), (cos, sin), s, &mut g)?;
        let (nh, nkv) = (int(n_heads, op)?, int(n_kv_heads, op)?);
        let (qn, _g0) = q_norm.slice.device_ptr(s);
        let (kn, _g1) = k_norm.slice.device_ptr(s);
        let (cp, _g2) = cos.slice.device_ptr(s);
        let (sp, _g3) = sin.slice.device_ptr(s);
        let cfg = LaunchConfig {
            grid_dim: ((n_heads + 2 * n_kv_heads) as u32, 1, n as u32),
            block_dim: (hd as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [
            arg_ptr(&a),
            arg_ptr(&qn),
            arg_ptr(&kn),
            arg_ptr(&cp),
            arg_ptr(&sp),
            arg_ptr(&nh),
            arg_ptr(&nkv),
            arg_ptr(&eps),
        ];
        // SAFETY: the kernel's parameters in order and type, shapes checked; the caller
        // keeps every *pos below its cache's capacity; the kernel waits before reading.
        unsafe { launch_raw(s, &self.qk_z[usize::from(f16)], cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(qk_norm_rope_store_z)"))
    }
}

impl RopeStore {
    /// [`Self::bias_rope_store`] for every sequence of `seqs`, one launch; the caches
    /// must share their element type.
    #[allow(clippy::too_many_arguments)]
    pub fn bias_rope_store_batch(
        &self,
        seqs: &mut [RopeSeq<'_>],
        bias: Option<&DeviceBuffer<f32>>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        interleaved: bool,
    ) -> Result<(), CudaError> {
        let op = "bias_rope_store_z";
        let hi = match head_dim {
            128 => 0,
            64 => 1,
            _ => return Err(shape(op, format!("head_dim {head_dim}: 64 or 128 only"))),
        };
        let heads = n_heads + 2 * n_kv_heads;
        if bias.is_some_and(|b| b.len() < heads * head_dim) {
            return Err(shape(op, "bias shorter than q|k|v".into()));
        }
        let s = self.ctx.stream();
        let mut g = Vec::new();
        let f16 = seqs
            .first()
            .is_some_and(|q| matches!(q.cache, KvCache::F16 { .. }));
        let (a, n) = rope_args(
            op,
            seqs,
            (n_heads, n_kv_heads, head_dim),
            (cos, sin),
            s,
            &mut g,
        )?;
        let (nh, nkv) = (int(n_heads, op)?, int(n_kv_heads, op)?);
        let il = i32::from(interleaved);
        let (bp, _g0) = match bias {
            Some(b) => {
                let (p, g) = b.slice.device_ptr(s);
                (p, Some(g))
            }
            None => (0, None),
        };
        let (cp, _g1) = cos.slice.device_ptr(s);
        let (sp, _g2) = sin.slice.device_ptr(s);
        let cfg = LaunchConfig {
            grid_dim: (heads as u32, 1, n as u32),
            block_dim: (head_dim as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [
            arg_ptr(&a),
            arg_ptr(&bp),
            arg_ptr(&cp),
            arg_ptr(&sp),
            arg_ptr(&nh),
            arg_ptr(&nkv),
            arg_ptr(&il),
        ];
        // SAFETY: the kernel's parameters in order and type (null for no bias), shapes
        // checked; the kernel waits before reading.
        unsafe { launch_raw(s, &self.f_z[hi][usize::from(f16)], cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(bias_rope_store_z)"))
    }
}

/// One sequence's attention: its rotated q, cache, key count `*len + len_add`, split
/// partials and the o projection's x preparation it writes.
pub struct AttnSeq<'a> {
    pub q: &'a DeviceBuffer<f32>,
    pub cache: &'a KvCache,
    pub len: &'a DeviceBuffer<i32>,
    pub partials: &'a mut DeviceBuffer<f32>,
    pub out: &'a mut XPrep,
}

impl AttentionDecode {
    /// The two-pass attention ([`super::AttnKernel::TwoPass`]) of every sequence of
    /// `seqs` over keys 0..`*len + len_add` of its own cache, into its x preparation:
    /// two launches for the batch. The caches must share their element type.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_batch(
        &self,
        seqs: &mut [AttnSeq<'_>],
        capacity: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        len_add: i32,
        scale: f32,
    ) -> Result<(), CudaError> {
        let op = "attn_decode_z";
        let n = batch_len(op, &[seqs.len()])?;
        let group = if n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads) {
            n_heads / n_kv_heads
        } else {
            0
        };
        if !(1..=8).contains(&group) {
            return Err(shape(
                op,
                format!("{n_heads} heads over {n_kv_heads} kv heads: the group must be 1..=8"),
            ));
        }
        let hi = match head_dim {
            128 => 0,
            64 => 1,
            _ => return Err(shape(op, format!("head_dim {head_dim}: 64 or 128 only"))),
        };
        let splits = capacity.div_ceil(KEYS_PER_BLOCK);
        let f16 = matches!(seqs[0].cache, KvCache::F16 { .. });
        for q in seqs.iter() {
            if capacity == 0
                || splits > MAX_SPLITS
                || q.cache.len() < capacity * n_kv_heads * head_dim
                || q.q.len() < n_heads * head_dim
                || q.out.cols() < n_heads * head_dim
                || q.partials.len() < attn_partials_len(n_heads, capacity)
                || q.len.is_empty()
                || matches!(q.cache, KvCache::F16 { .. }) != f16
            {
                return Err(shape(
                    op,
                    format!(
                        "capacity {capacity}, cache {}, q {}, partials {}, heads {n_heads}/{n_kv_heads}",
                        q.cache.len(),
                        q.q.len(),
                        q.partials.len()
                    ),
                ));
            }
        }
        let nkv = int(n_kv_heads, op)?;
        let cap = int(capacity, op)?;
        let ns = int(splits, op)?;
        let s = self.ctx.stream();
        let mut g = Vec::new();
        let (mut split, mut comb) = (SeqArgsRaw::default(), SeqArgsRaw::default());
        for (z, q) in seqs.iter_mut().enumerate() {
            let (qp, g0) = q.q.slice.device_ptr(s);
            let ((kp, g1), (vp, g2)) = match q.cache {
                KvCache::F16 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
                KvCache::F32 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
            };
            let (pp, g3) = q.partials.slice.device_ptr_mut(s);
            let (lp, g4) = q.len.slice.device_ptr(s);
            g.extend([g0, g1, g2, g3, g4]);
            split.p[0][z] = qp;
            split.p[1][z] = kp;
            split.p[2][z] = vp;
            split.p[3][z] = pp;
            split.p[4][z] = lp;
            comb.p[0][z] = pp;
            (comb.p[1][z], comb.p[2][z]) = prep_ptrs(q.out, s, &mut g);
            comb.p[3][z] = lp;
        }
        let cfg = LaunchConfig {
            grid_dim: (ns as u32, nkv as u32, n as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [
            arg_ptr(&split),
            arg_ptr(&len_add),
            arg_ptr(&cap),
            arg_ptr(&nkv),
            arg_ptr(&scale),
        ];
        // SAFETY: the split kernel's parameters in order and type; per sequence it
        // clamps len to 1..=capacity and the cache holds capacity rows (checked above);
        // it waits before reading.
        unsafe {
            launch_raw(
                s,
                &self.split_z[hi][usize::from(f16)][group - 1],
                cfg,
                &mut args,
                self.pdl,
            )
        }
        .map_err(driver_err("cuLaunchKernelEx(attn_decode_z)"))?;
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, 1, n as u32),
            block_dim: (head_dim as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = [
            arg_ptr(&comb),
            arg_ptr(&ns),
            arg_ptr(&len_add),
            arg_ptr(&cap),
        ];
        // SAFETY: per sequence the partials hold n_heads·splits rows and the x
        // preparation n_heads·head_dim values (checked above).
        unsafe { launch_raw(s, &self.combine_prep_z[hi], cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(attn_decode_combine_prep_z)"))
    }
}
