//! Attention decode (one query token, GQA groups 1..8, head size 64 or 128) over a
//! contiguous KV cache (`kernels/attention.cu`, `kernels/attention_onepass.cu`), and the
//! KV cache buffers it reads.
//!
//! Key design choice: the key count is read on the device (`len = *lenp + len_add`) so
//! a decode step captured as a CUDA graph stays valid as the position advances. Two
//! kernels ([`AttnKernel`]): `OnePass` splits the keys over about one wave of
//! blocks and the last block of each kv head merges the partials (one launch; it can
//! also do the q/k norm, RoPE and KV store first, [`AttentionDecode::decode_qkv`]);
//! `TwoPass` is the first version (a grid of 32-key blocks over the whole capacity,
//! those past the keys returning at once, then a combine launch over the splits that
//! hold keys); `Auto` (default) picks by capacity from the H200 measurements.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::gemv::XPrep;
use super::launch::{arg_ptr, launch_ex};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

mod onepass;

pub use onepass::QkvRope;

const SRC: &str = concat!(
    include_str!("../../kernels/prep32.cuh"),
    include_str!("../../kernels/attn_common.cuh"),
    include_str!("../../kernels/attention.cu")
);
/// The one-launch kernels' source, after `$pre` (the FMA module's define).
macro_rules! onepass_src {
    ($($pre:expr),*) => {
        concat!(
            $($pre,)*
            include_str!("../../kernels/prep32.cuh"),
            include_str!("../../kernels/attn_common.cuh"),
            include_str!("../../kernels/attention_onepass.cu")
        )
    };
}
/// The one-launch attention's kernel module, of its own: the two compile side by side
/// on a first run (the one-pass set alone is most of the attention's compile time).
/// Over f16 caches it runs the tensor-core loop.
pub(crate) const ONEPASS_MODULE: Module = Module {
    name: "attention_onepass",
    src: onepass_src!(),
};
/// The same kernels with the FMA loop over f16 caches too, loaded by
/// [`AttentionDecode::set_onepass_tc`]`(false)` and compiled only then.
pub(crate) const ONEPASS_FMA_MODULE: Module = Module {
    name: "attention_onepass_fma",
    src: onepass_src!("#define A1_TC_WANTED 0\n"),
};
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "attention",
    src: SRC,
};
/// The head size of [`AttentionDecode::decode`] and [`KvCache::new`]
/// ([`AttentionDecode::decode_hd`] and [`KvCache::with_head_dim`] also take 64).
pub const ATTN_HEAD_DIM: usize = 128;
/// Head sizes the kernels are built for.
pub const ATTN_HEAD_DIMS: [usize; 2] = [128, 64];
pub(super) const KEYS_PER_BLOCK: usize = 32;
/// Most splits of the two-pass attention: 32768 keys, the chat's longest context (the
/// combine reads 64 splits per round and has no limit of its own since session 22).
pub(super) const MAX_SPLITS: usize = 1024;
/// u32 counters (one per kv head) at the end of the partials buffer, for `OnePass`.
const COUNTERS: usize = 256;

/// Capacities above which [`AttnKernel::Auto`] picks `OnePass`. With the tensor-core
/// loop (session 28, H100, `cuda_decode_bench --pdl --compare-attn`, whole step as a
/// graph, two-pass → fused one-pass): 1000 keys over 2048 2.121 → 2.131 ms, 2560 over
/// 4096 2.262 → 2.237, 6100 over 8192 2.555 → 2.414; so the line sits below the chat's
/// 3072 and 4096 buckets. (With the FMA loop it sat at 4096: the two-pass step was 4%
/// faster at a 2320-key capacity on the H200, docs/CUDA-JOURNAL.md session 23.)
pub const ATTN_ONEPASS_MIN_CAPACITY: usize = 2048;

/// Which attention decode kernel [`AttentionDecode`] launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttnKernel {
    /// `OnePass` when the capacity exceeds [`ATTN_ONEPASS_MIN_CAPACITY`], else `TwoPass`
    /// (the default).
    #[default]
    Auto,
    /// One launch: keys split over about one wave of blocks, the last block of each kv
    /// head merges.
    OnePass,
    /// The first version: blocks of 32 keys over the capacity, then a combine launch.
    TwoPass,
}

/// A contiguous KV cache [capacity, n_kv_heads, head_dim] for one layer, f16 (bits) or f32.
pub enum KvCache {
    F16 {
        k: DeviceBuffer<u16>,
        v: DeviceBuffer<u16>,
    },
    F32 {
        k: DeviceBuffer<f32>,
        v: DeviceBuffer<f32>,
    },
}

impl KvCache {
    /// A zeroed cache of `capacity` tokens of heads of 128.
    pub fn new(
        ctx: &CudaContext,
        owner: &Owner,
        f16: bool,
        capacity: usize,
        n_kv_heads: usize,
    ) -> Result<KvCache, CudaError> {
        Self::with_head_dim(ctx, owner, f16, capacity, n_kv_heads, ATTN_HEAD_DIM)
    }

    /// A zeroed cache of `capacity` tokens of `n_kv_heads` heads of `head_dim`.
    pub fn with_head_dim(
        ctx: &CudaContext,
        owner: &Owner,
        f16: bool,
        capacity: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<KvCache, CudaError> {
        let n = capacity * n_kv_heads * head_dim;
        Ok(if f16 {
            KvCache::F16 {
                k: ctx.alloc(owner, SpanKind::Scratch, n)?,
                v: ctx.alloc(owner, SpanKind::Scratch, n)?,
            }
        } else {
            KvCache::F32 {
                k: ctx.alloc(owner, SpanKind::Scratch, n)?,
                v: ctx.alloc(owner, SpanKind::Scratch, n)?,
            }
        })
    }

    /// Values per cache (k or v).
    pub fn len(&self) -> usize {
        match self {
            KvCache::F16 { k, .. } => k.len(),
            KvCache::F32 { k, .. } => k.len(),
        }
    }

    /// True when the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of one cached value.
    pub fn elem_bytes(&self) -> usize {
        match self {
            KvCache::F16 { .. } => 2,
            KvCache::F32 { .. } => 4,
        }
    }

    /// Writes `k` and `v` (f32, from the first value) into the cache and returns what
    /// it then holds there as f32 (rounded to f16 for an f16 cache): the values a
    /// reference must see to check the kernels that read the cache.
    pub fn fill(
        &mut self,
        ctx: &CudaContext,
        k: &[f32],
        v: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), CudaError> {
        match self {
            KvCache::F16 { k: kd, v: vd } => {
                let bits = |x: &[f32]| -> Vec<u16> {
                    x.iter()
                        .map(|x| half::f16::from_f32(*x).to_bits())
                        .collect()
                };
                let (kb, vb) = (bits(k), bits(v));
                ctx.write(kd, &kb)?;
                ctx.write(vd, &vb)?;
                Ok((f16_values(&kb), f16_values(&vb)))
            }
            KvCache::F32 { k: kd, v: vd } => {
                ctx.write(kd, k)?;
                ctx.write(vd, v)?;
                Ok((k.to_vec(), v.to_vec()))
            }
        }
    }

    /// The whole K and V planes as f32 (copied back from the device).
    pub fn held(&self, ctx: &CudaContext) -> Result<(Vec<f32>, Vec<f32>), CudaError> {
        match self {
            KvCache::F16 { k, v } => {
                Ok((f16_values(&ctx.download(k)?), f16_values(&ctx.download(v)?)))
            }
            KvCache::F32 { k, v } => Ok((ctx.download(k)?, ctx.download(v)?)),
        }
    }
}

fn f16_values(bits: &[u16]) -> Vec<f32> {
    bits.iter()
        .map(|b| half::f16::from_bits(*b).to_f32())
        .collect()
}

impl AttnKernel {
    /// `Auto` resolved for a cache of `capacity` keys.
    pub fn resolve(self, capacity: usize) -> AttnKernel {
        match self {
            AttnKernel::Auto if capacity > ATTN_ONEPASS_MIN_CAPACITY => AttnKernel::OnePass,
            AttnKernel::Auto => AttnKernel::TwoPass,
            k => k,
        }
    }
}

/// The attention decode kernels of one context.
pub struct AttentionDecode {
    pub(super) ctx: Arc<CudaContext>,
    /// Launch the kernels with programmatic dependent launch (default off).
    pub pdl: bool,
    /// The kernel [`Self::decode`] uses (default `Auto`; [`Self::decode_qkv`] is always
    /// `OnePass`).
    pub kernel: AttnKernel,
    /// `OnePass`: order the partials before the last block's merge with one gpu-scope
    /// acq_rel fence per block instead of `__threadfence` (MEMBAR.SC) in every thread
    /// (default off: the measured version).
    pub light_fence: bool,
    /// `OnePass`: keys per block at least (default 64): min(`splits`, len / min_keys)
    /// blocks per kv head, so short contexts use few blocks and merge few partials.
    pub min_keys: usize,
    /// `OnePass`: blocks per kv head instead of the occupancy-derived one wave (≤ 64).
    pub splits: Option<usize>,
    /// Timing ablation only (benches; outputs then meaningless): bit 0 leaves out the
    /// two-pass split launch, bit 1 its combine, so a step's graph shows what each costs
    /// on the chain; bit 2 runs the split without its scores, softmax and merge (its
    /// loads and writes only), bit 3 without the merge of its half-warps, bit 4 with the
    /// merge's shared-memory writes and barrier but not its reads and arithmetic (the
    /// lowest of those three bits set wins; for f16 caches, head dim 128 and 4 query
    /// heads per kv head only). 0 (the default) runs the real kernels.
    pub ablate: u8,
    /// The one-pass kernels (the tensor-core loop over f16 caches on sm_80+).
    one: onepass::OnePass,
    /// The FMA-loop one-pass kernels, once [`Self::set_onepass_tc`]`(false)` loaded them.
    one_fma: Option<onepass::OnePass>,
    /// Whether the one-pass launches use `one` (else `one_fma`).
    tc_on: bool,
    /// [head dim 64?][f16?][group - 1] split kernels.
    split: [[[CudaFunction; 8]; 2]; 2],
    /// The split's timing probes ([`Self::ablate`] bits 2, 3 and 4).
    split_probe: [CudaFunction; 3],
    /// [head dim 64?] combine kernels (f32 out, x-prep out).
    combine: [CudaFunction; 2],
    combine_prep: [CudaFunction; 2],
    /// The same split and x-prep combine kernels over several sequences
    /// (`decode_batch.rs`).
    pub(super) split_z: [[[CudaFunction; 8]; 2]; 2],
    pub(super) combine_prep_z: [CudaFunction; 2],
}

/// Where the combined attention output goes.
pub enum AttnOut<'a> {
    /// f32 [n_heads, 128].
    F32(&'a mut DeviceBuffer<f32>),
    /// Straight into the x preparation of the next GEMV (the o projection).
    Prep(&'a mut XPrep),
}

fn shape(detail: String) -> CudaError {
    CudaError::Shape {
        op: "attn_decode",
        detail,
    }
}

/// Scratch for the split partials of up to `n_heads` heads over `capacity` keys (any
/// head size up to 128), and the one-pass kernel's counters at its end. The buffer must
/// start zeroed ([`CudaContext::alloc`] does) and serve one stream.
pub fn attn_partials_len(n_heads: usize, capacity: usize) -> usize {
    n_heads * capacity.div_ceil(KEYS_PER_BLOCK) * (ATTN_HEAD_DIM + 4) + COUNTERS
}

impl AttentionDecode {
    /// Compiles (or reads from the cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<AttentionDecode, CudaError> {
        Self::load_module(ctx, LoadedModule::load(ctx, MODULE)?)
    }

    /// [`Self::load`] with the two-pass module built as a copy under another cache name
    /// (a timing probe of the decode step: either setting loads the same code at the
    /// same place), its split's K/V loads evict-first in L2 when `evict_first`
    /// (`FAVLO_KV_EVICT_FIRST`).
    pub fn load_variant(
        ctx: &Arc<CudaContext>,
        evict_first: bool,
    ) -> Result<AttentionDecode, CudaError> {
        let name = if evict_first {
            "attention_ef"
        } else {
            "attention_copy"
        };
        let prelude = format!("#define FAVLO_KV_EVICT_FIRST {}\n", u8::from(evict_first));
        Self::load_module(
            ctx,
            LoadedModule::load_variant(ctx, MODULE, name, &prelude)?,
        )
    }

    fn load_module(ctx: &Arc<CudaContext>, m: LoadedModule) -> Result<AttentionDecode, CudaError> {
        let m1 = LoadedModule::load(ctx, ONEPASS_MODULE)?;
        let f = |n: String| m.function(&n);
        let set = |t: &str, suf: &str| -> Result<[CudaFunction; 8], CudaError> {
            let v = (1..=8)
                .map(|g| f(format!("attn_decode_{t}_g{g}{suf}")))
                .collect::<Result<Vec<_>, _>>()?;
            v.try_into()
                .map_err(|_| shape("eight group kernels expected".into()))
        };
        Ok(AttentionDecode {
            split: [
                [set("f32", "")?, set("f16", "")?],
                [set("f32", "_hd64")?, set("f16", "_hd64")?],
            ],
            split_probe: [
                f("attn_decode_f16_g4_probe1".into())?,
                f("attn_decode_f16_g4_probe2".into())?,
                f("attn_decode_f16_g4_probe3".into())?,
            ],
            combine: [
                f("attn_decode_combine".into())?,
                f("attn_decode_combine_hd64".into())?,
            ],
            combine_prep: [
                f("attn_decode_combine_prep".into())?,
                f("attn_decode_combine_prep_hd64".into())?,
            ],
            split_z: [
                [set("f32", "_z")?, set("f16", "_z")?],
                [set("f32", "_hd64_z")?, set("f16", "_hd64_z")?],
            ],
            combine_prep_z: [
                f("attn_decode_combine_prep_z".into())?,
                f("attn_decode_combine_prep_hd64_z".into())?,
            ],
            one: onepass::OnePass::load(ctx, &m1.module)?,
            one_fma: None,
            tc_on: true,
            pdl: false,
            kernel: AttnKernel::Auto,
            light_fence: false,
            ablate: 0,
            min_keys: 64,
            splits: None,
            ctx: Arc::clone(ctx),
        })
    }

    /// Whether the one-pass kernels run their tensor-core loop over f16 caches
    /// (`kernels/attention_onepass.cu`, `a1_tc_run`: q·Kᵀ and P·V as f16 mma with the f32
    /// operands split into two f16 terms) or the FMA loop. On by default; the first
    /// `false` compiles and loads the FMA module. f32 caches run the FMA loop either way.
    pub fn set_onepass_tc(&mut self, on: bool) -> Result<(), CudaError> {
        if !on && self.one_fma.is_none() {
            let m = LoadedModule::load(&self.ctx, ONEPASS_FMA_MODULE)?;
            self.one_fma = Some(onepass::OnePass::load(&self.ctx, &m.module)?);
        }
        self.tc_on = on;
        Ok(())
    }

    /// Whether the one-pass launches over f16 caches run the tensor-core loop (every
    /// device a context opens is sm_80 or later, `MIN_COMPUTE_CAPABILITY`).
    pub fn onepass_tc(&self) -> bool {
        self.tc_on
    }

    /// The one-pass kernel set the launches use.
    fn one(&self) -> &onepass::OnePass {
        match (&self.one_fma, self.tc_on) {
            (Some(f), false) => f,
            _ => &self.one,
        }
    }

    /// out [n_heads, 128] = softmax(scale · q·Kᵀ) V over keys 0..len of the cache,
    /// len = `*lenp + len_add` read on the device (`lenp` holds one i32).
    /// `partials` holds [`attn_partials_len`]`(n_heads, capacity)` values.
    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &self,
        q: &DeviceBuffer<f32>,
        cache: &KvCache,
        capacity: usize,
        n_heads: usize,
        n_kv_heads: usize,
        lenp: &DeviceBuffer<i32>,
        len_add: i32,
        scale: f32,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        self.decode_hd(
            q,
            cache,
            capacity,
            n_heads,
            n_kv_heads,
            ATTN_HEAD_DIM,
            lenp,
            len_add,
            scale,
            partials,
            out,
        )
    }

    /// [`Self::decode`] for heads of `head_dim` (64 or 128), [n_heads, head_dim] in and
    /// out; groups 1..=8 query heads per kv head.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_hd(
        &self,
        q: &DeviceBuffer<f32>,
        cache: &KvCache,
        capacity: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        lenp: &DeviceBuffer<i32>,
        len_add: i32,
        scale: f32,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
    ) -> Result<(), CudaError> {
        let group = if n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads) {
            n_heads / n_kv_heads
        } else {
            0
        };
        if !(1..=8).contains(&group) {
            return Err(shape(format!(
                "{n_heads} heads over {n_kv_heads} kv heads: the group must be 1..=8"
            )));
        }
        let gi = group - 1;
        let hi = match head_dim {
            128 => 0,
            64 => 1,
            _ => return Err(shape(format!("head_dim {head_dim}: 64 or 128 only"))),
        };
        let hd = head_dim;
        let splits = capacity.div_ceil(KEYS_PER_BLOCK);
        if capacity == 0
            || splits > MAX_SPLITS
            || cache.len() < capacity * n_kv_heads * hd
            || q.len() < n_heads * hd
            || match &out {
                AttnOut::F32(o) => o.len() < n_heads * hd,
                AttnOut::Prep(p) => p.cols() < n_heads * hd,
            }
            || partials.len() < attn_partials_len(n_heads, capacity)
            || lenp.is_empty()
        {
            return Err(shape(format!(
                "capacity {capacity}, cache {}, q {}, partials {}, heads {n_heads}/{n_kv_heads}",
                cache.len(),
                q.len(),
                partials.len()
            )));
        }
        if self.kernel.resolve(capacity) == AttnKernel::OnePass {
            let dims = onepass::Dims {
                capacity,
                n_heads,
                n_kv_heads,
                head_dim,
                len_add,
                scale,
            };
            return self.onepass_q(q, cache, dims, lenp, partials, out);
        }
        let nkv = i32::try_from(n_kv_heads).map_err(|_| shape("n_kv_heads".into()))?;
        let cap = i32::try_from(capacity).map_err(|_| shape("capacity".into()))?;
        let ns = i32::try_from(splits).map_err(|_| shape("splits".into()))?;
        let s = self.ctx.stream();
        let cfg = LaunchConfig {
            grid_dim: (ns as u32, nkv as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let f16 = matches!(cache, KvCache::F16 { .. });
        let split = match (self.ablate >> 2) & 7 {
            0 => &self.split[hi][usize::from(f16)][gi],
            _ if hi != 0 || !f16 || group != 4 => {
                return Err(shape(
                    "the split's timing probes are built for f16 caches, head dim 128 and \
                     4 query heads per kv head only"
                        .into(),
                ));
            }
            p => &self.split_probe[p.trailing_zeros() as usize],
        };
        if self.pdl {
            return self.decode_pdl(
                split,
                cfg,
                q,
                cache,
                [len_add, cap, nkv, ns],
                lenp,
                scale,
                partials,
                out,
                n_heads,
                hi,
            );
        }
        let mut b = s.launch_builder(split);
        b.arg(&q.slice);
        match cache {
            KvCache::F16 { k, v } => b.arg(&k.slice).arg(&v.slice),
            KvCache::F32 { k, v } => b.arg(&k.slice).arg(&v.slice),
        };
        b.arg(&mut partials.slice)
            .arg(&lenp.slice)
            .arg(&len_add)
            .arg(&cap)
            .arg(&nkv)
            .arg(&scale);
        if self.ablate & 1 == 0 {
            // SAFETY: types match the kernel; it clamps len to 1..=capacity and key
            // indices to len - 1, and the cache holds capacity rows (checked above).
            unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(attn_decode)"))?;
        }
        if self.ablate & 2 != 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, 1, 1),
            block_dim: (hd as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        match out {
            AttnOut::F32(o) => {
                let mut b = s.launch_builder(&self.combine[hi]);
                b.arg(&partials.slice)
                    .arg(&mut o.slice)
                    .arg(&ns)
                    .arg(&lenp.slice)
                    .arg(&len_add)
                    .arg(&cap);
                // SAFETY: types match; partials hold n_heads·splits·132 values, of which
                // the combine reads the splits the split kernel wrote (same length).
                unsafe { b.launch(cfg) }
                    .map_err(driver_err("cuLaunchKernel(attn_decode_combine)"))?;
            }
            AttnOut::Prep(p) => {
                let mut b = s.launch_builder(&self.combine_prep[hi]);
                b.arg(&partials.slice)
                    .arg(&ns)
                    .arg(&mut p.hl.slice)
                    .arg(&mut p.xs.slice)
                    .arg(&lenp.slice)
                    .arg(&len_add)
                    .arg(&cap);
                // SAFETY: types match; n_heads·4 blocks of 32 written (checked above).
                unsafe { b.launch(cfg) }
                    .map_err(driver_err("cuLaunchKernel(attn_decode_combine_prep)"))?;
            }
        }
        Ok(())
    }

    /// [`Self::decode`]'s two launches through `cuLaunchKernelEx` with programmatic
    /// dependent launch (both kernels wait before reading). `ints` = len_add, capacity,
    /// kv heads, splits; `hi` indexes [`ATTN_HEAD_DIMS`]; shapes were checked by the caller.
    #[allow(clippy::too_many_arguments)]
    fn decode_pdl(
        &self,
        split: &CudaFunction,
        cfg: LaunchConfig,
        q: &DeviceBuffer<f32>,
        cache: &KvCache,
        ints: [i32; 4],
        lenp: &DeviceBuffer<i32>,
        scale: f32,
        partials: &mut DeviceBuffer<f32>,
        out: AttnOut<'_>,
        n_heads: usize,
        hi: usize,
    ) -> Result<(), CudaError> {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let hd = ATTN_HEAD_DIMS[hi];
        let s = self.ctx.stream();
        let (qp, _g0) = q.slice.device_ptr(s);
        let ((kp, _g1), (vp, _g2)) = match cache {
            KvCache::F16 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
            KvCache::F32 { k, v } => (k.slice.device_ptr(s), v.slice.device_ptr(s)),
        };
        let (pp, _g3) = partials.slice.device_ptr_mut(s);
        let (lp, _g4) = lenp.slice.device_ptr(s);
        let [len_add, cap, nkv, ns] = ints;
        let mut args = [
            arg_ptr(&qp),
            arg_ptr(&kp),
            arg_ptr(&vp),
            arg_ptr(&pp),
            arg_ptr(&lp),
            arg_ptr(&len_add),
            arg_ptr(&cap),
            arg_ptr(&nkv),
            arg_ptr(&scale),
        ];
        if self.ablate & 1 == 0 {
            // SAFETY: the split kernel's parameters in order (checked shapes, see
            // `decode`).
            unsafe { launch_ex(s, split, cfg, &mut args) }
                .map_err(driver_err("cuLaunchKernelEx(attn_decode)"))?;
        }
        if self.ablate & 2 != 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, 1, 1),
            block_dim: (hd as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        match out {
            AttnOut::F32(o) => {
                let (op, _g5) = o.slice.device_ptr_mut(s);
                let mut args = [
                    arg_ptr(&pp),
                    arg_ptr(&op),
                    arg_ptr(&ns),
                    arg_ptr(&lp),
                    arg_ptr(&len_add),
                    arg_ptr(&cap),
                ];
                // SAFETY: as in `decode`.
                unsafe { launch_ex(s, &self.combine[hi], cfg, &mut args) }
                    .map_err(driver_err("cuLaunchKernelEx(attn_decode_combine)"))
            }
            AttnOut::Prep(p) => {
                let (hp, _g5) = p.hl.slice.device_ptr_mut(s);
                let (xp, _g6) = p.xs.slice.device_ptr_mut(s);
                let mut args = [
                    arg_ptr(&pp),
                    arg_ptr(&ns),
                    arg_ptr(&hp),
                    arg_ptr(&xp),
                    arg_ptr(&lp),
                    arg_ptr(&len_add),
                    arg_ptr(&cap),
                ];
                // SAFETY: as in `decode`.
                unsafe { launch_ex(s, &self.combine_prep[hi], cfg, &mut args) }
                    .map_err(driver_err("cuLaunchKernelEx(attn_decode_combine_prep)"))
            }
        }
    }
}
