//! The HiFi-GAN generator (`dec`): `conv_pre`, then per upsampling stage a
//! leaky ReLU (0.1), a transposed convolution and the mean of the stage's
//! multi-receptive-field residual blocks (type 2: two dilated convolutions,
//! each after a leaky ReLU, each residual), then leaky ReLU (0.01),
//! `conv_post` and tanh.
//!
//! Key design choice: every leaky ReLU is fused into the gather of the
//! convolution that reads it; a stage's residual blocks run over time chunks
//! that stay in cache (`mrf.rs`), so a stage holds two `[C, L]` buffers (the
//! upsampled input and the block sum) plus a few chunk-sized temporaries per
//! worker; the mean over a stage's blocks is a sum, its 1/n folded into the
//! next weights.

use favlo_runtime::cpu;

use super::mrf;
use crate::error::VitsError;
use crate::weights::{Conv, Loader, Workspace};

/// Leaky ReLU slope inside the generator.
pub const SLOPE: f32 = 0.1;
/// Slope of the last leaky ReLU (PyTorch's default).
pub const SLOPE_POST: f32 = 0.01;

#[derive(Debug)]
struct Stage {
    up: Conv,
    /// Each block: its residual convolutions in order.
    blocks: Vec<Vec<Conv>>,
}

/// The loaded generator.
#[derive(Debug)]
pub struct Decoder {
    pre: Conv,
    stages: Vec<Stage>,
    post: Conv,
}

impl Decoder {
    /// Loads `dec.*`.
    pub fn load(l: &Loader<'_>) -> Result<Self, VitsError> {
        let mut ups = Vec::new();
        while l.has_conv(&format!("dec.ups.{}", ups.len())) {
            ups.push(l.conv(&format!("dec.ups.{}", ups.len()), None)?);
        }
        let mut blocks = Vec::new();
        while l.has_conv(&format!("dec.resblocks.{}.convs.0", blocks.len())) {
            let b = blocks.len();
            let mut convs = Vec::new();
            while l.has_conv(&format!("dec.resblocks.{b}.convs.{}", convs.len())) {
                convs.push(l.conv(&format!("dec.resblocks.{b}.convs.{}", convs.len()), None)?);
            }
            blocks.push(convs);
        }
        if ups.is_empty() || blocks.len() % ups.len() != 0 {
            let reason = if l.has_conv("dec.resblocks.0.convs1.0") {
                "residual blocks of type 1 (convs1/convs2) are not supported".to_string()
            } else {
                format!(
                    "{} residual blocks for {} upsampling stages",
                    blocks.len(),
                    ups.len()
                )
            };
            return Err(VitsError::Graph {
                path: Default::default(),
                what: "dec".into(),
                reason,
            });
        }
        let per = blocks.len() / ups.len();
        // Every stage after the first, and conv_post, reads the mean of the
        // previous stage's blocks through a leaky ReLU; lrelu(x/n) = lrelu(x)/n,
        // so the 1/n is folded into their weights instead of a pass over x.
        let inv = 1.0 / per as f32;
        let mut blocks = blocks.into_iter();
        let stages = ups
            .into_iter()
            .enumerate()
            .map(|(i, mut up)| {
                if i > 0 {
                    up.scale_weight(inv);
                }
                Stage {
                    up,
                    blocks: blocks.by_ref().take(per).collect(),
                }
            })
            .collect();
        let mut post = l.conv("dec.conv_post", None)?;
        post.scale_weight(inv);
        Ok(Decoder {
            pre: l.conv("dec.conv_pre", None)?,
            stages,
            post,
        })
    }

    /// `conv_pre`.
    pub fn pre(&self) -> &Conv {
        &self.pre
    }

    /// The upsampling stages: each stage's transposed convolution and its residual
    /// blocks (each a chain of convolutions), weights with the folded 1/blocks.
    pub fn stages(&self) -> impl Iterator<Item = (&Conv, &[Vec<Conv>])> {
        self.stages.iter().map(|s| (&s.up, &s.blocks[..]))
    }

    /// `conv_post` (its weight carries the last stage's 1/blocks).
    pub fn post(&self) -> &Conv {
        &self.post
    }

    /// Samples per frame (the product of the strides).
    pub fn hop(&self) -> usize {
        self.stages
            .iter()
            .map(|s| s.up.out_len(1000) / 1000)
            .product()
    }

    /// Floats of the largest stage buffer per frame (`C · hop` of the widest stage).
    pub fn peak_per_frame(&self) -> usize {
        let mut len = 1000usize;
        let mut peak = self.pre.out_channels() * len;
        for s in &self.stages {
            len = s.up.out_len(len);
            peak = peak.max(s.up.out_channels() * len);
        }
        peak.div_ceil(1000)
    }

    /// Waveform `[frames · hop]` in [-1, 1] from `z [C, frames]`.
    pub fn run(&self, ws: &Workspace, z: &[f32], frames: usize) -> Result<Vec<f32>, VitsError> {
        let mut x = self.pre.run(ws, z, frames)?;
        let mut len = frames;
        for stage in &self.stages {
            // up = ConvTranspose(lrelu(x)), the activation fused into the gather.
            let out_len = stage.up.out_len(len);
            let mut up = ws.buf(stage.up.out_channels() * out_len)?;
            stage
                .up
                .run_fused(ws, &x, len, &mut up, Some(SLOPE), None)?;
            drop(x);
            len = out_len;
            let mut acc = ws.buf(up.len())?;
            mrf::run_blocks(
                ws,
                &stage.blocks,
                &up,
                stage.up.out_channels(),
                len,
                SLOPE,
                &mut acc,
            )?;
            // The mean's 1/blocks lives in the next convolution's weight.
            x = acc;
        }
        let mut out = ws.buf(self.post.out_channels() * self.post.out_len(len))?;
        self.post
            .run_fused(ws, &x, len, &mut out, Some(SLOPE_POST), None)?;
        cpu::tanh(&mut out);
        Ok(out.to_vec())
    }
}
