//! Batched prefill on the GPU: the prompt runs in chunks of up to `chunk` tokens
//! ([`DEFAULT_CHUNK`] unless the open options say otherwise), each
//! chunk through every layer with one launch per step for the whole chunk (RMSNorm into
//! the x preparation, bias + RoPE + KV store, causal flash attention over the cache,
//! SwiGLU), and the projections as GEMMs over the chunk's rows.
//!
//! Key design choices:
//! - The projections run through [`MxGemm`]: the MX weights expanded exactly to bf16
//!   and each prepared x row split into two bf16 planes (16 significant bits), one
//!   cuBLASLt GEMM per plane accumulating in f32. The FP8 GEMM (`GemmMx`) is not used:
//!   it quantizes activations to E4M3 (3 mantissa bits), which cannot meet the 1e-4
//!   agreement with the CPU path that the decode graph keeps, and it has no MXFP4.
//!   Where cuBLASLt cannot be loaded, or with `FAVLO_CUDA_PREFILL=gemv` (for
//!   comparisons), the projections run the decode path's GEMV once per token.
//! - The chunk writes the same KV cache and uses the same RoPE tables as the decode
//!   graph, and leaves the last token's hidden state in the decode buffers with
//!   `*pos = n_past + n`, so decoding continues from it unchanged; only the last
//!   token's logits are computed.
//! - Models with q/k norms (Qwen3) normalize every q and k head of the chunk in the same
//!   launch as RoPE and the KV store, as the decode step's fused kernel does per token.

use std::sync::Arc;

use favlo_runtime::cuda::{
    CudaContext, CudaError, DeviceBuffer, MxGemm, PrefillShape, QkNorm, XPrep,
};
use favlo_runtime::ledger::{Owner, SpanKind};

use super::{CudaLlama, dev_err, padded};
use crate::error::LlamaError;
use crate::weights::Matrix;

/// Prompt tokens per chunk by default: every chunk expands each projection's weights to
/// bf16 once, so on an 8B model 256-token chunks spent more on expansion and small GEMMs
/// than 1024-token ones (docs/CUDA.md), for ~0.35 GB more scratch there.
pub(crate) const DEFAULT_CHUNK: usize = 1024;
/// bf16 planes per x row in the projection GEMMs (16 significant bits).
const TERMS: usize = 2;

/// Device buffers of one chunk (rows of the chunk's tokens).
pub(super) struct ChunkBufs {
    /// Most tokens per chunk.
    chunk: usize,
    /// Residual stream [chunk, hidden].
    h: DeviceBuffer<f32>,
    /// x preparations: rows of padded(hidden), padded(q_dim), padded(ff).
    prep_d: XPrep,
    prep_a: XPrep,
    prep_f: XPrep,
    qkv: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    o: DeviceBuffer<f32>,
    gu: DeviceBuffer<f32>,
    /// The projection GEMMs (None: the GEMV per token).
    gemm: Option<MxGemm>,
}

/// (largest matrix, largest x block) in values, K padded for either MX format.
fn gemm_sizes(chunk: usize, (d, qd, kvd, ff): (usize, usize, usize, usize)) -> (usize, usize) {
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

impl ChunkBufs {
    /// Scratch for chunks of a model of these widths.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        chunk: usize,
        (d, qd, kvd, ff): (usize, usize, usize, usize),
    ) -> Result<ChunkBufs, LlamaError> {
        let e = dev_err;
        let gemm = if want_gemm() {
            let (mw, mx) = gemm_sizes(chunk, (d, qd, kvd, ff));
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
        let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n).map_err(e);
        Ok(ChunkBufs {
            chunk,
            h: scratch(chunk * d)?,
            prep_d: XPrep::new(ctx, owner, chunk * padded(d)).map_err(e)?,
            prep_a: XPrep::new(ctx, owner, chunk * padded(qd)).map_err(e)?,
            prep_f: XPrep::new(ctx, owner, chunk * padded(ff)).map_err(e)?,
            qkv: scratch(chunk * (qd + 2 * kvd))?,
            q: scratch(chunk * qd)?,
            o: scratch(chunk * qd)?,
            gu: scratch(chunk * 2 * ff)?,
            gemm,
        })
    }
}

/// Bytes [`ChunkBufs`] takes for these widths (for the context's memory fit).
pub(super) fn chunk_bytes(chunk: usize, d: usize, qd: usize, kvd: usize, ff: usize) -> u64 {
    let prep = |k: usize| chunk * padded(k) * 2 * 2 + chunk * padded(k) / 32 * 4;
    let f32s = chunk * (d + (qd + 2 * kvd) + 2 * qd + 2 * ff);
    let gemm = if want_gemm() {
        let (mw, mx) = gemm_sizes(chunk, (d, qd, kvd, ff));
        MxGemm::bytes_for(mw, mx, TERMS)
    } else {
        0
    };
    (prep(d) + prep(qd) + prep(ff) + f32s * 4) as u64 + gemm
}

impl CudaLlama {
    /// True when `forward` may prefill `n` tokens in chunks.
    pub(super) fn batched_prefill(&self, n: usize) -> bool {
        n > 1 && self.chunk.is_some()
    }

    /// Runs `ids` at positions `n_past..` in chunks, leaving the last token's hidden
    /// state in the decode step's `h` and `*pos = n_past + ids.len()`.
    pub(super) fn prefill(
        &mut self,
        embed: &Matrix,
        ids: &[u32],
        n_past: usize,
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
            for l in self.layers.iter_mut() {
                let p = &k.prefill;
                p.rms_norm_prep(&cb.h, d, t, &l.attn_norm, dm.eps, pd, &mut cb.prep_d)
                    .map_err(e)?;
                match cb.gemm.as_mut() {
                    Some(g) => g.run(&l.qkv, &cb.prep_d, t, pd, &mut cb.qkv, false),
                    None => (0..t).try_for_each(|i| {
                        k.gemv
                            .gemv_at(&l.qkv, &cb.prep_d, i * pd, &mut cb.qkv, i * nqkv, false)
                    }),
                }
                .map_err(e)?;
                let norm = match (&l.q_norm, &l.k_norm) {
                    (Some(q), Some(k)) => Some(QkNorm { q, k, eps: dm.eps }),
                    _ => None,
                };
                p.bias_rope_store(
                    &cb.qkv,
                    nqkv,
                    l.qkv_bias.as_ref(),
                    norm,
                    &b.cos,
                    &b.sin,
                    s,
                    dm.interleaved,
                    &mut cb.q,
                    qd,
                    &mut l.cache,
                )
                .map_err(e)?;
                p.attention(&cb.q, qd, &l.cache, s, dm.scale, &mut cb.o, qd)
                    .map_err(e)?;
                p.prep_rows(&cb.o, qd, t, qd, pa, &mut cb.prep_a)
                    .map_err(e)?;
                match cb.gemm.as_mut() {
                    Some(g) => g.run(&l.o, &cb.prep_a, t, pa, &mut cb.h, true),
                    None => (0..t).try_for_each(|i| {
                        k.gemv
                            .gemv_at(&l.o, &cb.prep_a, i * pa, &mut cb.h, i * d, true)
                    }),
                }
                .map_err(e)?;
                p.rms_norm_prep(&cb.h, d, t, &l.ffn_norm, dm.eps, pd, &mut cb.prep_d)
                    .map_err(e)?;
                match cb.gemm.as_mut() {
                    Some(g) => g.run(&l.gate_up, &cb.prep_d, t, pd, &mut cb.gu, false),
                    None => (0..t).try_for_each(|i| {
                        k.gemv.gemv_at(
                            &l.gate_up,
                            &cb.prep_d,
                            i * pd,
                            &mut cb.gu,
                            i * 2 * ff,
                            false,
                        )
                    }),
                }
                .map_err(e)?;
                p.swiglu_prep(&cb.gu, 2 * ff, t, ff, pf, &mut cb.prep_f)
                    .map_err(e)?;
                match cb.gemm.as_mut() {
                    Some(g) => g.run(&l.down, &cb.prep_f, t, pf, &mut cb.h, true),
                    None => (0..t).try_for_each(|i| {
                        k.gemv
                            .gemv_at(&l.down, &cb.prep_f, i * pf, &mut cb.h, i * d, true)
                    }),
                }
                .map_err(e)?;
            }
        }
        // The last token's residual row becomes the decode step's h.
        let src = cb.h.slice().slice((last - 1) * d..last * d);
        self.ctx
            .stream()
            .memcpy_dtod(&src, b.h.slice_mut())
            .map_err(|x| {
                e(CudaError::Driver {
                    op: "cuMemcpyDtoD(h)",
                    message: format!("{x:?}"),
                })
            })?;
        let pos = i32::try_from(n_past + ids.len()).map_err(|_| LlamaError::Request {
            message: format!("position {}", n_past + ids.len()),
        })?;
        self.ctx.write(&mut b.pos, &[pos]).map_err(e)
    }
}
