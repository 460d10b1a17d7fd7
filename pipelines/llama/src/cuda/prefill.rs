//! Batched prefill on the GPU: the prompt runs in chunks of up to [`CHUNK`] tokens, each
//! chunk through every layer with one launch per step for the whole chunk (RMSNorm into
//! the x preparation, bias + RoPE + KV store, causal flash attention over the cache,
//! SwiGLU), and the projections as the tensor-core GEMV per token of the chunk.
//!
//! Key design choices:
//! - The projections stay on the decode path's GEMV (`GemvMma::gemv_at`, one launch per
//!   token and matrix, ~22-bit x) rather than the FP8 GEMM (`GemmMx`): the GEMM
//!   quantizes activations to E4M3 (3 mantissa bits), which cannot meet the 1e-4
//!   agreement with the CPU path that the decode graph keeps, and it has no MXFP4.
//!   Launches per layer fall from 10·t (token loop) to 4·t + 6.
//! - The chunk writes the same KV cache and uses the same RoPE tables as the decode
//!   graph, and leaves the last token's hidden state in the decode buffers with
//!   `*pos = n_past + n`, so decoding continues from it unchanged; only the last
//!   token's logits are computed.
//! - Models with q/k norms (Qwen3) keep the token loop (no batched q/k-norm kernel yet).

use favlo_runtime::cuda::{CudaContext, CudaError, DeviceBuffer, PrefillShape, XPrep};
use favlo_runtime::ledger::{Owner, SpanKind};

use super::{CudaLlama, dev_err, padded};
use crate::error::LlamaError;
use crate::weights::Matrix;

/// Most prompt tokens per chunk.
pub(crate) const CHUNK: usize = 256;

/// Device buffers of one chunk (rows of the chunk's tokens).
pub(super) struct ChunkBufs {
    /// Residual stream [CHUNK, hidden].
    h: DeviceBuffer<f32>,
    /// x preparations: rows of padded(hidden), padded(q_dim), padded(ff).
    prep_d: XPrep,
    prep_a: XPrep,
    prep_f: XPrep,
    qkv: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    o: DeviceBuffer<f32>,
    gu: DeviceBuffer<f32>,
}

impl ChunkBufs {
    /// Scratch for chunks of a model of these widths.
    pub(super) fn new(
        ctx: &CudaContext,
        owner: &Owner,
        (d, qd, kvd, ff): (usize, usize, usize, usize),
    ) -> Result<ChunkBufs, LlamaError> {
        let e = dev_err;
        let scratch = |n: usize| ctx.alloc::<f32>(owner, SpanKind::Scratch, n).map_err(e);
        Ok(ChunkBufs {
            h: scratch(CHUNK * d)?,
            prep_d: XPrep::new(ctx, owner, CHUNK * padded(d)).map_err(e)?,
            prep_a: XPrep::new(ctx, owner, CHUNK * padded(qd)).map_err(e)?,
            prep_f: XPrep::new(ctx, owner, CHUNK * padded(ff)).map_err(e)?,
            qkv: scratch(CHUNK * (qd + 2 * kvd))?,
            q: scratch(CHUNK * qd)?,
            o: scratch(CHUNK * qd)?,
            gu: scratch(CHUNK * 2 * ff)?,
        })
    }
}

/// Bytes [`ChunkBufs`] takes for these widths (for the context's memory fit).
pub(super) fn chunk_bytes(d: usize, qd: usize, kvd: usize, ff: usize) -> u64 {
    let prep = |k: usize| CHUNK * padded(k) * 2 * 2 + CHUNK * padded(k) / 32 * 4;
    let f32s = CHUNK * (d + (qd + 2 * kvd) + 2 * qd + 2 * ff);
    (prep(d) + prep(qd) + prep(ff) + f32s * 4) as u64
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
        for (ci, chunk) in ids.chunks(CHUNK).enumerate() {
            let t = chunk.len();
            last = t;
            self.rows_host.resize(t * d, 0.0);
            embed.embed(chunk, &mut self.rows_host);
            self.ctx.write(&mut cb.h, &self.rows_host).map_err(e)?;
            let s = PrefillShape {
                t,
                n_past: n_past + ci * CHUNK,
                n_heads: dm.n_heads,
                n_kv_heads: dm.n_kv_heads,
                head_dim: dm.head_dim,
            };
            for l in self.layers.iter_mut() {
                let p = &k.prefill;
                p.rms_norm_prep(&cb.h, d, t, &l.attn_norm, dm.eps, pd, &mut cb.prep_d)
                    .map_err(e)?;
                for i in 0..t {
                    k.gemv
                        .gemv_at(&l.qkv, &cb.prep_d, i * pd, &mut cb.qkv, i * nqkv, false)
                        .map_err(e)?;
                }
                p.bias_rope_store(
                    &cb.qkv,
                    nqkv,
                    l.qkv_bias.as_ref(),
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
                for i in 0..t {
                    k.gemv
                        .gemv_at(&l.o, &cb.prep_a, i * pa, &mut cb.h, i * d, true)
                        .map_err(e)?;
                }
                p.rms_norm_prep(&cb.h, d, t, &l.ffn_norm, dm.eps, pd, &mut cb.prep_d)
                    .map_err(e)?;
                for i in 0..t {
                    k.gemv
                        .gemv_at(
                            &l.gate_up,
                            &cb.prep_d,
                            i * pd,
                            &mut cb.gu,
                            i * 2 * ff,
                            false,
                        )
                        .map_err(e)?;
                }
                p.swiglu_prep(&cb.gu, 2 * ff, t, ff, pf, &mut cb.prep_f)
                    .map_err(e)?;
                for i in 0..t {
                    k.gemv
                        .gemv_at(&l.down, &cb.prep_f, i * pf, &mut cb.h, i * d, true)
                        .map_err(e)?;
                }
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
