//! The voice's GPU stages (feature `cuda`): the text encoder ([`CudaEncoder`],
//! `encoder.rs`, its step sequence in `encoder_seq.rs`), the stochastic duration
//! predictor ([`CudaDuration`], `duration.rs`, its step sequence in `dp_seq.rs`), the
//! reverse flow ([`CudaFlow`], `flow.rs`, its step sequence in `flow_plan.rs`) and the
//! HiFi-GAN generator ([`CudaDecoder`], here: the CPU [`Decoder`]'s layer sequence), on
//! the runtime's 1-D convolution kernels (`favlo_runtime::cuda::Conv1dOps`), for the
//! attention and layer norms `favlo_runtime::cuda::RelEncoderOps`, and for the
//! durations' depthwise convolutions, GELU and spline `favlo_runtime::cuda::VitsDpOps`.
//! Per sentence the embedded ids and the scaled duration noise go up; the encoder's
//! hidden states stay on the device for the durations; the prior statistics and `logw`
//! come back (length regulation and the prior sample run on the host); the prior sample
//! `z_p [C, frames]` goes up once, the flow's output stays on the device as the
//! decoder's input, and the waveform comes back.
//!
//! Key design choices:
//! - The weights are the CPU modules' own (the decoder's mean over a stage's blocks
//!   already folded into the next weights; the flow's flips and subtraction folded
//!   into permuted / negated copies; the encoder's unchanged), uploaded once as `Resident` spans of the CUDA
//!   context's ledger under the voice's owner; a sentence's tensors are `Scratch`
//!   spans that live for the call.
//! - Whole-tensor convolutions (no time chunks: the GPU has the memory), each a single
//!   launch with the leaky ReLU fused into its input gather; a block's last convolution
//!   adds its residual and accumulates straight into the stage's block sum, so a stage
//!   holds four `[C, L]` tensors (upsampled input, block sum, two chain temporaries).
//!   Zero padding of the whole tensor is what the CPU's chunked halo reproduces, so the
//!   two paths compute the same function; only summation orders differ (exact f32).

#[cfg(test)]
mod dp_emulated;
mod dp_seq;
mod duration;
mod encoder;
mod encoder_seq;
mod flow;
mod flow_plan;

use std::sync::Arc;

use favlo_runtime::cuda::{
    Conv1dEpilogue, Conv1dOps, CudaContext, CudaError, DeviceBuffer, KernelSet, warm_kernels,
};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use crate::error::VitsError;
use crate::model::decoder::{Decoder, SLOPE, SLOPE_POST};
use crate::weights::{Conv, ConvKind};

pub use duration::CudaDuration;
pub use encoder::{CudaEncoder, EncodedHost, FIT_PHONEMES};
pub use flow::CudaFlow;

/// A CUDA error as the crate's error: a ledger refusal stays a ledger refusal ("does
/// not fit"), anything else is a device error.
pub(crate) fn dev_err(e: CudaError) -> VitsError {
    match e {
        CudaError::Ledger(l) => VitsError::Ledger(l),
        other => VitsError::Device {
            message: other.to_string(),
        },
    }
}

/// Whether cuda:`ordinal` can be opened here: `Ok(())` or why not ("CUDA is
/// unavailable: …").
pub(crate) fn probe(ordinal: usize) -> Result<(), VitsError> {
    let count = CudaContext::probe().map_err(dev_err)?;
    if ordinal >= count {
        return Err(VitsError::Device {
            message: format!(
                "CUDA is unavailable: no device cuda:{ordinal} (the driver reports {count})"
            ),
        });
    }
    Ok(())
}

/// One convolution resident on the device.
struct DevConv {
    kind: ConvKind,
    weight: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
}

impl DevConv {
    fn upload(ctx: &CudaContext, owner: &Owner, c: &Conv) -> Result<Self, VitsError> {
        if matches!(c.kind(), ConvKind::Depthwise(_)) {
            return Err(VitsError::Device {
                message: "a depthwise convolution (not supported on CUDA)".into(),
            });
        }
        let put = |v: &[f32]| ctx.upload(owner, SpanKind::Resident, v).map_err(dev_err);
        Ok(DevConv {
            kind: c.kind(),
            weight: put(c.weight())?,
            bias: c.bias().map(put).transpose()?,
        })
    }

    fn out_channels(&self) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.out_channels,
            ConvKind::Transposed(s) => s.out_channels,
        }
    }

    fn out_len(&self, len: usize) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.out_len(len),
            ConvKind::Transposed(s) => s.out_len(len),
        }
    }

    /// `y = conv(lrelu(x)) (+ residual) (+ y)`.
    fn run(
        &self,
        ops: &Conv1dOps,
        x: &DeviceBuffer<f32>,
        len: usize,
        slope: Option<f32>,
        epi: Conv1dEpilogue<'_>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        let bias = self.bias.as_ref();
        match self.kind {
            ConvKind::Dense(g) => ops.conv1d(x, len, &self.weight, bias, g, slope, epi, y),
            ConvKind::Transposed(g) if epi.residual.is_none() && !epi.accumulate => {
                ops.conv_transpose1d(x, len, &self.weight, bias, g, slope, y)
            }
            _ => {
                return Err(VitsError::Device {
                    message: "unsupported convolution fusion on CUDA".into(),
                });
            }
        }
        .map_err(dev_err)
    }
}

struct DevStage {
    up: DevConv,
    blocks: Vec<Vec<DevConv>>,
}

/// The HiFi-GAN generator resident on one GPU.
pub struct CudaDecoder {
    ctx: Arc<CudaContext>,
    ops: Conv1dOps,
    owner: Owner,
    pre: DevConv,
    stages: Vec<DevStage>,
    post: DevConv,
}

impl std::fmt::Debug for CudaDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDecoder")
            .field("device", &self.ctx.name())
            .field("stages", &self.stages.len())
            .finish_non_exhaustive()
    }
}

/// Device bytes of `dec`'s weights.
fn weight_bytes(dec: &Decoder) -> u64 {
    let conv = |c: &Conv| (c.weight().len() + c.bias().map_or(0, <[f32]>::len)) as u64 * 4;
    let stages: u64 = dec
        .stages()
        .map(|(up, blocks)| conv(up) + blocks.iter().flatten().map(conv).sum::<u64>())
        .sum();
    conv(dec.pre()) + stages + conv(dec.post())
}

impl CudaDecoder {
    /// Uploads `dec`'s weights to cuda:`ordinal` under `owner`, after fitting them plus
    /// the working set of a `max_frames`-frame sentence in the device ledger.
    pub fn open(
        dec: &Decoder,
        ordinal: usize,
        owner: &Owner,
        max_frames: usize,
    ) -> Result<Self, VitsError> {
        let ctx = CudaContext::open(ordinal, None).map_err(dev_err)?;
        // First run: the voice's kernel modules compiled side by side into the disk cache.
        warm_kernels(&ctx.arch(), KernelSet::Voice).map_err(dev_err)?;
        let weights = weight_bytes(dec);
        let peak = dec.peak_per_frame() as u64;
        ledger::fit(
            ctx.ledger(),
            &format!("the VITS decoder on cuda:{ordinal} with sentences up to {max_frames} frames"),
            max_frames,
            max_frames,
            |f| weights + 4 * 5 * peak * f as u64,
        )?;
        let ops = Conv1dOps::load(&ctx).map_err(dev_err)?;
        let up = |c: &Conv| DevConv::upload(&ctx, owner, c);
        let stages = dec
            .stages()
            .map(|(u, blocks)| {
                Ok(DevStage {
                    up: up(u)?,
                    blocks: blocks
                        .iter()
                        .map(|b| b.iter().map(up).collect::<Result<Vec<_>, VitsError>>())
                        .collect::<Result<_, _>>()?,
                })
            })
            .collect::<Result<Vec<_>, VitsError>>()?;
        Ok(CudaDecoder {
            pre: up(dec.pre())?,
            post: up(dec.post())?,
            stages,
            ops,
            owner: owner.clone(),
            ctx,
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal() as u32
    }

    /// The context the decoder's weights live in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn scratch(&self, len: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        self.ctx
            .alloc(&self.owner, SpanKind::Scratch, len.max(1))
            .map_err(dev_err)
    }

    /// Waveform `[frames · hop]` in [-1, 1] from `z [C, frames]` (as [`Decoder::run`]).
    pub fn run(&self, z: &[f32], frames: usize) -> Result<Vec<f32>, VitsError> {
        let zd = self
            .ctx
            .upload(&self.owner, SpanKind::Scratch, z)
            .map_err(dev_err)?;
        self.run_on_device(zd, frames)
    }

    /// [`CudaDecoder::run`] on `z [C, frames]` already in this decoder's context (e.g.
    /// [`CudaFlow::reverse`]'s output); `z` is freed once the first convolution has
    /// read it.
    pub fn run_on_device(
        &self,
        z: DeviceBuffer<f32>,
        frames: usize,
    ) -> Result<Vec<f32>, VitsError> {
        let none = Conv1dEpilogue::default();
        let mut x = self.scratch(self.pre.out_channels() * self.pre.out_len(frames))?;
        self.pre.run(&self.ops, &z, frames, None, none, &mut x)?;
        drop(z);
        let mut len = frames;
        for stage in &self.stages {
            let c = stage.up.out_channels();
            let out_len = stage.up.out_len(len);
            let n = c * out_len;
            let mut up = self.scratch(n)?;
            stage
                .up
                .run(&self.ops, &x, len, Some(SLOPE), none, &mut up)?;
            drop(x);
            len = out_len;
            let mut acc = self.scratch(n)?;
            let mut tmp = [self.scratch(n)?, self.scratch(n)?];
            for (b, convs) in stage.blocks.iter().enumerate() {
                // y_{i+1} = y_i + conv_i(lrelu(y_i)), y_0 = up; the last one goes
                // into acc (accumulated from the second block on).
                let last = convs.len().saturating_sub(1);
                for (i, conv) in convs.iter().enumerate() {
                    let [t0, t1] = &mut tmp;
                    let (src, dst) = if i % 2 == 0 { (&*t1, t0) } else { (&*t0, t1) };
                    let src = if i == 0 { &up } else { src };
                    let epi = Conv1dEpilogue {
                        residual: Some(src),
                        accumulate: i == last && b > 0,
                    };
                    let out = if i == last { &mut acc } else { dst };
                    conv.run(&self.ops, src, len, Some(SLOPE), epi, out)?;
                }
            }
            x = acc;
        }
        let n = self.post.out_channels() * self.post.out_len(len);
        let mut out = self.scratch(n)?;
        self.post
            .run(&self.ops, &x, len, Some(SLOPE_POST), none, &mut out)?;
        self.ops.tanh(&mut out, n).map_err(dev_err)?;
        let mut wave = self.ctx.download(&out).map_err(dev_err)?;
        wave.truncate(n);
        Ok(wave)
    }
}
