//! The VITS synthesizer (`SynthesizerTrn.infer`) on the CPU kernels: text
//! encoder → stochastic durations → length regulation and prior sample →
//! reverse flow → HiFi-GAN.
//!
//! Key design choice: one sentence per call, no batching and no masks; every
//! tensor is a ledger buffer that lives only for the call, so a voice at rest
//! holds only its weights. Noise is an input (seeded stream or caller tensors),
//! so the whole call is a pure function of (ids, scales, noise).

pub mod decoder;
pub mod duration;
pub mod encoder;
pub mod flow;
pub mod mrf;
pub mod spline;

use std::path::Path;
use std::sync::Arc;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

use crate::config::Scales;
use crate::error::VitsError;
use crate::noise::Normals;
use crate::weights::{Loader, Scratch, Workspace};

pub use decoder::Decoder;
pub use duration::DurationPredictor;
pub use encoder::TextEncoder;
pub use flow::Flow;

/// Where a sentence's noise comes from.
#[derive(Debug)]
pub enum Noise<'a> {
    /// The seeded stream (see [`crate::noise`]).
    Stream(&'a mut Normals),
    /// Caller tensors: `dp` `[2, T]` and `z` `[C, F]` standard normals (before
    /// scaling by `noise_w` / `noise_scale`).
    Given {
        /// Duration noise.
        dp: &'a [f32],
        /// Prior noise.
        z: &'a [f32],
    },
}

/// Intermediate tensors of one call, for tests and diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Prior means `[C, T]`.
    pub m_p: Vec<f32>,
    /// Prior log-sds `[C, T]`.
    pub logs_p: Vec<f32>,
    /// Log durations `[T]`.
    pub logw: Vec<f32>,
    /// Frames per phoneme `[T]` (`ceil(exp(logw) · length_scale)`).
    pub w_ceil: Vec<f32>,
    /// Flow output `[C, F]` (the decoder's input).
    pub z: Vec<f32>,
}

/// A loaded VITS voice.
#[derive(Debug)]
pub struct Vits {
    enc: TextEncoder,
    dp: DurationPredictor,
    flow: Flow,
    dec: Decoder,
    /// The encoder's, the durations', the flow's and the decoder's GPU twins when the
    /// voice was opened on CUDA.
    #[cfg(feature = "cuda")]
    gpu: Option<Gpu>,
    ws: Workspace,
}

/// The GPU stages of a voice opened on CUDA (one context).
#[cfg(feature = "cuda")]
#[derive(Debug)]
struct Gpu {
    enc: crate::cuda::CudaEncoder,
    dp: crate::cuda::CudaDuration,
    flow: crate::cuda::CudaFlow,
    dec: crate::cuda::CudaDecoder,
}

/// Whether `device` can run the voice's decoder here: `Ok` for the CPU; for
/// `Device::Cuda(n)` the build needs the `cuda` feature and the driver, NVRTC and
/// device `n` must answer. The error ("CUDA is unavailable: …") says why not.
pub fn check_device(device: Device) -> Result<(), VitsError> {
    match device {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => crate::cuda::probe(n as usize),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(VitsError::Device {
            message: "CUDA is unavailable: favlo-vits was built without CUDA support (cargo feature `cuda`)".into(),
        }),
        other => Err(VitsError::Device {
            message: format!("device {other} is not supported for the VITS voice"),
        }),
    }
}

impl Vits {
    /// Loads every weight of `onnx` into `owner`'s resident spans.
    pub fn open(onnx: &Path, ledger: &Arc<Ledger>, owner: &Owner) -> Result<Self, VitsError> {
        Self::open_on(onnx, ledger, owner, Device::Cpu, 0)
    }

    /// [`Vits::open`], then with `Device::Cuda(n)` the text encoder's, the duration
    /// predictor's, the flow's and the decoder's weights also go to cuda:`n` (fitted there for sentences of
    /// `max_frames` frames) and those stages run there; `Device::Cpu` is exactly
    /// [`Vits::open`].
    pub fn open_on(
        onnx: &Path,
        ledger: &Arc<Ledger>,
        owner: &Owner,
        device: Device,
        max_frames: usize,
    ) -> Result<Self, VitsError> {
        check_device(device)?;
        #[cfg(not(feature = "cuda"))]
        let _ = max_frames;
        let l = Loader::open(onnx, ledger, owner)?;
        let with_path = |e: VitsError| match e {
            VitsError::Graph { what, reason, .. } => VitsError::Graph {
                path: onnx.to_path_buf(),
                what,
                reason,
            },
            other => other,
        };
        let dec = Decoder::load(&l).map_err(with_path)?;
        let flow = Flow::load(&l).map_err(with_path)?;
        let enc = TextEncoder::load(&l).map_err(with_path)?;
        let dp = DurationPredictor::load(&l).map_err(with_path)?;
        #[cfg(feature = "cuda")]
        let gpu = match device {
            Device::Cuda(n) => {
                let dec = crate::cuda::CudaDecoder::open(&dec, n as usize, owner, max_frames)?;
                let ctx = dec.context();
                Some(Gpu {
                    flow: crate::cuda::CudaFlow::open(&flow, ctx, owner, max_frames)?,
                    enc: crate::cuda::CudaEncoder::open(&enc, ctx, owner)?,
                    dp: crate::cuda::CudaDuration::open(&dp, ctx, owner)?,
                    dec,
                })
            }
            _ => None,
        };
        Ok(Vits {
            enc,
            dp,
            flow,
            dec,
            #[cfg(feature = "cuda")]
            gpu,
            ws: Workspace::new(ledger, owner),
        })
    }

    /// The device the GPU-capable stages (text encoder, durations, flow, decoder) run on.
    pub fn device(&self) -> Device {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            return Device::Cuda(g.dec.ordinal());
        }
        Device::Cpu
    }

    /// The (CPU) HiFi-GAN generator.
    pub fn decoder(&self) -> &Decoder {
        &self.dec
    }

    /// Samples per frame.
    pub fn hop(&self) -> usize {
        self.dec.hop()
    }

    /// Scratch bytes a sentence of `frames` frames needs at its peak (the
    /// decoder's widest stage: six buffers plus the padded input).
    pub fn scratch_bytes(&self, frames: usize) -> u64 {
        (4 * 7 * self.dec.peak_per_frame() * frames) as u64
    }

    /// Frames per phoneme for `logw`: `ceil(exp(logw) · length_scale)`.
    pub fn frames_of(logw: &[f32], length_scale: f32) -> Vec<f32> {
        logw.iter()
            .map(|l| (l.exp() * length_scale).ceil())
            .collect()
    }

    /// Synthesizes one sentence of phoneme ids; `max_frames` bounds the length
    /// (the working set the voice was fitted for). Scratch buffers stay
    /// pooled for the next sentence until [`Vits::release_scratch`].
    pub fn synthesize(
        &self,
        ids: &[i64],
        scales: Scales,
        noise: Noise<'_>,
        max_frames: usize,
        trace: Option<&mut Trace>,
    ) -> Result<Vec<f32>, VitsError> {
        self.run(ids, scales, noise, max_frames, trace)
    }

    /// Frees the pooled scratch (call at the end of a job).
    pub fn release_scratch(&self) {
        self.ws.release();
    }

    /// The text encoder and the stochastic durations on the voice's device, for noise
    /// `[2, T]` already scaled by `noise_w`: prior means, log-sds (`[C, T]` each) and
    /// `logw [T]`. On CUDA the embedded ids and the noise go up, the hidden states stay
    /// on the device between the two stages, and the prior statistics and `logw` come
    /// back (length regulation and the prior sample run on the host).
    fn encode_durations<'w>(
        &self,
        ws: &'w Workspace,
        ids: &[i64],
        dp_noise: &[f32],
    ) -> Result<(Scratch<'w>, Scratch<'w>, Vec<f32>), VitsError> {
        let t = ids.len();
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            let x = self.enc.embed(ws, ids)?;
            let (xd, stats) = g.enc.run_on_device(&x, t)?;
            drop(x);
            let logw = g.dp.run(&xd, t, dp_noise)?;
            drop(xd);
            let c = stats.len() / (2 * t);
            return Ok((
                ws.copy(&stats[..c * t])?,
                ws.copy(&stats[c * t..2 * c * t])?,
                logw,
            ));
        }
        let e = self.enc.run(ws, ids)?;
        let logw = self.dp.run(ws, &e.x, t, dp_noise)?;
        Ok((e.m, e.logs, logw))
    }

    fn run(
        &self,
        ids: &[i64],
        scales: Scales,
        noise: Noise<'_>,
        max_frames: usize,
        mut trace: Option<&mut Trace>,
    ) -> Result<Vec<f32>, VitsError> {
        let ws = &self.ws;
        let t = ids.len();
        if t == 0 {
            return Ok(Vec::new());
        }
        // Duration noise now; the prior's noise once the frame count is known.
        let (dp_noise, z_src) = match noise {
            Noise::Stream(s) => (s.take(2 * t), Noise::Stream(s)),
            Noise::Given { dp, z } => {
                if dp.len() != 2 * t {
                    return Err(VitsError::Noise {
                        name: "dp",
                        expected: 2 * t,
                        found: dp.len(),
                    });
                }
                (dp.to_vec(), Noise::Given { dp, z })
            }
        };
        let scaled: Vec<f32> = dp_noise.iter().map(|v| v * scales.noise_w).collect();
        let (e_m, e_logs, logw) = self.encode_durations(ws, ids, &scaled)?;
        let w_ceil = Self::frames_of(&logw, scales.length_scale);
        let frames = (w_ceil.iter().map(|v| *v as f64).sum::<f64>().max(1.0)) as usize;
        if frames > max_frames {
            return Err(VitsError::Request {
                message: format!(
                    "a sentence of {frames} frames is longer than the {max_frames} frames this voice was fitted for; split the text into shorter sentences"
                ),
                field: Some("text"),
            });
        }
        let c = self.flow.channels();
        let eps = match z_src {
            Noise::Stream(s) => s.take(c * frames),
            Noise::Given { z, .. } => {
                if z.len() != c * frames {
                    return Err(VitsError::Noise {
                        name: "z",
                        expected: c * frames,
                        found: z.len(),
                    });
                }
                z.to_vec()
            }
        };
        // Length regulation and the prior sample z_p = m + ε·exp(logs)·noise_scale.
        let mut z = ws.zeroed(c * frames)?;
        let mut f0 = 0usize;
        for (j, w) in w_ceil.iter().enumerate() {
            let n = (*w as usize).min(frames - f0.min(frames));
            for ch in 0..c {
                let (m, ls) = (e_m[ch * t + j], e_logs[ch * t + j]);
                let row = ch * frames;
                for f in f0..f0 + n {
                    z[row + f] = m + eps[row + f] * ls.exp() * scales.noise_scale;
                }
            }
            f0 += n;
        }
        if let Some(tr) = trace.as_deref_mut() {
            tr.m_p = e_m.to_vec();
            tr.logs_p = e_logs.to_vec();
            tr.logw = logw.clone();
            tr.w_ceil = w_ceil.clone();
        }
        drop((e_m, e_logs));
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            // z_p goes up once; the flow's output stays on the device for the decoder.
            let zd = g.flow.reverse(&z, frames)?;
            drop(z);
            if let Some(tr) = trace {
                let mut v = g
                    .dec
                    .context()
                    .download(&zd)
                    .map_err(crate::cuda::dev_err)?;
                v.truncate(c * frames);
                tr.z = v;
            }
            return g.dec.run_on_device(zd, frames);
        }
        self.flow.reverse(ws, &mut z, frames)?;
        if let Some(tr) = trace {
            tr.z = z.to_vec();
        }
        self.dec.run(ws, &z, frames)
    }
}
