//! Several sequences decoded together: one token of each per step, the weights streamed
//! once for all of them.
//!
//! Key design choices:
//! - Each sequence owns its KV cache (one per layer, the context's length) and its step
//!   buffers; sequence 0's are the batch-1 step's, so a model opened for one sequence
//!   is exactly what it was. The open sizes the context so every sequence holds it.
//! - A batched step runs the four projections (and the lm_head) as batched GEMVs
//!   (`GemvMma::gemv_batch`: each weight tile is read and decoded once for the batch)
//!   and the per-token work (RMSNorm, RoPE + KV store, two-pass attention, SwiGLU) as
//!   one launch for all sequences, each over its own buffers, cache and position (the
//!   runtime's `_batch` launchers): ten launches per layer whatever the batch. The
//!   fused epilogues of the batch-1 step are not used here: each RMSNorm and the SwiGLU
//!   write their x preparation in kernels of their own. Past the 8192-key bucket each
//!   sequence's one-pass attention (with its prologue) replaces the batched two-pass
//!   kernels, whose cost grows faster with the keys (`FAVLO_CUDA_BATCH_ATTN=onepass` /
//!   `twopass` move that line, for comparisons).
//! - A sequence stepped alone (a lone chat under `serve --parallel N`) runs the
//!   batch-1 step over its own buffers and cache instead (`CudaLlama::body_graph`, a
//!   graph per sequence and bucket): the fused epilogues and the one-pass attention
//!   past 4096 keys, as a chat of a one-sequence opening.
//! - One CUDA graph per set of sequences stepped together (a bit mask, so a batch that
//!   loses a finished sequence replays the graph of the remaining set) and attention
//!   capacity bucket, captured on first use; every kernel reads its sequence's position
//!   from device memory, written by the host before each step, so the graph replays at
//!   any position.

use favlo_runtime::cuda::{
    AttnKernel, AttnSeq, CudaContext, CudaError, DeviceBuffer, KvCache, RopeSeq, SampleParams,
    XPrep, attn_partials_len,
};
use favlo_runtime::ledger::{Owner, SpanKind};

use super::upload::DevLayer;
use super::{
    Bufs, CudaLlama, Dims, Kernels, OnePassIo, attention_onepass, bucket, capture, dev_err, padded,
};
use crate::config::LlamaConfig;
use crate::error::LlamaError;
use crate::weights::Matrix;

/// One sequence's step buffers (sequence 0's also serve the batch-1 step).
pub(super) struct SeqBufs {
    /// The residual stream [hidden].
    pub h: DeviceBuffer<f32>,
    /// x preparations: K = hidden (q|k|v, gate|up, lm_head), q_dim (o), ff (down).
    /// Each is written only by producers of its own width, so the K padding of its
    /// GEMVs always reads the zeros it was allocated with.
    pub prep_d: XPrep,
    pub prep_a: XPrep,
    pub prep_f: XPrep,
    pub qkv: DeviceBuffer<f32>,
    pub q: DeviceBuffer<f32>,
    pub gu: DeviceBuffer<f32>,
    pub logits: DeviceBuffer<f32>,
    /// The attention's split partials.
    pub part: DeviceBuffer<f32>,
    /// The position of the token the next step runs (one i32).
    pub pos: DeviceBuffer<i32>,
}

impl SeqBufs {
    pub(super) fn new(
        ctx: &CudaContext,
        owner: &Owner,
        cfg: &LlamaConfig,
        capacity: usize,
    ) -> Result<SeqBufs, LlamaError> {
        let e = dev_err;
        let (d, qd, kvd, ff) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.intermediate);
        let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n).map_err(e);
        Ok(SeqBufs {
            h: scratch(d)?,
            prep_d: XPrep::new(ctx, owner, padded(d)).map_err(e)?,
            prep_a: XPrep::new(ctx, owner, padded(qd)).map_err(e)?,
            prep_f: XPrep::new(ctx, owner, padded(ff)).map_err(e)?,
            qkv: scratch(qd + 2 * kvd)?,
            q: scratch(qd)?,
            gu: scratch(2 * ff)?,
            logits: scratch(cfg.vocab_size)?,
            part: scratch(attn_partials_len(cfg.n_heads, capacity))?,
            pos: ctx.alloc::<i32>(owner, SpanKind::Scratch, 1).map_err(e)?,
        })
    }
}

/// One sequence's buffers, borrowed for a batched step.
struct SeqIo<'a> {
    h: &'a mut DeviceBuffer<f32>,
    prep_d: &'a mut XPrep,
    prep_a: &'a mut XPrep,
    prep_f: &'a mut XPrep,
    qkv: &'a mut DeviceBuffer<f32>,
    q: &'a mut DeviceBuffer<f32>,
    gu: &'a mut DeviceBuffer<f32>,
    logits: &'a mut DeviceBuffer<f32>,
    part: &'a mut DeviceBuffer<f32>,
    pos: &'a mut DeviceBuffer<i32>,
    kv: &'a mut [KvCache],
}

/// The shared RoPE tables (cos, sin).
type Tables<'a> = (&'a DeviceBuffer<f32>, &'a DeviceBuffer<f32>);

/// The error for sequence `seq` of an opening of `n`.
pub(super) fn not_a_sequence(seq: usize, n: usize) -> LlamaError {
    LlamaError::Request {
        message: format!("sequence {seq} of {n}"),
    }
}

/// The buffers of the sequences in `mask` (bit i = sequence i), in sequence order,
/// and the RoPE tables.
fn seq_ios<'a>(
    b: &'a Bufs,
    seqs: &'a mut [SeqBufs],
    kv: &'a mut [Vec<KvCache>],
    mask: u32,
) -> (Vec<SeqIo<'a>>, Tables<'a>) {
    let ios = seqs
        .iter_mut()
        .zip(kv.iter_mut())
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, (s, kv))| SeqIo {
            h: &mut s.h,
            prep_d: &mut s.prep_d,
            prep_a: &mut s.prep_a,
            prep_f: &mut s.prep_f,
            qkv: &mut s.qkv,
            q: &mut s.q,
            gu: &mut s.gu,
            logits: &mut s.logits,
            part: &mut s.part,
            pos: &mut s.pos,
            kv,
        })
        .collect();
    (ios, (&b.cos, &b.sin))
}

/// One token of every sequence in `s` through every layer at its own `*pos` (written
/// by the host before each step): ten launches per layer whatever the batch (each
/// per-sequence step runs all sequences in one launch, `blockIdx.z` the sequence).
fn step_batch(
    k: &Kernels,
    d: Dims,
    layers: &[DevLayer],
    (cos, sin): Tables<'_>,
    s: &mut [SeqIo<'_>],
    attn_capacity: usize,
) -> Result<(), CudaError> {
    let g = &k.gemv;
    let norm = |s: &mut [SeqIo<'_>], w: &DeviceBuffer<f32>| -> Result<(), CudaError> {
        let (xs, mut outs): (Vec<&DeviceBuffer<f32>>, Vec<&mut XPrep>) =
            s.iter_mut().map(|io| (&*io.h, &mut *io.prep_d)).unzip();
        g.rms_norm_prep_batch(&xs, w, d.eps, &mut outs)
    };
    if let Some(first) = layers.first() {
        norm(s, &first.attn_norm)?;
    }
    for (i, l) in layers.iter().enumerate() {
        let (xs, mut ys): (Vec<&XPrep>, Vec<_>) =
            s.iter_mut().map(|io| (&*io.prep_d, &mut *io.qkv)).unzip();
        g.gemv_batch(&l.qkv, &xs, &mut ys, false)?;
        attention_batch(k, d, l, i, (cos, sin), s, attn_capacity)?;
        let (xs, mut ys): (Vec<&XPrep>, Vec<_>) =
            s.iter_mut().map(|io| (&*io.prep_a, &mut *io.h)).unzip();
        g.gemv_batch(&l.o, &xs, &mut ys, true)?;
        norm(s, &l.ffn_norm)?;
        let (xs, mut ys): (Vec<&XPrep>, Vec<_>) =
            s.iter_mut().map(|io| (&*io.prep_d, &mut *io.gu)).unzip();
        g.gemv_batch(&l.gate_up, &xs, &mut ys, false)?;
        let (gus, mut outs): (Vec<&DeviceBuffer<f32>>, Vec<&mut XPrep>) =
            s.iter_mut().map(|io| (&*io.gu, &mut *io.prep_f)).unzip();
        g.swiglu_prep_batch(&gus, d.ff, &mut outs)?;
        let (xs, mut ys): (Vec<&XPrep>, Vec<_>) =
            s.iter_mut().map(|io| (&*io.prep_f, &mut *io.h)).unzip();
        g.gemv_batch(&l.down, &xs, &mut ys, true)?;
        if let Some(next) = layers.get(i + 1) {
            norm(s, &next.attn_norm)?;
        }
    }
    Ok(())
}

impl CudaLlama {
    /// Sequences this opening decodes together.
    pub(crate) fn sequences(&self) -> usize {
        self.kv.len()
    }

    /// Most tokens one prefill chunk runs (`None`: a token loop, no chunks).
    pub(crate) fn prefill_chunk(&self) -> Option<usize> {
        self.chunk.as_ref().map(super::prefill::ChunkBufs::tokens)
    }

    /// Sequence `seq`'s step buffers.
    pub(super) fn seq(&self, seq: usize) -> Result<&SeqBufs, LlamaError> {
        let n = self.seqs.len();
        self.seqs.get(seq).ok_or_else(|| not_a_sequence(seq, n))
    }

    /// Sequence `seq`'s step buffers, to write.
    pub(super) fn seq_mut(&mut self, seq: usize) -> Result<&mut SeqBufs, LlamaError> {
        let n = self.seqs.len();
        self.seqs.get_mut(seq).ok_or_else(|| not_a_sequence(seq, n))
    }

    /// Runs `ids` at positions `n_past..` of sequence `seq` (the prompt, or the rest of
    /// it) and copies its last token's logits into `logits`.
    pub(crate) fn forward_seq(
        &mut self,
        embed: &Matrix,
        seq: usize,
        ids: &[u32],
        n_past: usize,
        logits: &mut [f32],
    ) -> Result<(), LlamaError> {
        if seq == 0 {
            return self.forward(embed, ids, n_past, logits, false);
        }
        self.seq(seq)?;
        if self.chunk.is_none() {
            return Err(LlamaError::Device {
                message: "prefill buffers missing".into(),
            });
        }
        // The chunked prefill serves any length here (sequence 0's step graph
        // is the only token loop).
        self.prefill(embed, ids, n_past, seq)?;
        self.head_batch(1 << seq)?;
        self.copy_logits(&[seq], logits)?;
        self.ctx.synchronize().map_err(dev_err)
    }

    /// One token of each sequence in `steps` (`(sequence, token id, position)`, the
    /// sequences distinct), every sequence's cache holding its positions before. Step i
    /// with `picks[i] = Some((rule, uniform))` gets its next token chosen on the device
    /// (the device sampler: 8 bytes come back) into `tokens[i]`; the others' logits go to
    /// row i of `logits` (`steps.len()` × vocab). `picks` may be empty (all logits).
    pub(crate) fn decode_batch(
        &mut self,
        embed: &Matrix,
        steps: &[(usize, u32, usize)],
        picks: &[Option<(SampleParams, f64)>],
        logits: &mut [f32],
        tokens: &mut [Option<u32>],
    ) -> Result<(), LlamaError> {
        let n = self.kv.len();
        let mut mask = 0u32;
        for &(seq, _, _) in steps {
            if seq >= n || mask & (1 << seq) != 0 {
                return Err(LlamaError::Request {
                    message: format!("sequence {seq} twice or not among the {n} of this opening"),
                });
            }
            mask |= 1 << seq;
        }
        if steps.is_empty() {
            return Ok(());
        }
        let mut row = std::mem::take(&mut self.x_host);
        let mut keys = 0;
        for &(seq, id, at) in steps {
            let pos = i32::try_from(at).map_err(|_| LlamaError::Request {
                message: format!("position {at}"),
            })?;
            keys = keys.max(at + 1);
            embed.embed(&[id], &mut row);
            let ctx = std::sync::Arc::clone(&self.ctx);
            let sb = self.seq_mut(seq)?;
            ctx.write(&mut sb.h, &row).map_err(dev_err)?;
            ctx.write(&mut sb.pos, &[pos]).map_err(dev_err)?;
        }
        self.x_host = row;
        let bucket = bucket(keys, self.capacity);
        match steps {
            // One sequence alone (a lone chat under `serve --parallel N`): the batch-1
            // step over its own buffers and cache, with the fused epilogues and the
            // one-pass attention where it applies.
            &[(seq, _, _)] => self.body_graph(seq, bucket)?.launch().map_err(dev_err)?,
            _ => self.body_batch(mask, bucket)?,
        }
        self.head_batch(mask)?;
        // `steps`' order, sequence by sequence: a token picked on the device, or the logits.
        let vocab = self.dims.vocab;
        if logits.len() < steps.len() * vocab || tokens.len() < steps.len() {
            return Err(LlamaError::Request {
                message: format!(
                    "logits buffer holds {}, tokens {}; need {} and {}",
                    logits.len(),
                    tokens.len(),
                    steps.len() * vocab,
                    steps.len()
                ),
            });
        }
        let rows = steps
            .iter()
            .zip(logits.chunks_mut(vocab))
            .zip(tokens.iter_mut());
        for (i, ((&(seq, _, _), out), tok)) in rows.enumerate() {
            *tok = None;
            match picks.get(i).copied().flatten() {
                Some((p, uniform)) => *tok = Some(self.pick(seq, &p, uniform)?),
                None => self.copy_logits(&[seq], out)?,
            }
        }
        self.ctx.synchronize().map_err(dev_err)
    }

    /// Sequence `seq`'s next token by the host sampler's rule `p` at draw `uniform`,
    /// chosen where its logits are.
    pub(super) fn pick(
        &mut self,
        seq: usize,
        p: &SampleParams,
        uniform: f64,
    ) -> Result<u32, LlamaError> {
        let vocab = self.dims.vocab;
        let n = self.seqs.len();
        let src = &self
            .seqs
            .get(seq)
            .ok_or_else(|| not_a_sequence(seq, n))?
            .logits;
        let (s, out) = &mut self.sampler;
        s.sample(src, vocab, p, uniform, out).map_err(dev_err)?;
        let (id, _) = s.read(out).map_err(dev_err)?;
        Ok(id)
    }

    /// Copies the logits of `seqs` (in that order) into `out`.
    pub(super) fn copy_logits(&self, seqs: &[usize], out: &mut [f32]) -> Result<(), LlamaError> {
        let vocab = self.dims.vocab;
        if out.len() < seqs.len() * vocab {
            return Err(LlamaError::Request {
                message: format!(
                    "logits buffer holds {}, need {}",
                    out.len(),
                    seqs.len() * vocab
                ),
            });
        }
        for (i, &seq) in seqs.iter().enumerate() {
            let src = &self.seq(seq)?.logits;
            self.ctx
                .stream()
                .memcpy_dtoh(src.slice(), &mut out[i * vocab..(i + 1) * vocab])
                .map_err(|x| {
                    dev_err(CudaError::Driver {
                        op: "cuMemcpyDtoH(logits)",
                        message: format!("{x:?}"),
                    })
                })?;
        }
        Ok(())
    }

    /// Launches the batched step graph of `mask` at attention capacity `bucket`,
    /// capturing it on first use (and again if it was dropped for newer ones).
    fn body_batch(&mut self, mask: u32, bucket: usize) -> Result<(), LlamaError> {
        let (k, d, layers) = (&self.k, self.dims, &self.layers);
        let (b, seqs, kv, ctx) = (&self.b, &mut self.seqs, &mut self.kv, &self.ctx);
        let g = self.batch_body.get_or_make((mask, bucket), || {
            let (mut ios, tables) = seq_ios(b, seqs, kv, mask);
            let what = format!("batched step graph of mask {mask:#b}, bucket {bucket}");
            capture(ctx, &what, || {
                step_batch(k, d, layers, tables, &mut ios, bucket)
            })
        })?;
        g.launch().map_err(dev_err)
    }

    /// Launches the final norm + lm_head graph of `mask`, capturing it on first use.
    fn head_batch(&mut self, mask: u32) -> Result<(), LlamaError> {
        if !self.batch_head.iter().any(|(k, _)| *k == mask) {
            let (g, eps) = (&self.k.gemv, self.dims.eps);
            let (head, norm) = (&self.head, &self.out_norm);
            let (mut ios, _) = seq_ios(&self.b, &mut self.seqs, &mut self.kv, mask);
            let what = format!("batched lm_head graph of mask {mask:#b}");
            let graph = capture(&self.ctx, &what, || {
                let (hs, mut outs): (Vec<&DeviceBuffer<f32>>, Vec<&mut XPrep>) =
                    ios.iter_mut().map(|io| (&*io.h, &mut *io.prep_d)).unzip();
                g.rms_norm_prep_batch(&hs, norm, eps, &mut outs)?;
                let (xs, mut ys): (Vec<&XPrep>, Vec<_>) = ios
                    .iter_mut()
                    .map(|io| (&*io.prep_d, &mut *io.logits))
                    .unzip();
                g.gemv_batch(head, &xs, &mut ys, false)
            })?;
            self.batch_head.push((mask, graph));
        }
        match self.batch_head.iter().find(|(k, _)| *k == mask) {
            Some((_, g)) => g.launch().map_err(dev_err),
            None => Err(LlamaError::Device {
                message: "batched head graph missing".into(),
            }),
        }
    }
}

/// Layer `i`'s attention for every sequence, from its q|k|v projection to the o
/// projection's x preparation: the batched RoPE + KV store and two-pass attention (one
/// launch each for all sequences), or, above `Kernels::batch_onepass_above` where the
/// capacity resolves to the one-pass kernel, each sequence's one-pass attention in turn.
fn attention_batch(
    k: &Kernels,
    d: Dims,
    l: &DevLayer,
    i: usize,
    (cos, sin): Tables<'_>,
    s: &mut [SeqIo<'_>],
    attn_capacity: usize,
) -> Result<(), CudaError> {
    let no_cache = || CudaError::Shape {
        op: "batched decode",
        detail: format!("no KV cache for layer {i}"),
    };
    if attn_capacity > k.batch_onepass_above
        && k.attn.kernel.resolve(attn_capacity) == AttnKernel::OnePass
    {
        for io in s.iter_mut() {
            let cache = io.kv.get_mut(i).ok_or_else(no_cache)?;
            let one = OnePassIo {
                qkv: &*io.qkv,
                pos: &*io.pos,
                part: &mut *io.part,
                out: &mut *io.prep_a,
            };
            attention_onepass(k, d, l, cache, one, (cos, sin), attn_capacity)?;
        }
        return Ok(());
    }
    let mut rope = Vec::with_capacity(s.len());
    for io in s.iter_mut() {
        let cache = io.kv.get_mut(i).ok_or_else(no_cache)?;
        rope.push(RopeSeq {
            qkv: &*io.qkv,
            pos: &*io.pos,
            q_out: &mut *io.q,
            cache,
        });
    }
    match (&l.q_norm, &l.k_norm) {
        (Some(qn), Some(kn)) => k.ops.qk_norm_rope_store_batch(
            &mut rope,
            qn,
            kn,
            cos,
            sin,
            d.n_heads,
            d.n_kv_heads,
            d.eps,
        )?,
        _ => k.rope.bias_rope_store_batch(
            &mut rope,
            l.qkv_bias.as_ref(),
            cos,
            sin,
            d.n_heads,
            d.n_kv_heads,
            d.head_dim,
            d.interleaved,
        )?,
    }
    let mut attn = Vec::with_capacity(s.len());
    for io in s.iter_mut() {
        let cache = io.kv.get(i).ok_or_else(no_cache)?;
        attn.push(AttnSeq {
            q: &*io.q,
            cache,
            len: &*io.pos,
            partials: &mut *io.part,
            out: &mut *io.prep_a,
        });
    }
    k.attn.decode_batch(
        &mut attn,
        attn_capacity,
        d.n_heads,
        d.n_kv_heads,
        d.head_dim,
        1,
        d.scale,
    )
}
