//! The Llama / Qwen2 / Qwen3 decoder on a CUDA GPU (feature `cuda`).
//!
//! Key design choices:
//! - Weights come from the host loader in MXFP8 (default) or MXFP4 and are re-tiled
//!   and uploaded once ([`upload`]); norms and biases stay f32. The embedding table
//!   stays on the host: one row per token is looked up there and copied to the device
//!   (a few KB), which keeps the device step free of a gather over an MX table.
//! - The KV cache lives on the device (f16 by default), its length is the one knob,
//!   sized from the CUDA ledger's `room()` after the weights are resident.
//! - One token step (every layer, then `*pos += 1`) is captured once as a CUDA graph
//!   and replayed: every kernel reads the position from device memory. The attention
//!   grid covers a fixed key capacity, so graphs are captured per capacity bucket (256,
//!   1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, the cache) and a step
//!   uses the smallest bucket holding its keys; short chats never launch blocks for 32k
//!   keys. The final norm + lm_head is a
//!   second graph, run only where logits are wanted.
//! - Prefill of more than one token runs in chunks ([`prefill`]): every step batched
//!   over the chunk's tokens (causal flash attention over the same cache) except the
//!   projections, which run as exact-operand GEMMs (`MxGemm`), or as FP8 tensor-core
//!   GEMMs with `PrefillMode::Fp8`; only the last token's
//!   logits are computed (q/k-norm models too: the norms run in the chunk's RoPE
//!   launch). `FAVLO_CUDA_PREFILL=loop` (for comparisons) keeps the token loop over the
//!   decode step.
//! - A step with no penalties, logprobs or grammar picks its token on the device
//!   (`forward_choose`: greedy, or temperature / top-k / top-p / min-p with the host
//!   sampler's draw as the uniform) and copies back 8 bytes; otherwise the logits of
//!   the last token are copied to the host, where the existing sampler runs, so
//!   generation, streaming and the `LanguagePipeline` seam are unchanged.

mod batch;
mod graphs;
mod prefill;
mod upload;

use std::sync::Arc;

use favlo_runtime::cpu::RopeLayout;
use favlo_runtime::cuda::{
    AttentionDecode, AttnKernel, AttnOut, CudaContext, CudaError, CudaGraph, DecodeOps,
    DeviceBuffer, DeviceSampler, Epilogue, GEMV_BATCH_MAX, GemmMx, GemvMma, KernelSet, KvCache,
    MxTiled, NormIn, PrefillOps, QkvRope, RopeStore, SAMPLE_OUT_LEN, SampleParams, XPrep,
    warm_kernels,
};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use crate::PrefillMode;
use crate::config::LlamaConfig;
use crate::error::LlamaError;
use crate::rotary::Rotary;
use crate::weights::{Matrix, Weights};
use graphs::{GRAPH_BYTES, GraphCache, MAX_BATCH_GRAPHS, MAX_STEP_GRAPHS};
use upload::DevLayer;

/// Most keys the attention kernels' combine step handles (1024 splits of 32).
pub(crate) const MAX_CONTEXT: usize = 32_768;
/// Attention capacity buckets below the cache's own capacity: the two-pass attention's
/// grid covers its capacity, so a bucket close to the keys saves it work. H200, random
/// Qwen3-8B, `favlo bench chat --context 32768` (docs/CUDA-JOURNAL.md, session 23): 2048 for
/// 1537..1792 keys, 479.3–480.7 tok/s against 437.0–437.6 in the 4096 bucket (then on
/// the one-pass kernel); 3072 for 2561..2752 keys, 444.5–447.4 against 425.2–425.5.
/// Past 4096 (session 24) for the batched decode, whose two-pass kernels run at every
/// length: 4 sequences at 6145..6208 keys 662.9–669.2 tok/s in all in an 8192 bucket
/// against 518.7–520.7 in 16384; then 6144, 12288 and 24576 too: 4 sequences at
/// 4609.., 10241.. and 20481.. keys 745.3 / 547.5 / 352.6 against 697.0 / 492.3 / 310.7
/// (one sequence runs the one-pass kernel there, whose grid follows the keys: equal).
const BUCKETS: [usize; 10] = [
    256, 1024, 2048, 3072, 4096, 6144, 8192, 12_288, 16_384, 24_576,
];

/// The attention capacity a step over `keys` keys runs in: the smallest bucket that
/// holds them, else the cache's own `capacity`.
fn bucket(keys: usize, capacity: usize) -> usize {
    BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= keys && b < capacity)
        .unwrap_or(capacity)
}

/// Above this capacity the batched step runs each sequence's one-pass attention
/// instead of the batched two-pass kernels, whose cost grows two to five times faster
/// per key (the combine reads 64 splits per round, one round trip each). Measured on
/// an H200 (random Qwen3-8B, MXFP4, tok/s in all, two-pass → per-sequence one-pass):
/// at 10241.. keys (12288 bucket) 2 / 3 / 4 sequences 436.7 → 455.8, 508.5 → 514.2,
/// 571.9 → 562.4 (about even); at 20481.. keys (24576) 303.9 → 360.4, 342.9 → 394.8,
/// 375.6 → 423.4.
const BATCH_ONEPASS_ABOVE: usize = 8192;

/// [`Kernels::batch_onepass_above`] from `FAVLO_CUDA_BATCH_ATTN` (for comparisons):
/// `onepass` wherever the capacity resolves to the one-pass kernel, `twopass` never,
/// else [`BATCH_ONEPASS_ABOVE`].
fn batch_onepass_above(var: Option<&str>) -> usize {
    match var {
        Some("onepass") => 0,
        Some("twopass") => usize::MAX,
        _ => BATCH_ONEPASS_ABOVE,
    }
}

/// Captures `f` as a graph named `what`, logging (at debug level) the device memory the
/// driver took for it: free memory before and after, which the ledger does not see
/// (read only when that level is on).
fn capture(
    ctx: &CudaContext,
    what: &str,
    f: impl FnOnce() -> Result<(), CudaError>,
) -> Result<CudaGraph, LlamaError> {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return CudaGraph::capture(ctx, f).map_err(dev_err);
    }
    let before = ctx.mem_info().map_err(dev_err)?.0;
    let g = CudaGraph::capture(ctx, f).map_err(dev_err)?;
    let after = ctx.mem_info().map_err(dev_err)?.0;
    tracing::debug!(
        "captured the {what}: {} KiB of device memory",
        before.saturating_sub(after) / 1024
    );
    Ok(g)
}

/// The error for a missing sequence buffer (an opening always has sequence 0).
fn no_sequence() -> LlamaError {
    LlamaError::Device {
        message: "the opening has no such sequence".into(),
    }
}

pub(crate) fn dev_err(e: CudaError) -> LlamaError {
    match e {
        CudaError::Ledger(l) => LlamaError::Ledger(l),
        other => LlamaError::Device {
            message: other.to_string(),
        },
    }
}

/// Options of the device model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CudaOptions {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// KV cache in f16 (else f32).
    pub kv_f16: bool,
    /// Most prompt tokens per batched prefill chunk (`None`: the mode's default, which
    /// gives way to a smaller one rather than shorten the context).
    pub prefill_chunk: Option<usize>,
    /// The batched prefill's projections: exact, or FP8 GEMMs.
    pub prefill: PrefillMode,
    /// Sequences decoded together (1..=4), each with its own KV cache of the
    /// context's length ([`batch`]).
    pub sequences: usize,
}

struct Kernels {
    gemv: GemvMma,
    attn: AttentionDecode,
    rope: RopeStore,
    ops: DecodeOps,
    prefill: PrefillOps,
    /// The batched step runs each sequence's one-pass attention (with its prologue)
    /// where the bucket's capacity exceeds this (and resolves to the one-pass kernel),
    /// else the batched two-pass kernels: [`batch_onepass_above`].
    batch_onepass_above: usize,
}

/// Step buffers every sequence shares.
struct Bufs {
    /// RoPE tables [capacity][head_dim / 2].
    cos: DeviceBuffer<f32>,
    sin: DeviceBuffer<f32>,
    /// The batch-1 step's fused RMSNorms' partial sums of squares (one per 32 values of
    /// h) and fused SwiGLU's pair counters (one per 32 values of the intermediate).
    ss: DeviceBuffer<f32>,
    pairs: DeviceBuffer<u32>,
}

/// Shape numbers of the step.
#[derive(Clone, Copy)]
struct Dims {
    hidden: usize,
    q_dim: usize,
    kv_dim: usize,
    ff: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    eps: f32,
    scale: f32,
    interleaved: bool,
    vocab: usize,
}

/// A model resident on one GPU with its KV cache and captured step graphs.
pub(crate) struct CudaLlama {
    ctx: Arc<CudaContext>,
    k: Kernels,
    layers: Vec<DevLayer>,
    head: MxTiled,
    out_norm: DeviceBuffer<f32>,
    b: Bufs,
    dims: Dims,
    capacity: usize,
    /// Per sequence, its KV cache per layer (sequence 0 is the batch-1 step's).
    kv: Vec<Vec<KvCache>>,
    /// Per sequence, its step buffers (sequence 0's serve the batch-1 step).
    seqs: Vec<batch::SeqBufs>,
    /// Batched steps: ((sequence mask, attention capacity), graph).
    batch_body: GraphCache<(u32, usize), CudaGraph>,
    /// Batched final norm + lm_head per sequence mask.
    batch_head: Vec<(u32, CudaGraph)>,
    /// ((sequence, attention capacity), graph of one token step of that sequence over
    /// every layer): sequence 0's serve the batch-1 chat, the others a sequence that
    /// decodes alone in an opening of several.
    body: GraphCache<(usize, usize), CudaGraph>,
    head_graph: Option<CudaGraph>,
    weight_bytes: u64,
    x_host: Vec<f32>,
    /// Batched prefill scratch (None: prefill is the token loop).
    chunk: Option<prefill::ChunkBufs>,
    /// Embedded rows of a prefill chunk on the host.
    rows_host: Vec<f32>,
    /// The device sampler and its 8-byte result.
    sampler: (DeviceSampler, DeviceBuffer<u32>),
    /// Steps may pick their token on the device (`FAVLO_CUDA_SAMPLE=host`, read once
    /// at open, says no: the logits go back to the host sampler, for comparisons).
    pub(crate) device_sampling: bool,
}

/// K padded for either MX format (FP4 pads to 256 values, FP8 to 128).
fn padded(k: usize) -> usize {
    k.div_ceil(256) * 256
}

impl CudaLlama {
    /// Opens device `opts.ordinal`, uploads `w` and sizes the KV cache: the largest
    /// context in `min_ctx..=max_ctx` (at most [`MAX_CONTEXT`]) that fits the device
    /// ledger's room after the weights.
    pub(crate) fn open(
        cfg: &LlamaConfig,
        w: &Weights,
        owner: &Owner,
        opts: CudaOptions,
        min_ctx: usize,
        max_ctx: usize,
        name: &str,
    ) -> Result<CudaLlama, LlamaError> {
        let ctx = CudaContext::open(opts.ordinal, None).map_err(dev_err)?;
        // First run: compile the chat kernels side by side into the disk cache (the
        // loads below then read it).
        let t0 = std::time::Instant::now();
        let warm = warm_kernels(&ctx.arch(), KernelSet::Chat).map_err(dev_err)?;
        if !warm.compiled.is_empty() {
            tracing::info!(
                "compiled {} CUDA kernel modules for {} in {:.1} s (cached from now on)",
                warm.compiled.len(),
                ctx.arch(),
                t0.elapsed().as_secs_f64()
            );
        }
        let (d, ff, qd, kvd, hd) = (
            cfg.hidden,
            cfg.intermediate,
            cfg.q_dim(),
            cfg.kv_dim(),
            cfg.head_dim,
        );
        let unsupported = |what: String| LlamaError::Request {
            message: format!("{name} cannot run on CUDA yet: {what}"),
        };
        if hd != 64 && hd != 128 {
            return Err(unsupported(format!("head_dim {hd} (64 or 128 only)")));
        }
        if cfg.rope_dim != hd {
            return Err(unsupported(format!(
                "partial RoPE ({} of {hd})",
                cfg.rope_dim
            )));
        }
        if !d.is_multiple_of(32) || !ff.is_multiple_of(32) {
            return Err(unsupported(format!(
                "hidden {d} / intermediate {ff} not multiples of 32"
            )));
        }
        let interleaved = cfg.rope_layout == RopeLayout::Interleaved;
        let has_qk_norm = w.layers.first().is_some_and(|l| l.q_norm.is_some());
        if has_qk_norm && (hd != 128 || interleaved || w.layers[0].qkv_bias.is_some()) {
            return Err(unsupported(
                "q/k norm with heads other than 128 NeoX without bias".into(),
            ));
        }
        let head = upload::matrix(&ctx, owner, w.head(), "output")?;
        let out_norm = upload::vector(&ctx, owner, &w.out_norm)?;
        // The context: KV (+ rope tables, attention partials) per token after weights
        // and the fixed per-step buffers.
        let elem = if opts.kv_f16 { 2 } else { 4 };
        let per_tok = (cfg.n_layers * 2 * kvd * elem + hd * 4 + cfg.n_heads * 132 * 4 / 32) as u64;
        // Buffers (x preparations ~2.1 × 4 bytes per value, q|k|v, gate|up, logits),
        // 16 MiB for the kernel modules and the lm_head graphs, and the step graphs.
        let values =
            3 * padded(d.max(qd).max(ff)) * 3 + d + 2 * (qd + 2 * kvd) + 2 * ff + d / 32 + ff / 32;
        // Batched prefill unless `FAVLO_CUDA_PREFILL=loop` turns it off.
        let batched = std::env::var("FAVLO_CUDA_PREFILL").map_or(true, |v| v != "loop");
        let fp8 = batched && opts.prefill == PrefillMode::Fp8;
        if fp8 && !GemmMx::supports(&ctx.arch()) {
            return Err(LlamaError::Request {
                message: format!(
                    "{name}: the FP8 prefill needs a Hopper GPU (sm_90a tensor cores); cuda:{} is {}: use the exact prefill",
                    opts.ordinal,
                    ctx.arch()
                ),
            });
        }
        // The FP8 gate|up GEMM writes SwiGLU itself where the weights can be paired.
        let paired = fp8 && upload::paired_gate_up(ff);
        let chunk_bytes = |chunk: usize| {
            if batched {
                prefill::chunk_bytes(chunk, (d, qd, kvd, ff), fp8, paired)
            } else {
                0
            }
        };
        let seqs = opts.sequences;
        if !(1..=GEMV_BATCH_MAX).contains(&seqs) {
            return Err(LlamaError::Request {
                message: format!("{name}: {seqs} sequences (1..={GEMV_BATCH_MAX} on CUDA)"),
            });
        }
        if seqs > 1 && !batched {
            return Err(LlamaError::Request {
                message: format!(
                    "{name}: {seqs} sequences need the batched prefill (FAVLO_CUDA_PREFILL=loop turns it off)"
                ),
            });
        }
        // Every sequence holds its own step buffers and logits; the step graphs the
        // opening may keep take driver memory of their own.
        let graphs = MAX_STEP_GRAPHS + if seqs > 1 { MAX_BATCH_GRAPHS } else { 0 };
        let fixed = ((values + cfg.vocab_size) * 4 * seqs + (16 << 20)) as u64
            + graphs as u64 * GRAPH_BYTES;
        let layer_bytes: u64 = w
            .layers
            .iter()
            .map(|l| l.qkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes())
            .sum::<u64>()
            + if fp8 {
                cfg.n_layers as u64 * prefill::fp8_layer_bytes((d, qd, kvd, ff))
            } else {
                0
            };
        let max_ctx = max_ctx.min(MAX_CONTEXT);
        let min_ctx = min_ctx.min(max_ctx);
        let request = format!(
            "{name} on cuda:{} with a {min_ctx}-token context",
            opts.ordinal
        );
        // The chunk and the context together: a default chunk gives way to a smaller one
        // rather than shorten the context (`prefill_chunk::choose`).
        let (chunk_len, capacity) =
            crate::prefill_chunk::choose(opts.prefill_chunk, opts.prefill, max_ctx, |chunk| {
                let base = layer_bytes + fixed + chunk_bytes(chunk);
                ledger::fit(ctx.ledger(), &request, min_ctx, max_ctx, |c| {
                    base + per_tok * (c * seqs) as u64
                })
            })?;
        tracing::debug!("{name}: prefill chunks of {chunk_len} tokens, context {capacity}");
        let layers = w
            .layers
            .iter()
            .enumerate()
            .map(|(li, l)| upload::layer(&ctx, owner, l, li))
            .collect::<Result<Vec<_>, _>>()?;
        let kv_shape = (opts.kv_f16, capacity, cfg.n_kv_heads, hd);
        let kv = (0..seqs)
            .map(|_| upload::kv_caches(&ctx, owner, w.layers.len(), kv_shape))
            .collect::<Result<Vec<_>, _>>()?;
        // RoPE tables [capacity][hd/2] in f64 from the CPU path's inverse frequencies.
        let inv = Rotary::new(cfg).inv_freq_f64();
        let mut c = Vec::with_capacity(capacity * inv.len());
        let mut s = Vec::with_capacity(capacity * inv.len());
        for p in 0..capacity {
            for f in &inv {
                let a = p as f64 * f;
                c.push(a.cos() as f32);
                s.push(a.sin() as f32);
            }
        }
        let e = dev_err;
        let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n).map_err(e);
        let seq_bufs = (0..seqs)
            .map(|_| batch::SeqBufs::new(&ctx, owner, cfg, capacity))
            .collect::<Result<Vec<_>, _>>()?;
        let b = Bufs {
            cos: ctx.upload(owner, SpanKind::Resident, &c).map_err(e)?,
            sin: ctx.upload(owner, SpanKind::Resident, &s).map_err(e)?,
            ss: scratch(d / 32)?,
            pairs: ctx
                .alloc::<u32>(owner, SpanKind::Scratch, ff / 32)
                .map_err(e)?,
        };
        let mut k = Kernels {
            gemv: GemvMma::load(&ctx).map_err(e)?,
            attn: AttentionDecode::load(&ctx).map_err(e)?,
            rope: RopeStore::load(&ctx).map_err(e)?,
            ops: DecodeOps::load(&ctx).map_err(e)?,
            prefill: PrefillOps::load(&ctx).map_err(e)?,
            batch_onepass_above: batch_onepass_above(
                std::env::var("FAVLO_CUDA_BATCH_ATTN").ok().as_deref(),
            ),
        };
        // The device sampler, loaded now so the first request does not compile it.
        let sampler = (
            DeviceSampler::load(&ctx).map_err(e)?,
            ctx.alloc::<u32>(owner, SpanKind::Scratch, SAMPLE_OUT_LEN)
                .map_err(e)?,
        );
        // The FP8 prefill's weight tiles (counted in the fit above).
        let fp8_layers = if fp8 {
            let tiles = w.layers.iter().enumerate();
            Some(
                tiles
                    .map(|(li, l)| upload::fp8_layer(&ctx, owner, l, li, paired))
                    .collect::<Result<Vec<_>, _>>()?,
            )
        } else {
            None
        };
        let chunk = if batched {
            Some(prefill::ChunkBufs::new(
                &ctx,
                owner,
                chunk_len,
                (d, qd, kvd, ff),
                fp8_layers,
            )?)
        } else {
            None
        };
        // Programmatic dependent launch on every step kernel (same results, measured
        // bit-identical in cuda_decode_bench; each kernel waits before reading).
        // (sm_90+ only: older GPUs have no programmatic launches, and the kernels' waits
        // compile to nothing there.)
        let pdl = ctx.compute_capability().0 >= 9;
        k.gemv.pdl = pdl;
        k.attn.pdl = pdl;
        // The one-pass attention runs its tensor-core loop over f16 caches;
        // `FAVLO_CUDA_ATTN_TC=0` picks its FMA loop (for comparisons).
        if std::env::var("FAVLO_CUDA_ATTN_TC").is_ok_and(|v| v == "0") {
            k.attn.set_onepass_tc(false).map_err(e)?;
        }
        k.rope.pdl = pdl;
        k.ops.pdl = pdl;
        let weight_bytes = head.device_bytes()
            + layers
                .iter()
                .map(|l| {
                    l.qkv.device_bytes()
                        + l.o.device_bytes()
                        + l.gate_up.device_bytes()
                        + l.down.device_bytes()
                })
                .sum::<u64>();
        ctx.synchronize().map_err(e)?;
        Ok(CudaLlama {
            dims: Dims {
                hidden: d,
                q_dim: qd,
                kv_dim: kvd,
                ff,
                n_heads: cfg.n_heads,
                n_kv_heads: cfg.n_kv_heads,
                head_dim: hd,
                eps: cfg.rms_eps,
                scale: 1.0 / (hd as f32).sqrt(),
                interleaved,
                vocab: cfg.vocab_size,
            },
            x_host: vec![0.0; d],
            ctx,
            k,
            layers,
            head,
            out_norm,
            b,
            capacity,
            kv,
            seqs: seq_bufs,
            batch_body: GraphCache::new(MAX_BATCH_GRAPHS),
            batch_head: Vec::new(),
            body: GraphCache::new(MAX_STEP_GRAPHS),
            head_graph: None,
            weight_bytes,
            chunk,
            rows_host: Vec::new(),
            sampler,
            device_sampling: std::env::var("FAVLO_CUDA_SAMPLE").map_or(true, |v| v != "host"),
        })
    }

    /// Tokens the device KV cache holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of the MX matrices on the device.
    pub(crate) fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// The device's name and ordinal, e.g. `cuda:0 (NVIDIA H200)`.
    pub(crate) fn device_name(&self) -> String {
        format!("cuda:{} ({})", self.ctx.ordinal(), self.ctx.name())
    }

    /// Runs `ids` at positions `n_past..` (checked by the caller), embedding each token
    /// with `embed` on the host; `logits` gets the last token's (or, with `all`, every
    /// token's) logits.
    pub(crate) fn forward(
        &mut self,
        embed: &Matrix,
        ids: &[u32],
        n_past: usize,
        logits: &mut [f32],
        all: bool,
    ) -> Result<(), LlamaError> {
        let e = dev_err;
        let vocab = self.dims.vocab;
        if !all {
            self.advance(embed, ids, n_past)?;
            self.head_graph()?.launch().map_err(e)?;
            self.copy_logits(&[0], &mut logits[..vocab])?;
            return self.ctx.synchronize().map_err(e);
        }
        self.write_pos(n_past)?;
        for (i, &id) in ids.iter().enumerate() {
            self.step_token(embed, id, n_past + i)?;
            self.head_graph()?.launch().map_err(e)?;
            self.copy_logits(&[0], &mut logits[i * vocab..(i + 1) * vocab])?;
        }
        self.ctx.synchronize().map_err(e)
    }

    /// Runs `ids` like [`Self::forward`] and picks the last token on the device with
    /// the host sampler's rule (`p`, the draw `uniform`; greedy: the largest logit, the
    /// lowest id among equals), copying back 8 bytes instead of the logits.
    pub(crate) fn forward_choose(
        &mut self,
        embed: &Matrix,
        ids: &[u32],
        n_past: usize,
        p: &SampleParams,
        uniform: f64,
    ) -> Result<u32, LlamaError> {
        self.advance(embed, ids, n_past)?;
        self.head_graph()?.launch().map_err(dev_err)?;
        self.pick(0, p, uniform)
    }

    /// Runs `ids` at positions `n_past..` through every layer (batched prefill when it
    /// applies, else the token loop), leaving the last token's hidden state in `h`.
    fn advance(&mut self, embed: &Matrix, ids: &[u32], n_past: usize) -> Result<(), LlamaError> {
        if self.batched_prefill(ids.len()) {
            return self.prefill(embed, ids, n_past, 0);
        }
        self.write_pos(n_past)?;
        for (i, &id) in ids.iter().enumerate() {
            self.step_token(embed, id, n_past + i)?;
        }
        Ok(())
    }

    fn write_pos(&mut self, n_past: usize) -> Result<(), LlamaError> {
        let pos = i32::try_from(n_past).map_err(|_| LlamaError::Request {
            message: format!("position {n_past}"),
        })?;
        let ctx = std::sync::Arc::clone(&self.ctx);
        ctx.write(&mut self.seq_mut(0)?.pos, &[pos])
            .map_err(dev_err)
    }

    /// One token at position `at` (= the device's `*pos`) through the step graph of the
    /// smallest attention bucket that holds its keys.
    fn step_token(&mut self, embed: &Matrix, id: u32, at: usize) -> Result<(), LlamaError> {
        embed.embed(&[id], &mut self.x_host);
        let seq0 = self.seqs.first_mut().ok_or_else(no_sequence)?;
        self.ctx.write(&mut seq0.h, &self.x_host).map_err(dev_err)?;
        let keys = at + 1;
        let bucket = bucket(keys, self.capacity);
        self.body_graph(0, bucket)?.launch().map_err(dev_err)
    }

    /// Sequence `seq`'s step graph for attention capacity `bucket`, captured on first
    /// use (and again if it was dropped for newer ones, [`graphs`]).
    fn body_graph(&mut self, seq: usize, bucket: usize) -> Result<&CudaGraph, LlamaError> {
        let (k, d, b, layers) = (&self.k, self.dims, &mut self.b, &self.layers);
        let n = self.seqs.len();
        let (kv, seqs, ctx) = (&mut self.kv, &mut self.seqs, &self.ctx);
        self.body.get_or_make((seq, bucket), || {
            let missing = || batch::not_a_sequence(seq, n);
            let kv = kv.get_mut(seq).ok_or_else(missing)?;
            let sb = seqs.get_mut(seq).ok_or_else(missing)?;
            let what = format!("step graph of sequence {seq}, bucket {bucket}");
            capture(ctx, &what, || step(k, d, layers, kv, sb, b, bucket))
        })
    }

    fn head_graph(&mut self) -> Result<&CudaGraph, LlamaError> {
        if self.head_graph.is_none() {
            let (k, d) = (&self.k, self.dims);
            let b = self.seqs.first_mut().ok_or_else(no_sequence)?;
            let (head, norm) = (&self.head, &self.out_norm);
            let g = capture(&self.ctx, "lm_head graph", || {
                k.gemv.rms_norm_prep(&b.h, norm, d.eps, &mut b.prep_d)?;
                k.gemv.gemv(head, &b.prep_d, &mut b.logits, false)
            })?;
            self.head_graph = Some(g);
        }
        self.head_graph.as_ref().ok_or_else(|| LlamaError::Device {
            message: "lm_head graph missing".into(),
        })
    }
}

impl Drop for CudaLlama {
    fn drop(&mut self) {
        // Let queued work finish before the buffers go (their frees are stream-ordered).
        let _ = self.ctx.synchronize();
    }
}

/// The consumer side of a fused RMSNorm of h over the partials `parts`.
fn norm_in(parts: &DeviceBuffer<f32>, d: Dims) -> NormIn<'_> {
    NormIn {
        parts,
        dim: d.hidden,
        eps: d.eps,
    }
}

/// One token through every layer at position `*pos`, then `*pos += 1`: the first
/// RMSNorm's x preparation, then 7 launches per layer: q|k|v (applying 1/rms), the
/// bias/norm with RoPE and the KV store, attention (2), o (+residual; prepares the MLP
/// norm), gate|up (applying 1/rms; prepares SwiGLU), down (+residual; prepares the next
/// layer's norm); 5 where the capacity runs the one-pass attention ([`attention`]).
/// The norms and SwiGLU run in the GEMVs' epilogues (`Epilogue`); the last layer's
/// output is left for the head graph's own norm.
fn step(
    k: &Kernels,
    d: Dims,
    layers: &[DevLayer],
    kv: &mut [KvCache],
    b: &mut batch::SeqBufs,
    sh: &mut Bufs,
    attn_capacity: usize,
) -> Result<(), CudaError> {
    if let Some(first) = layers.first() {
        k.gemv
            .norm_parts_prep(&b.h, &first.attn_norm, &mut b.prep_d, &mut sh.ss)?;
    }
    for (i, cache) in kv.iter_mut().enumerate().take(layers.len()) {
        let (done, rest) = layers.split_at(i + 1);
        let Some(l) = done.last() else { break };
        let qkv = Epilogue::normed(norm_in(&sh.ss, d));
        k.gemv.gemv_fused(&l.qkv, &b.prep_d, &mut b.qkv, qkv)?;
        attention(k, d, l, cache, b, sh, attn_capacity)?;
        let o = Epilogue::residual_norm(&l.ffn_norm, &mut b.prep_d, &mut sh.ss);
        k.gemv.gemv_fused(&l.o, &b.prep_a, &mut b.h, o)?;
        let gate_up = Epilogue::normed_swiglu(norm_in(&sh.ss, d), &mut b.prep_f, &mut sh.pairs);
        k.gemv
            .gemv_fused(&l.gate_up, &b.prep_d, &mut b.gu, gate_up)?;
        let down = match rest.first() {
            Some(next) => Epilogue::residual_norm(&next.attn_norm, &mut b.prep_d, &mut sh.ss),
            None => Epilogue::plain(true),
        };
        k.gemv.gemv_fused(&l.down, &b.prep_f, &mut b.h, down)?;
    }
    k.ops.advance_pos(&mut b.pos)
}

/// One layer's attention from the q|k|v projection to the o projection's x
/// preparation. Where the capacity runs the one-pass kernel, the q/k norm (or bias),
/// RoPE and KV store run in its prologue (`decode_qkv`: one launch); else
/// `qk_norm_rope_store` (or `bias_rope_store`) and the two-pass attention (three).
fn attention(
    k: &Kernels,
    d: Dims,
    l: &DevLayer,
    cache: &mut KvCache,
    b: &mut batch::SeqBufs,
    sh: &Bufs,
    attn_capacity: usize,
) -> Result<(), CudaError> {
    if k.attn.kernel.resolve(attn_capacity) == AttnKernel::OnePass {
        let io = OnePassIo {
            qkv: &b.qkv,
            pos: &b.pos,
            part: &mut b.part,
            out: &mut b.prep_a,
        };
        return attention_onepass(k, d, l, cache, io, (&sh.cos, &sh.sin), attn_capacity);
    }
    match (&l.q_norm, &l.k_norm) {
        (Some(qn), Some(kn)) => k.ops.qk_norm_rope_store(
            &b.qkv,
            qn,
            kn,
            &sh.cos,
            &sh.sin,
            &b.pos,
            d.n_heads,
            d.n_kv_heads,
            d.eps,
            &mut b.q,
            cache,
        )?,
        _ => k.rope.bias_rope_store(
            &b.qkv,
            l.qkv_bias.as_ref(),
            &sh.cos,
            &sh.sin,
            &b.pos,
            d.n_heads,
            d.n_kv_heads,
            d.head_dim,
            d.interleaved,
            &mut b.q,
            cache,
        )?,
    }
    k.attn.decode_hd(
        &b.q,
        cache,
        attn_capacity,
        d.n_heads,
        d.n_kv_heads,
        d.head_dim,
        &b.pos,
        1,
        d.scale,
        &mut b.part,
        AttnOut::Prep(&mut b.prep_a),
    )
}

/// One sequence's buffers for [`attention_onepass`].
struct OnePassIo<'a> {
    qkv: &'a DeviceBuffer<f32>,
    pos: &'a DeviceBuffer<i32>,
    part: &'a mut DeviceBuffer<f32>,
    out: &'a mut XPrep,
}

/// One sequence's one-pass attention with the layer's q/k norms (Qwen3) or q|k|v bias
/// (Qwen2), RoPE and the KV store in the kernel's prologue (`decode_qkv`), writing the
/// o projection's x preparation.
fn attention_onepass(
    k: &Kernels,
    d: Dims,
    l: &DevLayer,
    cache: &mut KvCache,
    io: OnePassIo<'_>,
    (cos, sin): (&DeviceBuffer<f32>, &DeviceBuffer<f32>),
    attn_capacity: usize,
) -> Result<(), CudaError> {
    let qk_norm = match (&l.q_norm, &l.k_norm) {
        (Some(qn), Some(kn)) => Some((qn, kn, d.eps)),
        _ => None,
    };
    let src = QkvRope {
        qkv: io.qkv,
        bias: l.qkv_bias.as_ref(),
        qk_norm,
        cos,
        sin,
        interleaved: d.interleaved,
    };
    k.attn.decode_qkv(
        &src,
        cache,
        attn_capacity,
        d.n_heads,
        d.n_kv_heads,
        d.head_dim,
        io.pos,
        d.scale,
        io.part,
        AttnOut::Prep(io.out),
    )
}

#[cfg(test)]
mod tests {
    use super::{BATCH_ONEPASS_ABOVE, BUCKETS, batch_onepass_above, bucket};

    #[test]
    fn a_step_runs_in_the_smallest_bucket_that_holds_its_keys() {
        assert!(BUCKETS.windows(2).all(|w| w[0] < w[1]));
        let cap = 32_768;
        for (keys, want) in [
            (1, 256),
            (256, 256),
            (257, 1024),
            (1537, 2048),
            (2561, 3072),
            (4096, 4096),
            (4097, 6144),
            (6145, 8192),
            (10_241, 12_288),
            (16_385, 24_576),
            (24_577, cap),
            (cap, cap),
        ] {
            assert_eq!(bucket(keys, cap), want, "{keys} keys");
        }
        // A bucket is never the cache's capacity or above it: a 4608-token cache runs
        // 4097.. keys in its own capacity, and one of 4096 runs 3073.. keys in 4096.
        assert_eq!(bucket(4097, 4608), 4608);
        assert_eq!(bucket(4096, 4096), 4096);
        assert_eq!(bucket(3073, 4096), 4096);
        assert_eq!(bucket(200, 512), 256);
        assert_eq!(bucket(300, 512), 512);
    }

    #[test]
    fn the_batch1_step_runs_one_pass_attention_past_the_2048_bucket() {
        use favlo_runtime::cuda::AttnKernel;
        // Session 28's line (the one-pass kernel's tensor-core loop): the 256, 1024 and
        // 2048 buckets run the two-pass kernels, 3072 and up the one-pass kernel.
        for b in BUCKETS {
            let want = if b <= 2048 {
                AttnKernel::TwoPass
            } else {
                AttnKernel::OnePass
            };
            assert_eq!(AttnKernel::Auto.resolve(b), want, "bucket {b}");
        }
        // Where the batched step runs each sequence's one-pass attention, a sequence's
        // batch-1 step runs it too.
        assert_eq!(
            AttnKernel::Auto.resolve(BATCH_ONEPASS_ABOVE + 1),
            AttnKernel::OnePass
        );
    }

    #[test]
    fn the_batched_step_runs_one_pass_attention_past_the_8192_bucket() {
        let above = batch_onepass_above(None);
        assert_eq!(above, BATCH_ONEPASS_ABOVE);
        // The buckets up to 8192 keep the batched two-pass kernels; 12288 and up (and
        // a cache past them) run each sequence's one-pass kernel.
        assert!(
            BUCKETS
                .iter()
                .filter(|&&b| b > above)
                .eq([12_288, 16_384, 24_576].iter())
        );
        assert!(bucket(8192, 32_768) <= above && bucket(8193, 32_768) > above);
        assert_eq!(batch_onepass_above(Some("onepass")), 0);
        assert_eq!(batch_onepass_above(Some("twopass")), usize::MAX);
        assert_eq!(batch_onepass_above(Some("other")), BATCH_ONEPASS_ABOVE);
    }
}
