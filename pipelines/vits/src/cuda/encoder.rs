//! The VITS text encoder on a CUDA GPU: the CPU [`TextEncoder`]'s layer sequence on the
//! runtime's `Conv1dOps` (q/k/v/o and proj 1×1, the FFN's k3 convolutions) and
//! `RelEncoderOps` (windowed relative-position attention, channel layer norm).
//!
//! Key design choices:
//! - The embedding lookup stays on the host (it validates the ids and is a copy), so
//!   `x [h, T]` goes up once; in the voice ([`CudaEncoder::run_on_device`]) the hidden
//!   states stay on the device for the duration predictor and only the prior statistics
//!   come back (the prior sample runs on the host); [`CudaEncoder::run`] returns both.
//! - Fusions through the convolution's epilogue and input activation: `o(att) + x` and
//!   `ffn2(relu(f)) + x` are single launches (the ReLU is the fused leaky ReLU with
//!   slope 0, the residual the epilogue's), in the CPU's order (conv + bias, then + x).
//!   The step sequence itself lives in `encoder_seq.rs`, checked there on a host
//!   backend.
//! - Weights are `Resident` spans under the voice's owner, a sentence's tensors
//!   `Scratch` spans freed with it.

use std::sync::Arc;

use favlo_runtime::cpu::RelAttnShape;
use favlo_runtime::cuda::{Conv1dEpilogue, Conv1dOps, CudaContext, DeviceBuffer, RelEncoderOps};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use super::encoder_seq::{EncBackend, EncDims, EncLayer, run};
use super::{DevConv, dev_err};
use crate::error::VitsError;
use crate::model::TextEncoder;
use crate::model::encoder::LN_EPS;
use crate::weights::Conv;

/// Phonemes per sentence the device ledger is fitted for at open (longer sentences
/// still run while their working set fits).
pub const FIT_PHONEMES: usize = 1000;

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
    dims: EncDims,
    layers: Vec<EncLayer<DevConv, DeviceBuffer<f32>>>,
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

/// A sentence's device: the encoder's kernels and the owner of its scratch.
struct Dev<'a> {
    enc: &'a CudaEncoder,
}

impl EncBackend for Dev<'_> {
    type Buf = DeviceBuffer<f32>;
    type Conv = DevConv;
    type Vec = DeviceBuffer<f32>;

    fn upload(&self, v: &[f32]) -> Result<DeviceBuffer<f32>, VitsError> {
        let e = self.enc;
        e.ctx
            .upload(&e.owner, SpanKind::Scratch, v)
            .map_err(dev_err)
    }

    fn scratch(&self, n: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        let e = self.enc;
        e.ctx
            .alloc(&e.owner, SpanKind::Scratch, n.max(1))
            .map_err(dev_err)
    }

    fn conv(
        &self,
        c: &DevConv,
        x: &DeviceBuffer<f32>,
        len: usize,
        relu: bool,
        residual: Option<&DeviceBuffer<f32>>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        let epi = Conv1dEpilogue {
            residual,
            accumulate: false,
        };
        // ReLU = the fused leaky ReLU with slope 0 on the convolution's input.
        c.run(&self.enc.conv, x, len, relu.then_some(0.0), epi, y)
    }

    fn attention(
        &self,
        q: &DeviceBuffer<f32>,
        k: &DeviceBuffer<f32>,
        v: &DeviceBuffer<f32>,
        emb_k: &DeviceBuffer<f32>,
        emb_v: &DeviceBuffer<f32>,
        shape: RelAttnShape,
        scores: &mut DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        self.enc
            .attn
            .rel_attention(q, k, v, emb_k, emb_v, shape, scores, out)
            .map_err(dev_err)
    }

    fn norm(
        &self,
        x: &DeviceBuffer<f32>,
        channels: usize,
        len: usize,
        gamma: &DeviceBuffer<f32>,
        beta: &DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        self.enc
            .attn
            .layer_norm_channels(x, channels, len, gamma, beta, LN_EPS, out)
            .map_err(dev_err)
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
        let dims = EncDims {
            hidden: h,
            ffn: enc.layers().first().map_or(0, |l| l.ffn1.out_channels()),
            proj_out: enc.proj().out_channels(),
            shape: enc.attn_shape(0),
        };
        for (i, l) in enc.layers().iter().enumerate() {
            let ok = [&l.q, &l.k, &l.v, &l.o]
                .iter()
                .all(|c| c.in_channels() == h && c.out_channels() == h && c.kernel() == 1)
                && l.ffn1.in_channels() == h
                && l.ffn1.out_channels() == dims.ffn
                && l.ffn2.in_channels() == dims.ffn
                && l.ffn2.out_channels() == h
                && enc.proj().in_channels() == h;
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
        let per_sentence = 4
            * (enc.attn_shape(FIT_PHONEMES).scratch_len()
                + (6 * h + dims.ffn + dims.proj_out) * FIT_PHONEMES) as u64;
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
                Ok(EncLayer {
                    q: up(&l.q)?,
                    k: up(&l.k)?,
                    v: up(&l.v)?,
                    o: up(&l.o)?,
                    emb_k: put(&l.emb_k)?,
                    emb_v: put(&l.emb_v)?,
                    gamma1: put(l.norm1.gamma())?,
                    beta1: put(l.norm1.beta())?,
                    ffn1: up(&l.ffn1)?,
                    ffn2: up(&l.ffn2)?,
                    gamma2: put(l.norm2.gamma())?,
                    beta2: put(l.norm2.beta())?,
                })
            })
            .collect::<Result<Vec<_>, VitsError>>()?;
        Ok(CudaEncoder {
            conv: Conv1dOps::load(ctx).map_err(dev_err)?,
            attn: RelEncoderOps::load(ctx).map_err(dev_err)?,
            owner: owner.clone(),
            dims,
            layers,
            proj: up(enc.proj())?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The encoder on `x [h, T]` (the embedded ids, [`TextEncoder::embed`]), as
    /// [`TextEncoder::run`].
    pub fn run(&self, x_host: &[f32], t: usize) -> Result<EncodedHost, VitsError> {
        let (x, stats) = self.run_on_device(x_host, t)?;
        let mut xo = self.ctx.download(&x).map_err(dev_err)?;
        xo.truncate(self.dims.hidden * t);
        Ok(EncodedHost { x: xo, stats })
    }

    /// [`CudaEncoder::run`] with the hidden states `[h, T]` left on the device (the
    /// [`super::CudaDuration`]'s input); only `[m; logs]` `[2c, T]` comes back.
    pub fn run_on_device(
        &self,
        x_host: &[f32],
        t: usize,
    ) -> Result<(DeviceBuffer<f32>, Vec<f32>), VitsError> {
        let (x, stats) = run(
            &Dev { enc: self },
            &self.layers,
            &self.proj,
            self.dims,
            x_host,
            t,
        )?;
        let mut so = self.ctx.download(&stats).map_err(dev_err)?;
        so.truncate(self.dims.proj_out * t);
        Ok((x, so))
    }
}
