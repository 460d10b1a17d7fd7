//! Batched prefill on the GPU: the prompt runs in chunks of up to `chunk` tokens
//! (`crate::prefill_chunk::choose` picks it at open), each
//! chunk through every layer with one launch per step for the whole chunk (RMSNorm into
//! the x preparation, bias + RoPE + KV store, causal flash attention over the cache,
//! SwiGLU), and the projections as GEMMs over the chunk's rows.
//!
//! Key design choices:
//! - By default the projections run through [`MxGemm`]: the MX weights expanded exactly
//!   to bf16 and each prepared x row split into two bf16 planes (16 significant bits),
//!   one cuBLASLt GEMM per plane accumulating in f32, which keeps the 1e-4 agreement
//!   with the CPU path that the decode graph keeps. Where cuBLASLt cannot be loaded, or
//!   with `FAVLO_CUDA_PREFILL=gemv` (for comparisons), they run the decode path's GEMV
//!   once per token.
//! - With `PrefillMode::Fp8` (Hopper only) they run on the FP8 tensor cores instead
//!   (`GemmMx`): the producers write plain f32 rows, which are rounded to E4M3 per
//!   token row and 32- or 128-value block, against E4M3 copies of the weights tiled at
//!   open (MXFP4 folded exactly). Twice the work per weight byte of a bf16 GEMM is
//!   gone, and so is the exactness: the option trades logit errors of a few percent of
//!   the largest logit (docs/CUDA.md) for about twice the prompt rate. The attention
//!   then takes q and p as single f16 halves too (`AttnPrecision::Half`). The RMSNorm
//!   and SwiGLU producers write the rows' E4M3 row scales as they go, and the gate|up
//!   GEMM (weights paired at open, `tile_gemm_swiglu`) stores silu(gate)·up itself
//!   (`GemmMx::gemm_swiglu`), so the [chunk, 2·ff] gate|up rows are never written.
//! - The chunk writes the same KV cache and uses the same RoPE tables as the decode
//!   graph, and leaves the last token's hidden state in the decode buffers with
//!   `*pos = n_past + n`, so decoding continues from it unchanged; only the last
//!   token's logits are computed.
//! - Models with q/k norms (Qwen3) normalize every q and k head of the chunk in the same
//!   launch as RoPE and the KV store, as the decode step's fused kernel does per token.

use std::sync::Arc;

use favlo_runtime::cuda::{
    AttnPrecision, CudaContext, CudaError, DeviceBuffer, GemmActs, GemmMx, GemmWeights,
    GemmWeightsHost, GemvMma, MxGemm, MxTiled, PrefillShape, QkNorm, XPrep,
};
use favlo_runtime::ledger::{Owner, SpanKind};

use super::upload::Fp8Layer;
use super::{CudaLlama, dev_err, padded};
use crate::error::LlamaError;
use crate::weights::Matrix;

/// bf16 planes per x row in the projection GEMMs (16 significant bits).
const TERMS: usize = 2;

/// Model widths: (hidden, q_dim, kv_dim, ff).
type Widths = (usize, usize, usize, usize);

/// Device buffers of one chunk (rows of the chunk's tokens).
pub(super) struct ChunkBufs {
    /// Most tokens per chunk.
    chunk: usize,
    /// Residual stream [chunk, hidden].
    h: DeviceBuffer<f32>,
    qkv: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    o: DeviceBuffer<f32>,
    /// gate|up rows [chunk, 2·ff]; one value when the FP8 GEMM writes SwiGLU itself.
    gu: DeviceBuffer<f32>,
    proj: Proj,
}

/// How the chunk's projections run.
enum Proj {
    Exact(Box<Exact>),
    Fp8(Box<Fp8>),
}

/// The exact projections: x preparations of the decode path, then [`MxGemm`] (or, with
/// no cuBLASLt, the GEMV once per token).
struct Exact {
    /// x preparations: rows of padded(hidden), padded(q_dim), padded(ff).
    prep_d: XPrep,
    prep_a: XPrep,
    prep_f: XPrep,
    /// The projection GEMMs (None: the GEMV per token).
    gemm: Option<MxGemm>,
}

/// The FP8 projections: f32 rows, their E4M3 quantization, [`GemmMx`] against each
/// block's E4M3 weight tiles.
struct Fp8 {
    mx: GemmMx,
    /// Per block, in layer order.
    weights: Vec<Fp8Layer>,
    /// Quantized activations for K = hidden (q|k|v, gate|up), q_dim (o), ff (down).
    acts_d: GemmActs,
    acts_a: GemmActs,
    acts_f: GemmActs,
    /// The normed / SwiGLU rows [chunk, max(hidden, ff)].
    rows: DeviceBuffer<f32>,
}

/// (largest matrix, largest x block) in values, K padded for either MX format.
fn gemm_sizes(chunk: usize, (d, qd, kvd, ff): Widths) -> (usize, usize) {
    let (pd, pa, pf) = (padded(d), padded(qd), padded(ff));
    let w = ((qd + 2 * kvd) * pd)
        .max(d * pa)
        .max(2 * ff * pd)
        .max(d * pf);
    (w, chunk * pd.max(pa).max(pf))
}

/// Whether the projections should try the GEMM (`FAVLO_CUDA_PREFILL=gemv` says no).
fn want_gemm() -> bool {
    std::env::var("FAVLO_CUDA_PREFILL").map_or(true, |v| v != "gemv")
}

impl Exact {
    fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        chunk: usize,
        widths: Widths,
    ) -> Result<Exact, LlamaError> {
        let e = dev_err;
        let (d, qd, _, ff) = widths;
        let gemm = if want_gemm() {
            let (mw, mx) = gemm_sizes(chunk, widths);
            match MxGemm::new(ctx, owner, mw, mx, TERMS) {
                Ok(g) => Some(g),
                Err(CudaError::Unavailable { reason }) => {
                    tracing::warn!("prefill projections run per token: {reason}");
                    None
                }
                Err(x) => return Err(e(x)),
            }
        } else {
            None
        };
        Ok(Exact {
            prep_d: XPrep::new(ctx, owner, chunk * padded(d)).map_err(e)?,
            prep_a: XPrep::new(ctx, owner, chunk * padded(qd)).map_err(e)?,
            prep_f: XPrep::new(ctx, owner, chunk * padded(ff)).map_err(e)?,
            gemm,
        })
    }

    fn bytes(chunk: usize, widths: Widths) -> u64 {
        let (d, qd, _, ff) = widths;
        let prep = |k: usize| chunk * padded(k) * 2 * 2 + chunk * padded(k) / 32 * 4;
        let gemm = if want_gemm() {
            let (mw, mx) = gemm_sizes(chunk, widths);
            MxGemm::bytes_for(mw, mx, TERMS)
        } else {
            0
        };
        (prep(d) + prep(qd) + prep(ff)) as u64 + gemm
    }
}

/// `y (+)= x · wᵀ` for `t` prepared rows at stride `pk`: the GEMM, or the GEMV per
/// token with y rows at stride `ldy`.
#[allow(clippy::too_many_arguments)]
fn exact_run(
    gemm: &mut Option<MxGemm>,
    gemv: &GemvMma,
    w: &MxTiled,
    x: &XPrep,
    t: usize,
    pk: usize,
    y: &mut DeviceBuffer<f32>,
    ldy: usize,
    accumulate: bool,
) -> Result<(), CudaError> {
    match gemm.as_mut() {
        Some(g) => g.run(w, x, t, pk, y, accumulate),
        None => (0..t).try_for_each(|i| gemv.gemv_at(w, x, i * pk, y, i * ldy, accumulate)),
    }
}

impl Fp8 {
    fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        chunk: usize,
        (d, qd, _, ff): Widths,
        weights: Vec<Fp8Layer>,
    ) -> Result<Fp8, LlamaError> {
        let e = dev_err;
        let mx = GemmMx::load(ctx).map_err(e)?;
        // One activation scale per 128 k instead of per 32 when some weight is folded to
        // one scale per 128 k (as MXFP4 weights mostly are): the GEMM then promotes once
        // per stage there; other weights read the same scale four times.
        let grouped = weights
            .iter()
            .any(|f| f.qkv.grouped || f.o.grouped || f.gate_up.grouped || f.down.grouped);
        let acts = |k: usize| {
            GemmActs::new(ctx, owner, chunk, k)
                .map(|a| a.grouped(grouped))
                .map_err(e)
        };
        Ok(Fp8 {
            mx,
            weights,
            acts_d: acts(d)?,
            acts_a: acts(qd)?,
            acts_f: acts(ff)?,
            rows: ctx
                .alloc::<f32>(owner, SpanKind::Scratch, chunk * d.max(ff))
                .map_err(e)?,
        })
    }

    fn bytes(chunk: usize, (d, qd, _, ff): Widths) -> u64 {
        [d, qd, ff]
            .iter()
            .map(|&k| GemmActs::bytes_for(chunk, k))
            .sum::<u64>()
            + (chunk * d.max(ff) * 4) as u64
    }
}

/// Quantizes `t` rows of `k` values of `x` (stride `ldx`) and runs `y (+)= x · wᵀ`.
#[allow(clippy::too_many_arguments)]
fn fp8_run(
    mx: &GemmMx,
    acts: &mut GemmActs,
    x: &DeviceBuffer<f32>,
    t: usize,
    ldx: usize,
    w: &GemmWeights,
    y: &mut DeviceBuffer<f32>,
    accumulate: bool,
) -> Result<(), CudaError> {
    mx.quantize(x, t, w.cols, ldx, acts)?;
    mx.gemm(acts, w, y, accumulate)
}

impl ChunkBufs {
    /// Most tokens one chunk runs.
    pub(super) fn tokens(&self) -> usize {
        self.chunk
    }

    /// Scratch for chunks of a model of these widths; with `fp8` (every block's E4M3
    /// weight tiles), the FP8 projections.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        chunk: usize,
        widths: Widths,
        fp8: Option<Vec<Fp8Layer>>,
    ) -> Result<ChunkBufs, LlamaError> {
        let e = dev_err;
        let (d, qd, kvd, ff) = widths;
        // The weights say whether the gate|up GEMM writes SwiGLU itself.
        let paired = fp8
            .as_ref()
            .is_some_and(|w| !w.is_empty() && w.iter().all(|l| l.gate_up.swiglu));
        let gu_len = gate_up_len(chunk, ff, paired);
        let proj = match fp8 {
            Some(weights) => Proj::Fp8(Box::new(Fp8::new(ctx, owner, chunk, widths, weights)?)),
            None => Proj::Exact(Box::new(Exact::new(ctx, owner, chunk, widths)?)),
        };
        let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n).map_err(e);
        Ok(ChunkBufs {
            chunk,
            h: scratch(chunk * d)?,
            qkv: scratch(chunk * (qd + 2 * kvd))?,
            q: scratch(chunk * qd)?,
            o: scratch(chunk * qd)?,
            gu: scratch(gu_len)?,
            proj,
        })
    }
}

/// Bytes [`ChunkBufs`] takes for these widths (for the context's memory fit), the FP8
/// gate|up weights `paired` for the SwiGLU GEMM or not.
pub(super) fn chunk_bytes(chunk: usize, widths: Widths, fp8: bool, paired: bool) -> u64 {
    let (d, qd, kvd, ff) = widths;
    let f32s = chunk * (d + (qd + 2 * kvd) + 2 * qd) + gate_up_len(chunk, ff, paired);
    let proj = if fp8 {
        Fp8::bytes(chunk, widths)
    } else {
        Exact::bytes(chunk, widths)
    };
    (f32s * 4) as u64 + proj
}

/// Values of the chunk's gate|up rows: none to speak of when the FP8 gate|up GEMM
/// writes SwiGLU itself (`paired`; one value, so the buffer exists).
fn gate_up_len(chunk: usize, ff: usize, paired: bool) -> usize {
    if paired { 1 } else { chunk * 2 * ff }
}

/// Device bytes of one block's FP8 GEMM tiles (`upload::Fp8Layer`).
pub(super) fn fp8_layer_bytes((d, qd, kvd, ff): Widths) -> u64 {
    GemmWeightsHost::bytes_for(qd + 2 * kvd, d)
        + GemmWeightsHost::bytes_for(d, qd)
        + GemmWeightsHost::bytes_for(2 * ff, d)
        + GemmWeightsHost::bytes_for(d, ff)
}

fn missing_fp8(layer: usize) -> LlamaError {
    LlamaError::Device {
        message: format!("the FP8 prefill has no weight tiles for block {layer}"),
    }
}

impl CudaLlama {
    /// True when `forward` may prefill `n` tokens in chunks.
    pub(super) fn batched_prefill(&self, n: usize) -> bool {
        n > 1 && self.chunk.is_some()
    }

    /// Runs `ids` at positions `n_past..` of sequence `seq` in chunks, leaving the last
    /// token's hidden state in that sequence's decode `h` and its `*pos = n_past +
    /// ids.len()`.
    pub(super) fn prefill(
        &mut self,
        embed: &Matrix,
        ids: &[u32],
        n_past: usize,
        seq: usize,
    ) -> Result<(), LlamaError> {
        let e = dev_err;
        let dm = self.dims;
        let (d, qd, kvd, ff) = (dm.hidden, dm.q_dim, dm.kv_dim, dm.ff);
        let (pd, pa, pf) = (padded(d), padded(qd), padded(ff));
        let nqkv = qd + 2 * kvd;
        let Some(cb) = self.chunk.as_mut() else {
            return Err(LlamaError::Device {
                message: "prefill buffers missing".into(),
            });
        };
        let (k, b) = (&self.k, &mut self.b);
        let n = self.seqs.len();
        let kv = self
            .kv
            .get_mut(seq)
            .ok_or_else(|| super::batch::not_a_sequence(seq, n))?;
        let mut last = 0;
        let size = cb.chunk;
        for (ci, chunk) in ids.chunks(size).enumerate() {
            let t = chunk.len();
            last = t;
            self.rows_host.resize(t * d, 0.0);
            embed.embed(chunk, &mut self.rows_host);
            self.ctx.write(&mut cb.h, &self.rows_host).map_err(e)?;
            let s = PrefillShape {
                t,
                n_past: n_past + ci * size,
                n_heads: dm.n_heads,
                n_kv_heads: dm.n_kv_heads,
                head_dim: dm.head_dim,
            };
            for (li, (l, cache)) in self.layers.iter().zip(kv.iter_mut()).enumerate() {
                let p = &k.prefill;
                let ChunkBufs {
                    h,
                    qkv,
                    q,
                    o,
                    gu,
                    proj,
                    ..
                } = &mut *cb;
                // q|k|v = RMSNorm(h) · Wᵀ
                match &mut *proj {
                    Proj::Fp8(f) => {
                        let w = f.weights.get(li).ok_or_else(|| missing_fp8(li))?;
                        let (mx, acts) = (&f.mx, &mut f.acts_d);
                        p.rms_norm_quantize(
                            h,
                            d,
                            t,
                            &l.attn_norm,
                            dm.eps,
                            &mut f.rows,
                            d,
                            mx,
                            acts,
                        )
                        .map_err(e)?;
                        mx.gemm(acts, &w.qkv, qkv, false)
                    }
                    Proj::Exact(x) => {
                        p.rms_norm_prep(h, d, t, &l.attn_norm, dm.eps, pd, &mut x.prep_d)
                            .map_err(e)?;
                        exact_run(
                            &mut x.gemm,
                            &k.gemv,
                            &l.qkv,
                            &x.prep_d,
                            t,
                            pd,
                            qkv,
                            nqkv,
                            false,
                        )
                    }
                }
                .map_err(e)?;
                let norm = match (&l.q_norm, &l.k_norm) {
                    (Some(q), Some(k)) => Some(QkNorm { q, k, eps: dm.eps }),
                    _ => None,
                };
                p.bias_rope_store(
                    qkv,
                    nqkv,
                    l.qkv_bias.as_ref(),
                    norm,
                    &b.cos,
                    &b.sin,
                    s,
                    dm.interleaved,
                    q,
                    qd,
                    cache,
                )
                .map_err(e)?;
                // The FP8 path's activations are E4M3: q and p need not keep 22 bits.
                let precision = match proj {
                    Proj::Fp8(_) => AttnPrecision::Half,
                    Proj::Exact(_) => AttnPrecision::Split,
                };
                p.attention(q, qd, cache, s, dm.scale, o, qd, precision)
                    .map_err(e)?;
                // h += attention · Woᵀ
                match &mut *proj {
                    Proj::Fp8(f) => {
                        let w = f.weights.get(li).ok_or_else(|| missing_fp8(li))?;
                        fp8_run(&f.mx, &mut f.acts_a, o, t, qd, &w.o, h, true)
                    }
                    Proj::Exact(x) => {
                        p.prep_rows(o, qd, t, qd, pa, &mut x.prep_a).map_err(e)?;
                        exact_run(&mut x.gemm, &k.gemv, &l.o, &x.prep_a, t, pa, h, d, true)
                    }
                }
                .map_err(e)?;
                // gate|up = RMSNorm(h) · Wᵀ
                match &mut *proj {
                    Proj::Fp8(f) => {
                        let w = f.weights.get(li).ok_or_else(|| missing_fp8(li))?;
                        let (mx, acts) = (&f.mx, &mut f.acts_d);
                        p.rms_norm_quantize(h, d, t, &l.ffn_norm, dm.eps, &mut f.rows, d, mx, acts)
                            .map_err(e)?;
                        if w.gate_up.swiglu {
                            // SwiGLU(gate|up) straight into the rows the down GEMM reads.
                            mx.gemm_swiglu(acts, &w.gate_up, &mut f.rows)
                        } else {
                            mx.gemm(acts, &w.gate_up, gu, false)
                        }
                    }
                    Proj::Exact(x) => {
                        p.rms_norm_prep(h, d, t, &l.ffn_norm, dm.eps, pd, &mut x.prep_d)
                            .map_err(e)?;
                        exact_run(
                            &mut x.gemm,
                            &k.gemv,
                            &l.gate_up,
                            &x.prep_d,
                            t,
                            pd,
                            gu,
                            2 * ff,
                            false,
                        )
                    }
                }
                .map_err(e)?;
                // h += SwiGLU(gate|up) · Wdownᵀ
                match &mut *proj {
                    Proj::Fp8(f) => {
                        let w = f.weights.get(li).ok_or_else(|| missing_fp8(li))?;
                        let (mx, acts) = (&f.mx, &mut f.acts_f);
                        if w.gate_up.swiglu {
                            mx.quantize(&f.rows, t, ff, ff, acts).map_err(e)?;
                        } else {
                            p.swiglu_quantize(gu, 2 * ff, t, ff, &mut f.rows, ff, mx, acts)
                                .map_err(e)?;
                        }
                        mx.gemm(acts, &w.down, h, true)
                    }
                    Proj::Exact(x) => {
                        p.swiglu_prep(gu, 2 * ff, t, ff, pf, &mut x.prep_f)
                            .map_err(e)?;
                        exact_run(&mut x.gemm, &k.gemv, &l.down, &x.prep_f, t, pf, h, d, true)
                    }
                }
                .map_err(e)?;
            }
        }
        // The last token's residual row becomes the sequence's decode h.
        let sb = self
            .seqs
            .get_mut(seq)
            .ok_or_else(|| super::batch::not_a_sequence(seq, n))?;
        let (h_out, pos_out) = (&mut sb.h, &mut sb.pos);
        let src = cb.h.slice().slice((last - 1) * d..last * d);
        self.ctx
            .stream()
            .memcpy_dtod(&src, h_out.slice_mut())
            .map_err(|x| {
                e(CudaError::Driver {
                    op: "cuMemcpyDtoD(h)",
                    message: format!("{x:?}"),
                })
            })?;
        let pos = i32::try_from(n_past + ids.len()).map_err(|_| LlamaError::Request {
            message: format!("position {}", n_past + ids.len()),
        })?;
        self.ctx.write(pos_out, &[pos]).map_err(e)
    }
}
