//! The VITS text encoder on a CUDA GPU: the CPU [`TextEncoder`]'s layer sequence on the
//! runtime's `Conv1dOps` (q/k/v/o and proj 1×1, the FFN's k3 convolutions) and
//! `RelEncoderOps` (windowed relative-position attention, channel layer norm).
//!
//! Key design choices:
//! - The embedding lookup stays on the host (it validates the ids and is a copy), so
//!   `x [h, T]` goes up once; the hidden states and the prior statistics come back once,
//!   because the duration predictor and the prior sample run on the CPU.
//! - Fusions through the convolution's epilogue and input activation: `o(att) + x` and
//!   `ffn2(relu(f)) + x` are single launches (the ReLU is the fused leaky ReLU with
//!   slope 0, the residual the epilogue's), in the CPU's order (conv + bias, then + x).
//! - Weights are `Resident` spans under the voice's owner, a sentence's tensors
//!   `Scratch` spans freed with it.

use std::sync::Arc;

use favlo_runtime::cpu::RelAttnShape;
use favlo_runtime::cuda::{Conv1dEpilogue, Conv1dOps, CudaContext, DeviceBuffer, RelEncoderOps};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use super::{DevConv, dev_err};
use crate::error::VitsError;
use crate::model::TextEncoder;
use crate::model::encoder::LN_EPS;
use crate::weights::Conv;

/// Phonemes per sentence the device ledger is fitted for at open (longer sentences
/// still run while their working set fits).
pub const FIT_PHONEMES: usize = 1000;

struct DevNorm {
    gamma: DeviceBuffer<f32>,
    beta: DeviceBuffer<f32>,
}

struct DevLayer {
    q: DevConv,
    k: DevConv,
    v: DevConv,
    o: DevConv,
    emb_k: DeviceBuffer<f32>,
    emb_v: DeviceBuffer<f32>,
    norm1: DevNorm,
    ffn1: DevConv,
    ffn2: DevConv,
    norm2: DevNorm,
}

/// What the device encoder returns: hidden states `x [h, T]` and the projection
/// `[m; logs]` `[2c, T]`, on the host.
#[derive(Clone, Debug)]
pub struct EncodedHost {
    /// Hidden states `[h, T]`.
    pub x: Vec<f32>,
    /// `m_p` rows then `logs_p` rows, `[2c, T]`.
    pub stats: Vec<f32>,
}

/// The text encoder resident on one GPU.
pub struct CudaEncoder {
    ctx: Arc<CudaContext>,
    conv: Conv1dOps,
    attn: RelEncoderOps,
    owner: Owner,
    hidden: usize,
    ffn: usize,
    /// The attention's shape (its `len` set per sentence).
    shape: RelAttnShape,
    layers: Vec<DevLayer>,
    proj: DevConv,
}

impl std::fmt::Debug for CudaEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEncoder")
            .field("device", &self.ctx.name())
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

fn conv_values(c: &Conv) -> usize {
    c.weight().len() + c.bias().map_or(0, <[f32]>::len)
}

impl CudaEncoder {
    /// Uploads `enc`'s weights to `ctx` under `owner`, after fitting them plus the
    /// working set of a [`FIT_PHONEMES`]-phoneme sentence in the device ledger.
    pub fn open(
        enc: &TextEncoder,
        ctx: &Arc<CudaContext>,
        owner: &Owner,
    ) -> Result<Self, VitsError> {
        let h = enc.hidden();
        let ffn = enc.layers().first().map_or(0, |l| l.ffn1.out_channels());
        for (i, l) in enc.layers().iter().enumerate() {
            let ok = [&l.q, &l.k, &l.v, &l.o]
                .iter()
                .all(|c| c.in_channels() == h && c.out_channels() == h && c.kernel() == 1)
                && l.ffn1.in_channels() == h
                && l.ffn1.out_channels() == ffn
                && l.ffn2.in_channels() == ffn
                && l.ffn2.out_channels() == h;
            if !ok {
                return Err(VitsError::Device {
                    message: format!("text encoder on CUDA: layer {i} has unexpected shapes"),
                });
            }
        }
        let values: usize = enc
            .layers()
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.ffn1, &l.ffn2]
                    .into_iter()
                    .map(conv_values)
                    .sum::<usize>()
                    + l.emb_k.len()
                    + l.emb_v.len()
                    + 4 * h
            })
            .sum::<usize>()
            + conv_values(enc.proj());
        let weights = 4 * values as u64;
        let shape = enc.attn_shape(FIT_PHONEMES);
        let per_sentence = 4
            * (shape.scratch_len() + (6 * h + ffn + enc.proj().out_channels()) * FIT_PHONEMES)
                as u64;
        ledger::fit(
            ctx.ledger(),
            &format!(
                "the VITS text encoder on cuda:{} with sentences up to {FIT_PHONEMES} phonemes",
                ctx.ordinal()
            ),
            1,
            1,
            |_| weights + per_sentence,
        )?;
        let put = |v: &[f32]| ctx.upload(owner, SpanKind::Resident, v).map_err(dev_err);
        let up = |c: &Conv| DevConv::upload(ctx, owner, c);
        let layers = enc
            .layers()
            .iter()
            .map(|l| {
                Ok(DevLayer {
                    q: up(&l.q)?,
                    k: up(&l.k)?,
                    v: up(&l.v)?,
                    o: up(&l.o)?,
                    emb_k: put(&l.emb_k)?,
                    emb_v: put(&l.emb_v)?,
                    norm1: DevNorm {
                        gamma: put(l.norm1.gamma())?,
                        beta: put(l.norm1.beta())?,
                    },
                    ffn1: up(&l.ffn1)?,
                    ffn2: up(&l.ffn2)?,
                    norm2: DevNorm {
                        gamma: put(l.norm2.gamma())?,
                        beta: put(l.norm2.beta())?,
                    },
                })
            })
            .collect::<Result<Vec<_>, VitsError>>()?;
        Ok(CudaEncoder {
            conv: Conv1dOps::load(ctx).map_err(dev_err)?,
            attn: RelEncoderOps::load(ctx).map_err(dev_err)?,
            owner: owner.clone(),
            hidden: h,
            ffn,
            shape,
            layers,
            proj: up(enc.proj())?,
            ctx: Arc::clone(ctx),
        })
    }

    fn scratch(&self, n: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        self.ctx
            .alloc(&self.owner, SpanKind::Scratch, n.max(1))
            .map_err(dev_err)
    }

    /// The encoder on `x [h, T]` (the embedded ids, [`TextEncoder::embed`]), as
    /// [`TextEncoder::run`].
    pub fn run(&self, x_host: &[f32], t: usize) -> Result<EncodedHost, VitsError> {
        let h = self.hidden;
        if x_host.len() != h * t || t == 0 {
            return Err(VitsError::Device {
                message: format!(
                    "text encoder on CUDA: {} values for [{h}, {t}]",
                    x_host.len()
                ),
            });
        }
        let shape = RelAttnShape {
            len: t,
            ..self.shape
        };
        let ops = &self.conv;
        let none = Conv1dEpilogue::default();
        let mut x = self
            .ctx
            .upload(&self.owner, SpanKind::Scratch, x_host)
            .map_err(dev_err)?;
        let [mut q, mut k, mut v, mut att, mut y] = [
            self.scratch(h * t)?,
            self.scratch(h * t)?,
            self.scratch(h * t)?,
            self.scratch(h * t)?,
            self.scratch(h * t)?,
        ];
        let mut scores = self.scratch(shape.scratch_len())?;
        let mut f = self.scratch(self.ffn * t)?;
        for l in &self.layers {
            l.q.run(ops, &x, t, None, none, &mut q)?;
            l.k.run(ops, &x, t, None, none, &mut k)?;
            l.v.run(ops, &x, t, None, none, &mut v)?;
            self.attn
                .rel_attention(&q, &k, &v, &l.emb_k, &l.emb_v, shape, &mut scores, &mut att)
                .map_err(dev_err)?;
            let res = Conv1dEpilogue {
                residual: Some(&x),
                accumulate: false,
            };
            l.o.run(ops, &att, t, None, res, &mut y)?;
            self.norm(&l.norm1, &y, t, &mut x)?;
            l.ffn1.run(ops, &x, t, None, none, &mut f)?;
            let res = Conv1dEpilogue {
                residual: Some(&x),
                accumulate: false,
            };
            // ReLU = the fused leaky ReLU with slope 0 on ffn2's input.
            l.ffn2.run(ops, &f, t, Some(0.0), res, &mut y)?;
            self.norm(&l.norm2, &y, t, &mut x)?;
        }
        drop((q, k, v, att, y, scores, f));
        let mut stats = self.scratch(self.proj.out_channels() * t)?;
        self.proj.run(ops, &x, t, None, none, &mut stats)?;
        let mut xo = self.ctx.download(&x).map_err(dev_err)?;
        let mut so = self.ctx.download(&stats).map_err(dev_err)?;
        xo.truncate(h * t);
        so.truncate(self.proj.out_channels() * t);
        Ok(EncodedHost { x: xo, stats: so })
    }

    fn norm(
        &self,
        n: &DevNorm,
        x: &DeviceBuffer<f32>,
        t: usize,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        self.attn
            .layer_norm_channels(x, self.hidden, t, &n.gamma, &n.beta, LN_EPS, out)
            .map_err(dev_err)
    }
}
