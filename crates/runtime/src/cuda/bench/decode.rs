//! Batch-1 decode of a Qwen3-8B-shaped model with random MX weights, in tokens/s
//! beside the HBM roofline (bytes per token = all weights + the K and V read for the
//! keys in the cache, over the device-to-device copy bandwidth of the same run).
//!
//! Shape (Qwen3-8B config): 36 layers, hidden 4096, 32 q / 8 kv heads of 128,
//! intermediate 12288, vocab 151936, RMSNorm eps 1e-6, NeoX RoPE θ = 1e6, q/k norm.
//! Per token and layer: `rms_norm_prep` → q|k|v GEMV → the attention step ([`AttnMode`]:
//! q/k norm + RoPE + KV store, then split + combine attention into the o GEMV's x prep,
//! 3 launches; or all of it in one launch, [`AttnMode::Fused`]; `Auto` picks by the
//! cache capacity) → o GEMV (+residual) → `rms_norm_prep` → gate|up GEMV →
//! `swiglu_prep` → down GEMV (+residual); then the final norm, lm_head and the position
//! step; by default (`fused`) the RMSNorm and SwiGLU preparations run in the GEMVs'
//! epilogues instead ([`super::decode_fused`], 7 launches per layer). With
//! `compare_attn` every attention step is timed in the same run.
//!
//! Key design choice: every kernel reads the position from device memory, so one step
//! is captured once as a CUDA graph and replayed (the headline figure); plain stream
//! launches are timed too. With PDL the bench first checks that one step gives the same
//! logits with and without it, from the same state.

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView};
use half::f16;

use super::decode_fused::{check_fused, step_fused};
use super::decode_parts::{DecodeParts, measure_parts};
use super::gemv::describe;
use super::placement::{Pad, PadModule, PadWhere, load_pad};
use super::{BenchError, Rng, random_mx};
use crate::cuda::{
    ATTN_ONEPASS_MIN_CAPACITY, AttentionDecode, AttnKernel, AttnOut, CudaContext, CudaError,
    CudaGraph, DecodeOps, DeviceBuffer, GemvKernel, GemvMma, KvCache, MxTiled, QkvRope, XPrep,
    attn_partials_len, copy_bandwidth_gbps, rope_tables, tile_mx, time_ms,
};
use crate::ledger::{Owner, SpanKind};

pub(super) const HIDDEN: usize = 4096;
pub(super) const NH: usize = 32;
pub(super) const NKV: usize = 8;
pub(super) const HD: usize = 128;
pub(super) const INTER: usize = 12288;
pub(super) const VOCAB: usize = 151936;
pub(super) const EPS: f32 = 1e-6;

/// How a layer's step from the q|k|v projection to the o projection's x prep runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttnMode {
    /// `Fused` above [`ATTN_ONEPASS_MIN_CAPACITY`] keys of capacity, else `TwoPass`
    /// (the measured faster one at each size).
    #[default]
    Auto,
    /// `qk_norm_rope_store`, then the two-pass attention (split + combine): 3 launches.
    TwoPass,
    /// `qk_norm_rope_store`, then the one-pass attention: 2 launches.
    OnePass,
    /// The one-pass attention with the q/k norm, RoPE and KV store in its prologue
    /// (`AttentionDecode::decode_qkv`): 1 launch.
    Fused,
    /// `Fused` with one acq_rel fence per block before the merge
    /// (`AttentionDecode::light_fence`).
    FusedLight,
}

impl AttnMode {
    /// The modes `compare_attn` times.
    pub const ALL: [AttnMode; 4] = [
        AttnMode::TwoPass,
        AttnMode::OnePass,
        AttnMode::Fused,
        AttnMode::FusedLight,
    ];

    /// `Auto` resolved for a cache of `capacity` keys.
    pub fn resolve(self, capacity: usize) -> AttnMode {
        match self {
            AttnMode::Auto if capacity > ATTN_ONEPASS_MIN_CAPACITY => AttnMode::Fused,
            AttnMode::Auto => AttnMode::TwoPass,
            m => m,
        }
    }
}

/// What [`decode_bench`] runs.
#[derive(Clone, Debug)]
pub struct DecodeBenchOptions {
    /// Decoder layers (36 for Qwen3-8B).
    pub layers: usize,
    /// Tokens already in the KV cache (random values) when timing starts.
    pub context: usize,
    /// Timed steps (plain launches; the graph replays about as many).
    pub steps: usize,
    /// MXFP4 (`Fp4E2M1`) or MXFP8 (`Fp8E4M3`) weights.
    pub format: ElementFormat,
    /// f16 KV cache (else f32).
    pub f16_kv: bool,
    /// Programmatic dependent launch on every decode kernel (used only on sm_90+).
    pub pdl: bool,
    /// The GEMV kernel (default `Auto`).
    pub kernel: GemvKernel,
    /// (warps, depth) of the ring kernels instead of their own choice.
    pub ring: Option<(usize, usize)>,
    /// Ping-pong L2 prefetch distance (0 = off).
    pub pp_prefetch: u8,
    /// Also time each part of the step (GEMVs, attention, the small kernels).
    pub parts: bool,
    /// The attention step (default `Auto`).
    pub attn: AttnMode,
    /// Also time the whole step (CUDA graph) with every other [`AttnMode`].
    pub compare_attn: bool,
    /// The one-pass attention's fewest keys per block (its default when `None`).
    pub attn_min_keys: Option<usize>,
    /// The one-pass attention's tensor-core loop (`AttentionDecode::set_onepass_tc`;
    /// default on), else its FMA loop.
    pub attn_tc: bool,
    /// The RMSNorm and SwiGLU preparations fused into the GEMVs that finish their
    /// inputs (`Epilogue`; default on), else separate kernels.
    pub fused: bool,
    /// Parts left out of the fused step ([`SKIP_PARTS`] bits; timing ablation only:
    /// the logits are then meaningless and the fused check is not run).
    pub skip: u16,
    /// The ring GEMVs loop over tiles in one wave of blocks (`GemvMma::persistent`).
    pub persistent: bool,
    /// At most this many warps per block of the register GEMV kernels
    /// (`GemvMma::warps_cap`).
    pub warps_cap: Option<usize>,
    /// KV capacity in tokens (default: `context` + 4 × `steps` + 16, what the timed
    /// steps need); a larger one times the attention as a chat's bucket runs it (e.g.
    /// 2561 keys in a 4096-key bucket).
    pub capacity: Option<usize>,
    /// Other GEMV settings for some of the step's GEMVs (a timing probe).
    pub alt: Option<AltGemv>,
    /// Placement probes (nothing launches them; they only move what is loaded or
    /// allocated after them): MiB taken from the pool before the model's buffers, and
    /// one more GEMV module loaded after the attention's and the norms' modules. The
    /// step's time moves ~1% with placement (docs/CUDA.md, decode).
    pub pad_mib: usize,
    pub late_module: bool,
    /// Modules of code or data alone that nothing launches, loaded before the step's
    /// modules or between its GEMV and attention modules ([`super::placement`]).
    pub pads: Vec<Pad>,
    /// The two-pass attention from a copy of its module under another cache name
    /// ([`AttentionDecode::load_variant`]), its K/V loads evict-first in L2 when
    /// `Some(true)`; `None` loads the shipped module.
    pub attn_l2: Option<bool>,
}

/// Settings for some of the decode step's GEMVs that differ from the others' (a timing
/// probe: which kernel suits each GEMV where it sits in the step).
#[derive(Clone, Debug)]
pub struct AltGemv {
    /// The GEMVs, as [`SKIP_PARTS`] bits (`qkv`, `o`, `gate_up`, `down`, `head`).
    pub parts: u16,
    pub kernel: GemvKernel,
    /// `GemvMma::pp_first_loads` (ping-pong: which warps request their first chunk
    /// before the PDL wait).
    pub first_loads: u8,
    /// The second kernel set's weight and scale loads evict-first in L2
    /// ([`GemvMma::load_evict_first`]).
    pub evict_first: bool,
}

/// The parts [`DecodeBenchOptions::skip`] can leave out, bit i = name i.
/// `rope`: only the attention's q/k norm + RoPE + KV store kernel (two-pass attention).
/// `split` and `combine` leave out one launch of the two-pass attention; `score`,
/// `merge` and `merge_math` run its split kernel without its arithmetic (loads and
/// writes only), without the merge of its half-warps, or with the merge's shared-memory
/// writes and barrier but not its reads and arithmetic ([`AttentionDecode::ablate`]).
pub const SKIP_PARTS: [&str; 12] = [
    "qkv",
    "attn",
    "o",
    "gate_up",
    "down",
    "head",
    "rope",
    "split",
    "combine",
    "score",
    "merge",
    "merge_math",
];

/// The bit of [`SKIP_PARTS`] where the parts that are [`AttentionDecode::ablate`]'s bits
/// begin (`split`, then `combine`, `score`, `merge`, `merge_math`).
const ABLATE_FIRST_PART: u32 = 7;

/// The [`SKIP_PARTS`] bits of q|k|v, o, gate|up, down and the lm_head, in
/// [`layouts`]' order.
const GEMV_PART_BITS: [u16; 5] = [1, 4, 8, 16, 32];

/// What [`parse_parts`] may name: every part (`--skip`), or the GEMVs (`--alt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartSet {
    All,
    Gemvs,
}

/// The [`SKIP_PARTS`] bits of a comma-separated list of part names (`none` names no
/// part); a name that is not a part, or not a GEMV where `set` asks for GEMVs, is an
/// error that lists the names `set` allows, so a typo is not a silent no-op.
pub fn parse_parts(list: &str, set: PartSet) -> Result<u16, BenchError> {
    let allowed = match set {
        PartSet::All => u16::MAX,
        PartSet::Gemvs => GEMV_PART_BITS.iter().fold(0, |a, b| a | b),
    };
    let bit = |p: &str| {
        let i = SKIP_PARTS.iter().position(|n| *n == p)?;
        Some(1u16 << i).filter(|b| b & allowed != 0)
    };
    list.split(',')
        .filter(|p| *p != "none")
        .try_fold(0u16, |bits, p| match bit(p) {
            Some(b) => Ok(bits | b),
            None => {
                let known = (0..SKIP_PARTS.len()).filter(|i| (1u16 << i) & allowed != 0);
                let known: Vec<_> = known.map(|i| SKIP_PARTS[i]).collect();
                Err(BenchError::Options(format!(
                    "unknown part `{p}` (known: none, {})",
                    known.join(", ")
                )))
            }
        })
}

impl Default for DecodeBenchOptions {
    /// `favlo bench decode --device cuda`: the full model, 1024 tokens of context, 32
    /// steps, MXFP4, f16 KV, PDL, the default kernels.
    fn default() -> Self {
        DecodeBenchOptions {
            layers: 36,
            context: 1024,
            steps: 32,
            format: ElementFormat::Fp4E2M1,
            f16_kv: true,
            pdl: true,
            kernel: GemvKernel::Auto,
            ring: None,
            pp_prefetch: 0,
            parts: false,
            attn: AttnMode::Auto,
            compare_attn: false,
            attn_min_keys: None,
            attn_tc: true,
            fused: true,
            skip: 0,
            persistent: true,
            warps_cap: None,
            capacity: None,
            alt: None,
            pad_mib: 0,
            late_module: false,
            pads: Vec::new(),
            attn_l2: None,
        }
    }
}

/// The figures of one run.
#[derive(Clone, Debug)]
pub struct DecodeBench {
    pub device: String,
    /// Device-to-device copy of 1 GiB, read + written bytes, GB/s.
    pub copy_gbps: f64,
    /// The GEMV kernel per matrix (`q|k|v PingPong, ...`).
    pub kernels: String,
    /// PDL was on.
    pub pdl: bool,
    /// With PDL: (max |logit difference| of one step with and without, max |logit|).
    pub pdl_check: Option<(f32, f32)>,
    /// The norms and SwiGLU were fused.
    pub fused: bool,
    /// Fused: (max |logit difference| of one step fused and unfused, max |logit|).
    pub fused_check: Option<(f32, f32)>,
    /// Seconds to build and upload the model.
    pub setup_s: f64,
    /// Device bytes the run's buffers hold.
    pub live_bytes: u64,
    /// Weight bytes read per token (data + scales of every matrix).
    pub weight_bytes: f64,
    /// K and V bytes read per token (mean over the timed tokens).
    pub kv_bytes: f64,
    /// Milliseconds per token at the copy bandwidth.
    pub roofline_ms: f64,
    /// Milliseconds per token, CUDA graph replays.
    pub graph_ms: f64,
    /// Milliseconds per token, plain stream launches.
    pub plain_ms: f64,
    /// The last logits were all finite.
    pub logits_finite: bool,
    /// max |h| after the timed steps (the random weights keep it moderate).
    pub max_h: f32,
    pub parts: Option<DecodeParts>,
    /// The attention step timed (`opts.attn` resolved).
    pub attn: AttnMode,
    /// With `compare_attn`: ms/token of the CUDA graph with each attention step, from
    /// the same state, in this run (the headline's own mode included).
    pub attn_modes: Vec<(AttnMode, f64)>,
}

impl DecodeBench {
    /// HBM bytes per token (weights + KV read).
    pub fn bytes_per_token(&self) -> f64 {
        self.weight_bytes + self.kv_bytes
    }

    /// Tokens/s of the CUDA graph (the headline figure).
    pub fn tok_s(&self) -> f64 {
        1e3 / self.graph_ms
    }

    /// Tokens/s at the roofline.
    pub fn roofline_tok_s(&self) -> f64 {
        1e3 / self.roofline_ms
    }
}

pub(super) struct Layer {
    pub(super) qkv: MxTiled,
    pub(super) o: MxTiled,
    pub(super) gate_up: MxTiled,
    pub(super) down: MxTiled,
    pub(super) attn_norm: DeviceBuffer<f32>,
    pub(super) mlp_norm: DeviceBuffer<f32>,
    pub(super) q_norm: DeviceBuffer<f32>,
    pub(super) k_norm: DeviceBuffer<f32>,
    pub(super) cache: KvCache,
}

pub(super) struct Bufs {
    pub(super) h: DeviceBuffer<f32>,
    pub(super) xn: DeviceBuffer<f32>,
    pub(super) prep: XPrep,
    pub(super) qkv: DeviceBuffer<f32>,
    pub(super) q: DeviceBuffer<f32>,
    pub(super) attn: DeviceBuffer<f32>,
    pub(super) gu: DeviceBuffer<f32>,
    pub(super) act: DeviceBuffer<f32>,
    pub(super) logits: DeviceBuffer<f32>,
    pub(super) part: DeviceBuffer<f32>,
    pub(super) pos: DeviceBuffer<i32>,
    pub(super) cos: DeviceBuffer<f32>,
    pub(super) sin: DeviceBuffer<f32>,
    pub(super) final_norm: DeviceBuffer<f32>,
    /// Fused steps: the norm producers' x preparation and partial sums of squares,
    /// the SwiGLU producer's preparation and pair counters.
    pub(super) prep_n: XPrep,
    pub(super) ss: DeviceBuffer<f32>,
    pub(super) prep_f: XPrep,
    pub(super) pairs: DeviceBuffer<u32>,
}

pub(super) struct Kernels {
    pub(super) gemv: GemvMma,
    /// [`DecodeBenchOptions::alt`]: its GEMV settings and the parts that take them.
    pub(super) alt: Option<(GemvMma, u16)>,
    pub(super) attn: AttentionDecode,
    pub(super) ops: DecodeOps,
    pub(super) mode: AttnMode,
    /// Steps use the fused epilogues ([`super::decode_fused`]).
    pub(super) fused: bool,
    /// [`DecodeBenchOptions::skip`].
    pub(super) skip: u16,
}

impl Kernels {
    /// The GEMV settings of the step's part `bit` ([`SKIP_PARTS`] bit).
    pub(super) fn gemv_for(&self, bit: u16) -> &GemvMma {
        match &self.alt {
            Some((g, parts)) if parts & bit != 0 => g,
            _ => &self.gemv,
        }
    }

    /// Sets the attention step (`Auto` must be resolved first).
    pub(super) fn set_mode(&mut self, mode: AttnMode) {
        self.mode = mode;
        self.attn.kernel = if mode == AttnMode::TwoPass {
            AttnKernel::TwoPass
        } else {
            AttnKernel::OnePass
        };
        self.attn.light_fence = mode == AttnMode::FusedLight;
    }
}

/// The random model on the device and its scratch buffers.
pub(super) struct Model {
    pub(super) layers: Vec<Layer>,
    pub(super) lm_head: MxTiled,
    pub(super) b: Bufs,
    /// KV capacity (tokens).
    pub(super) cap: usize,
}

/// Layouts of q|k|v, o, gate|up, down and lm_head.
fn layouts(format: ElementFormat) -> [MxLayout; 5] {
    let l = |rows, cols| MxLayout { format, rows, cols };
    [
        l((NH + 2 * NKV) * HD, HIDDEN),
        l(HIDDEN, NH * HD),
        l(2 * INTER, HIDDEN),
        l(HIDDEN, INTER),
        l(VOCAB, HIDDEN),
    ]
}

/// Runs the decode benchmark on `ctx`.
pub fn decode_bench(
    ctx: &Arc<CudaContext>,
    opts: &DecodeBenchOptions,
) -> Result<DecodeBench, BenchError> {
    if opts.layers == 0 || opts.steps == 0 {
        return Err(BenchError::Options("layers and steps must be ≥ 1".into()));
    }
    if !matches!(opts.format, ElementFormat::Fp4E2M1 | ElementFormat::Fp8E4M3) {
        return Err(BenchError::Options(
            "weights must be MXFP4 or MXFP8 (E4M3)".into(),
        ));
    }
    let pdl = opts.pdl && ctx.compute_capability().0 >= 9;
    let pads_at = |at: PadWhere| -> Result<Vec<PadModule>, BenchError> {
        opts.pads
            .iter()
            .filter(|p| p.at == at)
            .map(|&p| load_pad(ctx, p))
            .collect()
    };
    let pads_first = pads_at(PadWhere::First)?;
    let gemv = load_gemv(ctx, opts, opts.kernel, 0, pdl, false)?;
    let shapes = layouts(opts.format);
    let names = ["q|k|v", "o", "gate|up", "down", "lm_head"];
    let alt = match &opts.alt {
        Some(a) => Some((
            load_gemv(ctx, opts, a.kernel, a.first_loads, pdl, a.evict_first)?,
            a.parts,
        )),
        None => None,
    };
    let alt_tag = match &opts.alt {
        Some(a) if a.evict_first => " (alt, L2 evict-first)",
        _ => " (alt)",
    };
    let pads_mid = pads_at(PadWhere::Mid)?;
    let kernels = names
        .iter()
        .zip(&shapes)
        .zip(GEMV_PART_BITS)
        .map(|((name, l), bit)| {
            let (g, tag) = match &alt {
                Some((g, parts)) if parts & bit != 0 => (g, alt_tag),
                _ => (&gemv, ""),
            };
            let k = g.resolve(l.format, l.rows.div_ceil(32), l.data_row_bytes() / 128);
            let first = match (k, g.pp_first_loads) {
                (GemvKernel::PingPong, 1) => ", first chunk after the PDL wait",
                (GemvKernel::PingPong, 2) => ", odd warps' first chunk after the PDL wait",
                _ => "",
            };
            format!("{name} {k:?}{tag}{first}")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut k = Kernels {
        gemv,
        alt,
        attn: match opts.attn_l2 {
            Some(ef) => AttentionDecode::load_variant(ctx, ef)?,
            None => AttentionDecode::load(ctx)?,
        },
        ops: DecodeOps::load(ctx)?,
        mode: opts.attn,
        fused: false,
        skip: 0,
    };
    if let Some(mk) = opts.attn_min_keys {
        k.attn.min_keys = mk;
    }
    k.attn.set_onepass_tc(opts.attn_tc)?;
    let copy_gbps = copy_bandwidth_gbps(ctx, 1 << 30, 20)?;
    let late_module = opts.late_module.then(|| GemvMma::load(ctx)).transpose()?;
    let owner = Owner::mint("cuda-decode-bench");
    let pad = (opts.pad_mib > 0)
        .then(|| {
            ctx.alloc::<u8>(
                &owner,
                SpanKind::Scratch,
                opts.pad_mib.saturating_mul(1 << 20),
            )
        })
        .transpose()?;
    let t0 = std::time::Instant::now();
    let mut m = build(ctx, &owner, opts, &shapes)?;
    let mode = opts.attn.resolve(m.cap);
    k.set_mode(mode);
    ctx.synchronize()?;
    let setup_s = t0.elapsed().as_secs_f64();
    let live_bytes = ctx.ledger().snapshot().live;
    let start = i32::try_from(opts.context)
        .map_err(|_| BenchError::Options("context exceeds i32".into()))?;

    let fused_check = if opts.fused && opts.skip == 0 {
        Some(check_fused(ctx, &mut k, &mut m, start)?)
    } else {
        k.fused = opts.fused;
        None
    };
    k.skip = opts.skip;
    k.attn.ablate = ((opts.skip >> ABLATE_FIRST_PART) & 31) as u8;
    let pdl_check = if pdl {
        Some(check_pdl(ctx, &mut k, &mut m, start)?)
    } else {
        None
    };

    // Plain launches.
    ctx.write(&mut m.b.pos, &[start])?;
    let plain_ms = time_ms(ctx, 2, opts.steps, || step(&k, &mut m))?;
    let logits_finite = ctx.download(&m.b.logits)?.iter().all(|v| v.is_finite());
    let max_h = ctx
        .download(&m.b.h)?
        .iter()
        .fold(0f32, |a, v| a.max(v.abs()));

    // One step as a CUDA graph; each timed call replays 4 tokens.
    ctx.write(&mut m.b.pos, &[start])?;
    let graph = CudaGraph::capture(ctx, || step(&k, &mut m))?;
    ctx.write(&mut m.b.pos, &[start])?;
    let graph_ms = time_ms(ctx, 1, opts.steps / 4 + 1, || {
        (0..4).try_for_each(|_| graph.launch())
    })? / 4.0;
    let pos_end = ctx.download(&m.b.pos)?.first().copied().unwrap_or(start);
    drop(graph);
    let mut attn_modes = Vec::new();
    if opts.compare_attn {
        for mode in AttnMode::ALL {
            k.set_mode(mode);
            ctx.write(&mut m.b.pos, &[start])?;
            let graph = CudaGraph::capture(ctx, || step(&k, &mut m))?;
            ctx.write(&mut m.b.pos, &[start])?;
            let ms = time_ms(ctx, 1, opts.steps / 4 + 1, || {
                (0..4).try_for_each(|_| graph.launch())
            })? / 4.0;
            attn_modes.push((mode, ms));
        }
        k.set_mode(mode);
    }

    let weight_bytes = (opts.layers * shapes[..4].iter().map(MxLayout::total_bytes).sum::<usize>()
        + shapes[4].total_bytes()) as f64;
    let kv_elem = if opts.f16_kv { 2.0 } else { 4.0 };
    let kv_per_key = (opts.layers * 2 * NKV * HD) as f64 * kv_elem;
    // The timed tokens see context+1 … pos_end keys: the mean is the KV read.
    let mean_keys = (opts.context as f64 + f64::from(pos_end)) / 2.0 + 1.0;
    let kv_bytes = kv_per_key * mean_keys;
    let roofline_ms = (weight_bytes + kv_bytes) / (copy_gbps * 1e9) * 1e3;

    let parts = if opts.parts {
        ctx.write(&mut m.b.pos, &[start])?;
        Some(measure_parts(ctx, &mut k, &mut m, &shapes, opts)?)
    } else {
        None
    };
    drop(m);
    drop(pad);
    drop(late_module);
    drop(pads_first);
    drop(pads_mid);
    ctx.sweep(&owner)?;
    Ok(DecodeBench {
        device: describe(ctx),
        copy_gbps,
        kernels,
        pdl,
        pdl_check,
        fused: opts.fused,
        fused_check,
        setup_s,
        live_bytes,
        weight_bytes,
        kv_bytes,
        roofline_ms,
        graph_ms,
        plain_ms,
        logits_finite,
        max_h,
        parts,
        attn: mode,
        attn_modes,
    })
}

/// The GEMV kernels with `opts`' settings, `kernel` and `first_loads`
/// (`GemvMma::pp_first_loads`).
fn load_gemv(
    ctx: &Arc<CudaContext>,
    opts: &DecodeBenchOptions,
    kernel: GemvKernel,
    first_loads: u8,
    pdl: bool,
    evict_first: bool,
) -> Result<GemvMma, CudaError> {
    let mut g = if evict_first {
        GemvMma::load_evict_first(ctx)?
    } else {
        GemvMma::load(ctx)?
    };
    g.kernel = kernel;
    g.ring_override = opts.ring;
    g.pp_prefetch = opts.pp_prefetch;
    g.pp_first_loads = first_loads;
    g.persistent = opts.persistent;
    g.warps_cap = opts.warps_cap;
    // Auto picks the PDL run's kernels for the PDL-off check as well.
    g.select_as_pdl = pdl;
    Ok(g)
}

/// One step with PDL off, then on, from the same h and position: their logits must
/// agree within 1e-6 of max |logit|. Leaves PDL on and h restored.
fn check_pdl(
    ctx: &CudaContext,
    k: &mut Kernels,
    m: &mut Model,
    start: i32,
) -> Result<(f32, f32), BenchError> {
    let h0 = ctx.download(&m.b.h)?;
    let plain = step_logits(ctx, k, m, &h0, start)?;
    k.gemv.pdl = true;
    if let Some((g, _)) = &mut k.alt {
        g.pdl = true;
    }
    k.attn.pdl = true;
    k.ops.pdl = true;
    let with = step_logits(ctx, k, m, &h0, start)?;
    ctx.write(&mut m.b.h, &h0)?;
    agree(&plain, &with, 1e-6, "one decode step with PDL vs without")
}

/// The logits of one step from residual `h0` at position `start`.
pub(super) fn step_logits(
    ctx: &CudaContext,
    k: &Kernels,
    m: &mut Model,
    h0: &[f32],
    start: i32,
) -> Result<Vec<f32>, CudaError> {
    ctx.write(&mut m.b.h, h0)?;
    ctx.write(&mut m.b.pos, &[start])?;
    step(k, m)?;
    ctx.download(&m.b.logits)
}

/// (max |a − b|, max |a|), or a mismatch when the first exceeds `tolerance` of the
/// second (at least 1).
pub(super) fn agree(
    a: &[f32],
    b: &[f32],
    tolerance: f64,
    what: &str,
) -> Result<(f32, f32), BenchError> {
    let max = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(b).fold(0f32, |d, (p, q)| d.max((p - q).abs()));
    let rel = f64::from(diff) / f64::from(max.max(1.0));
    if rel.is_nan() || rel > tolerance {
        return Err(BenchError::Mismatch {
            what: what.into(),
            rel_err: rel,
            tolerance,
        });
    }
    Ok((diff, max))
}

/// One decode step (all layers + lm_head), then `*pos += 1`.
pub(super) fn step(k: &Kernels, m: &mut Model) -> Result<(), CudaError> {
    if k.fused {
        return step_fused(k, m);
    }
    let scale = 1.0 / (HD as f32).sqrt();
    let (b, cap) = (&mut m.b, m.cap);
    for l in m.layers.iter_mut() {
        k.gemv.rms_norm_prep(&b.h, &l.attn_norm, EPS, &mut b.prep)?;
        k.gemv_for(1).gemv(&l.qkv, &b.prep, &mut b.qkv, false)?;
        attention(k, l, b, cap, scale, true)?;
        k.gemv_for(4).gemv(&l.o, &b.prep, &mut b.h, true)?;
        k.gemv.rms_norm_prep(&b.h, &l.mlp_norm, EPS, &mut b.prep)?;
        k.gemv_for(8).gemv(&l.gate_up, &b.prep, &mut b.gu, false)?;
        k.gemv.swiglu_prep(&b.gu, INTER, &mut b.prep)?;
        k.gemv_for(16).gemv(&l.down, &b.prep, &mut b.h, true)?;
    }
    k.gemv
        .rms_norm_prep(&b.h, &b.final_norm, EPS, &mut b.prep)?;
    k.gemv_for(32)
        .gemv(&m.lm_head, &b.prep, &mut b.logits, false)?;
    k.ops.advance_pos(&mut b.pos)
}

/// One layer's q|k|v → (q/k norm + RoPE + KV store) → attention, as `k.mode` says,
/// into the o projection's x prep (`prep`) or f32 `b.attn`.
pub(super) fn attention(
    k: &Kernels,
    l: &mut Layer,
    b: &mut Bufs,
    cap: usize,
    scale: f32,
    prep: bool,
) -> Result<(), CudaError> {
    let out = if prep {
        AttnOut::Prep(&mut b.prep)
    } else {
        AttnOut::F32(&mut b.attn)
    };
    if matches!(k.mode, AttnMode::Fused | AttnMode::FusedLight) {
        let src = QkvRope {
            qkv: &b.qkv,
            bias: None,
            qk_norm: Some((&l.q_norm, &l.k_norm, EPS)),
            cos: &b.cos,
            sin: &b.sin,
            interleaved: false,
        };
        return k.attn.decode_qkv(
            &src,
            &mut l.cache,
            cap,
            NH,
            NKV,
            HD,
            &b.pos,
            scale,
            &mut b.part,
            out,
        );
    }
    if k.skip & 64 == 0 {
        k.ops.qk_norm_rope_store(
            &b.qkv,
            &l.q_norm,
            &l.k_norm,
            &b.cos,
            &b.sin,
            &b.pos,
            NH,
            NKV,
            EPS,
            &mut b.q,
            &mut l.cache,
        )?;
    }
    k.attn.decode(
        &b.q,
        &l.cache,
        cap,
        NH,
        NKV,
        &b.pos,
        1,
        scale,
        &mut b.part,
        out,
    )
}

/// The KV capacity of the run: what the timed steps need, or the larger one asked for.
fn capacity(opts: &DecodeBenchOptions) -> Result<usize, BenchError> {
    let need = opts.context + 4 * opts.steps + 16;
    match opts.capacity {
        Some(c) if c < need => Err(BenchError::Options(format!(
            "capacity {c} is below the {need} keys the context and timed steps need"
        ))),
        Some(c) => Ok(c),
        None => Ok(need),
    }
}

/// Random weights (one host matrix per kind, a device copy per layer), a KV cache
/// prefilled with `context` random tokens, norms near 1, random h.
fn build(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    opts: &DecodeBenchOptions,
    shapes: &[MxLayout; 5],
) -> Result<Model, BenchError> {
    let cap = capacity(opts)?;
    let mut rng = Rng::new(7);
    // E8M0 scales that keep the activations O(1): FP4 codes have rms ≈ 2.9, E4M3
    // codes drawn uniformly ≈ 108 (2^5 more).
    let scales = match opts.format {
        ElementFormat::Fp4E2M1 => (118, 120),
        _ => (113, 115),
    };
    let mut tiled = Vec::with_capacity(5);
    for l in shapes {
        let (layout, host) = random_mx(l.format, l.rows, l.cols, scales, &mut rng);
        tiled.push(tile_mx(MxView::new(layout, &host)?));
    }
    let near_one =
        |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.uniform(0.8, 1.2)).collect() };
    let filled = opts.context * NKV * HD;
    let kv16: Vec<u16> = (0..cap * NKV * HD)
        .map(|i| {
            if i < filled {
                f16::from_f32(rng.uniform(-2.0, 2.0)).to_bits()
            } else {
                0
            }
        })
        .collect();
    let mut layers = Vec::with_capacity(opts.layers);
    for _ in 0..opts.layers {
        let mut cache = KvCache::new(ctx, owner, opts.f16_kv, cap, NKV)?;
        match &mut cache {
            KvCache::F16 { k, v } => {
                ctx.write(k, &kv16)?;
                ctx.write(v, &kv16)?;
            }
            KvCache::F32 { k, v } => {
                let kv32: Vec<f32> = kv16.iter().map(|b| f16::from_bits(*b).to_f32()).collect();
                ctx.write(k, &kv32)?;
                ctx.write(v, &kv32)?;
            }
        }
        let norm = |rng: &mut Rng, n| ctx.upload(owner, SpanKind::Resident, &near_one(rng, n));
        layers.push(Layer {
            qkv: MxTiled::upload(ctx, owner, &tiled[0])?,
            o: MxTiled::upload(ctx, owner, &tiled[1])?,
            gate_up: MxTiled::upload(ctx, owner, &tiled[2])?,
            down: MxTiled::upload(ctx, owner, &tiled[3])?,
            attn_norm: norm(&mut rng, HIDDEN)?,
            mlp_norm: norm(&mut rng, HIDDEN)?,
            q_norm: norm(&mut rng, HD)?,
            k_norm: norm(&mut rng, HD)?,
            cache,
        });
    }
    let lm_head = MxTiled::upload(ctx, owner, &tiled[4])?;
    let positions: Vec<usize> = (0..cap).collect();
    let (cos, sin) = rope_tables(&positions, HD, HD, 1_000_000.0);
    let h0: Vec<f32> = (0..HIDDEN).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n);
    let start = i32::try_from(opts.context)
        .map_err(|_| BenchError::Options("context exceeds i32".into()))?;
    let b = Bufs {
        h: ctx.upload(owner, SpanKind::Scratch, &h0)?,
        xn: scratch(HIDDEN)?,
        prep: XPrep::new(ctx, owner, INTER)?,
        qkv: scratch((NH + 2 * NKV) * HD)?,
        q: scratch(NH * HD)?,
        attn: scratch(NH * HD)?,
        gu: scratch(2 * INTER)?,
        act: scratch(INTER)?,
        logits: scratch(VOCAB)?,
        part: scratch(attn_partials_len(NH, cap))?,
        pos: ctx.upload(owner, SpanKind::Scratch, &[start])?,
        cos: ctx.upload(owner, SpanKind::Resident, &cos)?,
        sin: ctx.upload(owner, SpanKind::Resident, &sin)?,
        final_norm: ctx.upload(owner, SpanKind::Resident, &near_one(&mut rng, HIDDEN))?,
        prep_n: XPrep::new(ctx, owner, HIDDEN)?,
        ss: scratch(HIDDEN / 32)?,
        prep_f: XPrep::new(ctx, owner, INTER)?,
        pairs: ctx.alloc::<u32>(owner, SpanKind::Scratch, INTER / 32)?,
    };
    Ok(Model {
        layers,
        lm_head,
        b,
        cap,
    })
}

#[cfg(test)]
mod tests {
    use super::{
        ABLATE_FIRST_PART, BenchError, DecodeBenchOptions, GEMV_PART_BITS, PartSet, SKIP_PARTS,
        capacity, parse_parts,
    };

    /// Names become their bits; `none` names nothing; an unknown name, or a part that is
    /// not a GEMV where GEMVs are asked for, is refused with the allowed names.
    #[test]
    fn parts_parse_and_refuse_unknown_names() {
        assert!(matches!(parse_parts("qkv,merge", PartSet::All), Ok(b) if b == 1 | 1 << 10));
        assert!(matches!(parse_parts("none", PartSet::Gemvs), Ok(0)));
        assert!(matches!(parse_parts("o,head", PartSet::Gemvs), Ok(b) if b == 4 | 32));
        let Err(BenchError::Options(e)) = parse_parts("attn", PartSet::Gemvs) else {
            panic!("attn is not a GEMV");
        };
        assert!(e.contains("`attn`") && e.ends_with("(known: none, qkv, o, gate_up, down, head)"));
        assert!(matches!(
            parse_parts("qkv,bogus", PartSet::All),
            Err(BenchError::Options(_))
        ));
    }

    /// The GEMVs' bits name q|k|v, o, gate|up, down and the lm_head, in `layouts`' order.
    #[test]
    fn gemv_part_bits_name_the_gemvs() {
        let names = GEMV_PART_BITS.map(|b| SKIP_PARTS[b.trailing_zeros() as usize]);
        assert_eq!(names, ["qkv", "o", "gate_up", "down", "head"]);
        assert!(GEMV_PART_BITS.iter().all(|b| b.is_power_of_two()));
    }

    /// `ablate`'s bits follow `SKIP_PARTS` from `split` on, in `ablate`'s order.
    #[test]
    fn ablate_parts_start_at_their_bit() {
        let first = ABLATE_FIRST_PART as usize;
        assert_eq!(
            SKIP_PARTS[first..],
            ["split", "combine", "score", "merge", "merge_math"]
        );
    }

    /// The capacity is what the context and timed steps need unless a larger one is
    /// asked for; a smaller one is refused before anything is allocated.
    #[test]
    fn capacity_covers_the_timed_steps() {
        let opts = DecodeBenchOptions::default();
        let need = opts.context + 4 * opts.steps + 16;
        assert!(matches!(capacity(&opts), Ok(c) if c == need));
        let big = DecodeBenchOptions {
            capacity: Some(4096),
            ..Default::default()
        };
        assert!(matches!(capacity(&big), Ok(4096)));
        let small = DecodeBenchOptions {
            capacity: Some(need - 1),
            ..Default::default()
        };
        assert!(matches!(capacity(&small), Err(BenchError::Options(m)) if m.contains("below")));
    }
}
