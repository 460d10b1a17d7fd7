//! The DCGAN generator (`gan-face-generate`'s `Generator(nc=3, nz=100, ngf=64)`):
//! five `ConvTranspose2d(K=4)` layers, the first four followed by inference
//! `BatchNorm2d(eps=1e-5)` and ReLU, the last by tanh; z[100] → RGB 64×64 in [-1, 1].
//!
//! Key design choice: the generator runs one layer at a time over a ping-pong pair
//! of ledger buffers, so a pipeline can stop between any two layers, copy the
//! activation to the host, and later load it back and continue. Images never
//! interact (per-image GEMMs, per-channel norms), so an image's pixels do not
//! depend on how many others share its batch: chunking is invisible in the output.

use std::path::Path;
use std::sync::Arc;

use favlo_formats::torch::TorchCheckpoint;
use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::{self, BatchNorm, ConvTranspose2d};
use favlo_runtime::ledger::{self, Ledger, Owner, SpanKind};

use crate::error::DcganError;

/// Latent size.
pub const NZ: usize = 100;
/// Image side in pixels.
pub const SIDE: usize = 64;
/// Output channels (RGB).
pub const CHANNELS: usize = 3;
/// Generator layers (= image stages).
pub const LAYERS: usize = 5;
/// Largest batch the scratch holds (images per request, frames per video chunk).
pub const MAX_BATCH: usize = 8;
/// BatchNorm2d's default epsilon.
pub(crate) const BN_EPS: f32 = 1e-5;
/// Pixels of one output image, `3·64·64`.
pub const IMAGE_LEN: usize = CHANNELS * SIDE * SIDE;

/// The geometry of layer `l` (`main.{3l}` in the state dict).
pub fn layer_shape(l: usize) -> ConvTranspose2d {
    // Channels: 100 → 512 → 256 → 128 → 64 → 3; side: 1 → 4 → 8 → 16 → 32 → 64.
    const CH: [usize; LAYERS + 1] = [NZ, 512, 256, 128, 64, CHANNELS];
    let l = l.min(LAYERS - 1);
    let side = if l == 0 { 1 } else { 4 << (l - 1) };
    ConvTranspose2d {
        in_channels: CH[l],
        out_channels: CH[l + 1],
        kernel: 4,
        stride: if l == 0 { 1 } else { 2 },
        padding: if l == 0 { 0 } else { 1 },
        in_h: side,
        in_w: side,
    }
}

/// Largest activation of one image over every layer boundary.
pub fn max_act_len() -> usize {
    (0..LAYERS)
        .map(|l| layer_shape(l).in_len().max(layer_shape(l).out_len()))
        .max()
        .unwrap_or(0)
}

fn max_cols_len() -> usize {
    (0..LAYERS)
        .map(|l| layer_shape(l).cols_len())
        .max()
        .unwrap_or(0)
}

/// Bytes of every weight (all f32).
pub fn weight_bytes() -> u64 {
    let conv: usize = (0..LAYERS).map(|l| layer_shape(l).weight_len()).sum();
    let bn: usize = (0..LAYERS - 1)
        .map(|l| 4 * layer_shape(l).out_channels)
        .sum();
    ((conv + bn) * 4) as u64
}

/// Bytes of the scratch for a batch of `b`: two activations and the columns.
pub fn scratch_bytes(b: usize) -> u64 {
    ((2 * b * max_act_len() + max_cols_len()) * 4) as u64
}

/// The values of state-dict entry `name` from `tensor`, if its shape is `expected`.
pub(crate) fn checked(
    tensor: &mut impl FnMut(&str) -> Result<(Vec<f32>, Vec<usize>), DcganError>,
    name: String,
    expected: Vec<usize>,
) -> Result<Vec<f32>, DcganError> {
    let (values, found) = tensor(&name)?;
    if found != expected || values.len() != expected.iter().product::<usize>() {
        return Err(DcganError::Shape {
            name,
            expected,
            found,
        });
    }
    Ok(values)
}

struct Norm {
    weight: Buffer<f32>,
    bias: Buffer<f32>,
    mean: Buffer<f32>,
    var: Buffer<f32>,
}

struct Layer {
    shape: ConvTranspose2d,
    weight: Buffer<f32>,
    norm: Option<Norm>,
}

/// The loaded generator with its scratch; every byte is a ledger span.
pub struct Generator {
    layers: Vec<Layer>,
    /// `act[0]` holds the current activation, `act[1]` receives the next one.
    act: [Buffer<f32>; 2],
    cols: Buffer<f32>,
    /// Layer whose input `act[0]` holds (LAYERS: the output image).
    at: usize,
    batch: usize,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("at", &self.at)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Generator {
    /// Opens the generator from a `torch.save` checkpoint (`netG_state_dict`).
    pub fn open(path: &Path, ledger: &Arc<Ledger>, owner: &Owner) -> Result<Self, DcganError> {
        let bad = |reason: String| DcganError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        // Fit before the first allocation (the checkpoint map is not a span).
        ledger::fit(
            ledger,
            "the DCGAN generator (64x64, batch 8)",
            MAX_BATCH,
            MAX_BATCH,
            |b| weight_bytes() + scratch_bytes(b),
        )?;
        let ck = TorchCheckpoint::open(path).map_err(|e| bad(e.to_string()))?;
        Self::load(ledger, owner, |name| {
            ck.tensor_f32(&format!("netG_state_dict/{name}"))
                .map_err(|e| bad(e.to_string()))
        })
    }

    /// Builds the generator from a tensor source: `tensor(name)` returns the
    /// values and shape of a state-dict entry such as `main.0.weight`.
    pub fn load(
        ledger: &Arc<Ledger>,
        owner: &Owner,
        mut tensor: impl FnMut(&str) -> Result<(Vec<f32>, Vec<usize>), DcganError>,
    ) -> Result<Self, DcganError> {
        let mut take = |name: String, expected: Vec<usize>| -> Result<Buffer<f32>, DcganError> {
            let values = checked(&mut tensor, name, expected)?;
            Ok(ledger.alloc_from(owner, SpanKind::Resident, &values)?)
        };
        let mut layers = Vec::with_capacity(LAYERS);
        for l in 0..LAYERS {
            let s = layer_shape(l);
            let idx = 3 * l;
            let weight = take(
                format!("main.{idx}.weight"),
                vec![s.in_channels, s.out_channels, s.kernel, s.kernel],
            )?;
            let norm = if l + 1 < LAYERS {
                let c = vec![s.out_channels];
                let bn = idx + 1;
                Some(Norm {
                    weight: take(format!("main.{bn}.weight"), c.clone())?,
                    bias: take(format!("main.{bn}.bias"), c.clone())?,
                    mean: take(format!("main.{bn}.running_mean"), c.clone())?,
                    var: take(format!("main.{bn}.running_var"), c)?,
                })
            } else {
                None
            };
            layers.push(Layer {
                shape: s,
                weight,
                norm,
            });
        }
        let act_len = MAX_BATCH * max_act_len();
        Ok(Generator {
            layers,
            act: [
                ledger.alloc(owner, SpanKind::Scratch, act_len)?,
                ledger.alloc(owner, SpanKind::Scratch, act_len)?,
            ],
            cols: ledger.alloc(owner, SpanKind::Scratch, max_cols_len())?,
            at: 0,
            batch: 0,
        })
    }

    /// Elements of one image's activation entering layer `l` (`l == LAYERS`: the
    /// output image).
    pub fn act_len(l: usize) -> usize {
        if l >= LAYERS {
            IMAGE_LEN
        } else {
            layer_shape(l).in_len()
        }
    }

    /// Loads `batch` images' activations entering layer `at` (`at == 0`: the
    /// latents). Returns `false` (and loads nothing) when the sizes disagree.
    pub fn load_state(&mut self, at: usize, batch: usize, values: &[f32]) -> bool {
        let n = batch * Self::act_len(at);
        if at > LAYERS || batch == 0 || batch > MAX_BATCH || values.len() != n {
            return false;
        }
        self.act[0][..n].copy_from_slice(values);
        self.at = at;
        self.batch = batch;
        true
    }

    /// The layer the current activation enters (`LAYERS` once finished).
    pub fn at(&self) -> usize {
        self.at
    }

    /// The current activation of the loaded batch.
    pub fn state(&self) -> &[f32] {
        &self.act[0][..self.batch * Self::act_len(self.at)]
    }

    /// Runs the next layer over the loaded batch; `false` when already finished.
    pub fn step(&mut self) -> bool {
        let Some(layer) = self.layers.get(self.at) else {
            return false;
        };
        let s = layer.shape;
        let b = self.batch;
        let [src, dst] = &mut self.act;
        let out = &mut dst[..b * s.out_len()];
        cpu::conv_transpose2d(
            &src[..b * s.in_len()],
            &layer.weight,
            s,
            b,
            out,
            &mut self.cols,
        );
        match &layer.norm {
            Some(n) => {
                let bn = BatchNorm {
                    weight: &n.weight,
                    bias: &n.bias,
                    running_mean: &n.mean,
                    running_var: &n.var,
                    eps: BN_EPS,
                };
                cpu::batch_norm(out, s.out_h() * s.out_w(), bn);
                cpu::relu(out);
            }
            None => cpu::tanh(out),
        }
        self.act.swap(0, 1);
        self.at += 1;
        true
    }

    /// Runs every layer on `z` (`batch·100` values) and returns the images
    /// `[batch, 3, 64, 64]` in [-1, 1]; `None` when `z` has the wrong size.
    pub fn forward(&mut self, z: &[f32], batch: usize) -> Option<&[f32]> {
        if !self.load_state(0, batch, z) {
            return None;
        }
        while self.step() {}
        Some(self.state())
    }
}
