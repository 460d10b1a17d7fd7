//! The stochastic duration predictor on a CUDA GPU: the step sequence of `dp_seq.rs`
//! on the runtime's `Conv1dOps` (the 1×1 convolutions, `pre(z0) + g` through the
//! residual epilogue), `RelEncoderOps::layer_norm_channels` and `VitsDpOps` (depthwise
//! dilated convolution, GELU, inverse spline).
//!
//! Key design choices:
//! - The input is the device encoder's hidden states, which no longer come back to the
//!   host; the noise `[2, T]` (the CPU path's own stream, scaled by `noise_w` on the
//!   host) goes up and the `T` values of the last flow's output come back, where the
//!   affine makes `logw` (length regulation and the prior sample stay on the host).
//! - Weights are `Resident` spans under the voice's owner (≈ 2 MB), a sentence's
//!   tensors `Scratch` spans freed with it; everything is fitted in the device ledger at
//!   open for a [`super::FIT_PHONEMES`]-phoneme sentence.

use std::sync::Arc;

use favlo_runtime::cpu::Conv1d;
use favlo_runtime::cuda::{
    Conv1dEpilogue, Conv1dOps, CudaContext, DeviceBuffer, RelEncoderOps, VitsDpOps,
};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use super::dp_seq::{DpBackend, DpWeights, run};
use super::{DevConv, FIT_PHONEMES, dev_err};
use crate::error::VitsError;
use crate::model::DurationPredictor;
use crate::model::duration::BINS;
use crate::model::encoder::LN_EPS;
use crate::weights::{Conv, ConvKind};

/// A depthwise convolution resident on the device.
struct DevDw {
    geo: Conv1d,
    weight: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
}

/// The duration predictor resident on one GPU.
pub struct CudaDuration {
    ctx: Arc<CudaContext>,
    conv: Conv1dOps,
    norm: RelEncoderOps,
    ops: VitsDpOps,
    owner: Owner,
    w: DpWeights<DevConv, DevDw, DeviceBuffer<f32>>,
}

impl std::fmt::Debug for CudaDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDuration")
            .field("device", &self.ctx.name())
            .field("flows", &self.w.flows.len())
            .finish_non_exhaustive()
    }
}

/// A sentence's device: the predictor's kernels and the owner of its scratch.
struct Dev<'a> {
    d: &'a CudaDuration,
}

impl DpBackend for Dev<'_> {
    type Buf = DeviceBuffer<f32>;
    type Conv = DevConv;
    type Dw = DevDw;
    type Vec = DeviceBuffer<f32>;

    fn upload(&self, v: &[f32]) -> Result<DeviceBuffer<f32>, VitsError> {
        let d = self.d;
        d.ctx
            .upload(&d.owner, SpanKind::Scratch, v)
            .map_err(dev_err)
    }

    fn scratch(&self, n: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        let d = self.d;
        d.ctx
            .alloc(&d.owner, SpanKind::Scratch, n.max(1))
            .map_err(dev_err)
    }

    fn download(&self, x: &DeviceBuffer<f32>, n: usize) -> Result<Vec<f32>, VitsError> {
        let mut v = self.d.ctx.download(x).map_err(dev_err)?;
        v.truncate(n);
        Ok(v)
    }

    fn conv(
        &self,
        c: &DevConv,
        x: &DeviceBuffer<f32>,
        len: usize,
        residual: Option<&DeviceBuffer<f32>>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        let epi = Conv1dEpilogue {
            residual,
            accumulate: false,
        };
        c.run(&self.d.conv, x, len, None, epi, y)
    }

    fn dw(
        &self,
        c: &DevDw,
        x: &DeviceBuffer<f32>,
        len: usize,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        self.d
            .ops
            .dw_conv1d(x, len, &c.weight, c.bias.as_ref(), c.geo, y)
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
        self.d
            .norm
            .layer_norm_channels(x, channels, len, gamma, beta, LN_EPS, out)
            .map_err(dev_err)
    }

    fn gelu(&self, x: &mut DeviceBuffer<f32>, n: usize) -> Result<(), VitsError> {
        self.d.ops.gelu(x, n).map_err(dev_err)
    }

    fn gelu_add(
        &self,
        acc: &mut DeviceBuffer<f32>,
        y: &DeviceBuffer<f32>,
        n: usize,
    ) -> Result<(), VitsError> {
        self.d.ops.gelu_add(acc, y, n).map_err(dev_err)
    }

    fn spline(
        &self,
        z: &mut DeviceBuffer<f32>,
        p: &DeviceBuffer<f32>,
        len: usize,
        bins: usize,
        scale: f32,
        bound: f32,
    ) -> Result<(), VitsError> {
        self.d
            .ops
            .spline_inverse(z, p, len, bins, scale, bound)
            .map_err(dev_err)
    }
}

fn conv_values(c: &Conv) -> usize {
    c.weight().len() + c.bias().map_or(0, <[f32]>::len)
}

impl CudaDuration {
    /// Uploads `dp`'s weights to `ctx` under `owner`, after fitting them plus the working
    /// set of a [`FIT_PHONEMES`]-phoneme sentence in the device ledger.
    pub fn open(
        dp: &DurationPredictor,
        ctx: &Arc<CudaContext>,
        owner: &Owner,
    ) -> Result<Self, VitsError> {
        let filter = dp.pre.out_channels();
        let dds_values = |d: &crate::model::duration::DdsConv| {
            d.sep.iter().chain(&d.pw).map(conv_values).sum::<usize>() + 4 * filter * d.sep.len()
        };
        let dds_ok = |d: &crate::model::duration::DdsConv| {
            d.sep
                .iter()
                .all(|c| matches!(c.kind(), ConvKind::Depthwise(_)) && c.out_channels() == filter)
                && d.pw.iter().all(|c| {
                    matches!(c.kind(), ConvKind::Dense(_))
                        && c.in_channels() == filter
                        && c.out_channels() == filter
                })
        };
        let mut values = conv_values(&dp.pre) + conv_values(&dp.proj) + dds_values(&dp.convs);
        let mut ok = dds_ok(&dp.convs) && dp.proj.out_channels() == filter;
        for f in &dp.flows {
            ok &= dds_ok(&f.convs)
                && f.filter == filter
                && f.pre.in_channels() == 1
                && f.proj.in_channels() == filter
                && f.proj.out_channels() == 3 * BINS - 1;
            values += conv_values(&f.pre) + conv_values(&f.proj) + dds_values(&f.convs);
        }
        if !ok {
            return Err(VitsError::Device {
                message: "duration predictor on CUDA: unexpected layer shapes".into(),
            });
        }
        // h, three DDSConv temporaries and g `[filter, T]`, the spline parameters, z.
        let per_sentence = 4 * ((5 * filter + 3 * BINS - 1 + 2) * FIT_PHONEMES) as u64;
        ledger::fit(
            ctx.ledger(),
            &format!(
                "the VITS duration predictor on cuda:{} with sentences up to {FIT_PHONEMES} phonemes",
                ctx.ordinal()
            ),
            1,
            1,
            |_| 4 * values as u64 + per_sentence,
        )?;
        let put = |v: &[f32]| ctx.upload(owner, SpanKind::Resident, v).map_err(dev_err);
        let w = DpWeights::build(
            dp,
            &mut |c: &Conv| DevConv::upload(ctx, owner, c),
            &mut |c: &Conv| {
                let ConvKind::Depthwise(geo) = c.kind() else {
                    return Err(VitsError::Device {
                        message:
                            "duration predictor on CUDA: a DDSConv convolution is not depthwise"
                                .into(),
                    });
                };
                Ok(DevDw {
                    geo,
                    weight: put(c.weight())?,
                    bias: c.bias().map(put).transpose()?,
                })
            },
            &mut |v: &[f32]| put(v),
        )?;
        Ok(CudaDuration {
            conv: Conv1dOps::load(ctx).map_err(dev_err)?,
            norm: RelEncoderOps::load(ctx).map_err(dev_err)?,
            ops: VitsDpOps::load(ctx).map_err(dev_err)?,
            owner: owner.clone(),
            w,
            ctx: Arc::clone(ctx),
        })
    }

    /// `logw [T]` for the encoder's hidden states `x [h, T]` on this context and noise
    /// `[2, T]` already scaled by `noise_w` (as [`DurationPredictor::run`]).
    pub fn run(
        &self,
        x: &DeviceBuffer<f32>,
        len: usize,
        noise: &[f32],
    ) -> Result<Vec<f32>, VitsError> {
        run(&Dev { d: self }, &self.w, x, len, noise)
    }
}
