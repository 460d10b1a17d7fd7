//! The HiFi-GAN generator (`dec`): `conv_pre`, then per upsampling stage a
//! leaky ReLU (0.1), a transposed convolution and the mean of the stage's
//! multi-receptive-field residual blocks (type 2: two dilated convolutions,
//! each after a leaky ReLU, each residual), then leaky ReLU (0.01),
//! `conv_post` and tanh.
//!
//! Key design choice: the activation that every residual block of a stage
//! starts from (`lrelu(x)`) is computed once per stage, as the exported graph
//! does; block outputs accumulate into one buffer, so a stage holds six
//! `[C, L]` buffers at its peak.

use favlo_runtime::cpu;

use crate::error::VitsError;
use crate::weights::{Conv, Loader, Workspace};

/// Leaky ReLU slope inside the generator.
pub const SLOPE: f32 = 0.1;
/// Slope of the last leaky ReLU (PyTorch's default).
pub const SLOPE_POST: f32 = 0.01;

#[derive(Debug)]
struct ResBlock {
    convs: Vec<Conv>,
}

#[derive(Debug)]
struct Stage {
    up: Conv,
    blocks: Vec<ResBlock>,
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
            blocks.push(ResBlock { convs });
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
        let mut blocks = blocks.into_iter();
        let stages = ups
            .into_iter()
            .map(|up| Stage {
                up,
                blocks: blocks.by_ref().take(per).collect(),
            })
            .collect();
        Ok(Decoder {
            pre: l.conv("dec.conv_pre", None)?,
            stages,
            post: l.conv("dec.conv_post", None)?,
        })
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
            let mut a = ws.buf(x.len())?;
            cpu::leaky_relu(&x, SLOPE, &mut a);
            drop(x);
            let up = stage.up.run(ws, &a, len)?;
            drop(a);
            len = stage.up.out_len(len);
            let n = up.len();
            let mut base = ws.buf(n)?;
            cpu::leaky_relu(&up, SLOPE, &mut base);
            let mut acc = ws.buf(n)?;
            let mut y = ws.buf(n)?;
            let mut t = ws.buf(n)?;
            let mut act = ws.buf(n)?;
            for block in &stage.blocks {
                // y = x + c0(lrelu(x)); then y += c_k(lrelu(y)) for the others.
                y.copy_from_slice(&up);
                for (k, conv) in block.convs.iter().enumerate() {
                    if k == 0 {
                        conv.run_into(ws, &base, len, &mut t)?;
                    } else {
                        cpu::leaky_relu(&y, SLOPE, &mut act);
                        conv.run_into(ws, &act, len, &mut t)?;
                    }
                    cpu::add(&mut y, &t);
                }
                cpu::add(&mut acc, &y);
            }
            let inv = 1.0 / stage.blocks.len() as f32;
            acc.iter_mut().for_each(|v| *v *= inv);
            x = acc;
        }
        let mut a = ws.buf(x.len())?;
        cpu::leaky_relu(&x, SLOPE_POST, &mut a);
        drop(x);
        let mut out = self.post.run(ws, &a, len)?;
        cpu::tanh(&mut out);
        Ok(out.to_vec())
    }
}
