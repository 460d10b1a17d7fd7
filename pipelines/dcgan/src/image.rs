//! The image pipeline: `n` seeded faces through the generator, one stage per
//! layer, packed as one PNG (a grid when `n > 1`).
//!
//! Key design choice: the whole request (at most 8 images) is one batch, so a
//! stage is one layer over every image and the hold is the host copy of the
//! activation between two layers (at most 8 × 64·32·32 floats, 2 MiB).

use favlo_pipeline::{
    Control, MediaError, MediaFile, MediaHold, MediaJob, MediaKind, MediaOutput, MediaPaused,
    MediaPipeline, PipelineError, Signal,
};

use crate::encode;
use crate::engine::Engine;
use crate::generator::{IMAGE_LEN, LAYERS, NZ};
use crate::noise;
use crate::request::{image_params, param};

/// What an image job holds while preempted.
#[derive(Debug)]
struct ImageHold {
    job: String,
    /// Layer the activation enters.
    layer: usize,
    act: Vec<f32>,
}

/// The DCGAN image pipeline.
#[derive(Debug)]
pub struct DcganImage {
    generator: Engine,
}

impl DcganImage {
    /// Wraps an opened generator (a CPU [`crate::Generator`] or any [`Engine`]).
    pub fn new(generator: impl Into<Engine>) -> Self {
        DcganImage {
            generator: generator.into(),
        }
    }

    /// Where the generator runs.
    pub fn device(&self) -> favlo_runtime::device::Device {
        self.generator.device()
    }

    /// Stages of any image job (one per layer).
    pub fn stages() -> usize {
        LAYERS
    }
}

impl MediaPipeline for DcganImage {
    fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
        Ok(MediaJob {
            id: id.to_string(),
            kind: MediaKind::Image,
            params: image_params(id, body)?,
        })
    }

    fn stages(&self, _job: &MediaJob) -> Option<usize> {
        Some(Self::stages())
    }

    /// Checks `control` after every layer but the last (the work of a stage has
    /// finished by then); a cancel is also honoured before the first. A call that
    /// resumes always completes at least one layer, so a job makes progress under
    /// back-to-back preemptions.
    fn generate(
        &mut self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError> {
        if control.signal() == Some(Signal::Cancel) {
            return Err(MediaPaused::Cancel.into());
        }
        let n = param(&job.params, "n")? as usize;
        let seed = param(&job.params, "seed")?;
        let (layer, act) = match hold {
            Some(h) => {
                let h = h
                    .state
                    .downcast::<ImageHold>()
                    .map_err(|_| PipelineError::internal("dcgan image: foreign hold"))?;
                if h.job != job.id {
                    return Err(PipelineError::internal("dcgan image: hold of another job").into());
                }
                (h.layer, h.act)
            }
            None => (0, noise::latents(seed, n, NZ)),
        };
        let g = &mut self.generator;
        if !g.load_state(layer, n, &act).map_err(PipelineError::from)? {
            return Err(PipelineError::internal("dcgan image: hold does not match the job").into());
        }
        drop(act);
        while g.step().map_err(PipelineError::from)? {
            let at = g.at();
            if at < LAYERS {
                // Reading the state back can fail on a GPU; the hold is built inside
                // `check`, so the failure is carried out beside it.
                let mut failed = None;
                control
                    .check(|| MediaHold {
                        stage: at,
                        state: Box::new(ImageHold {
                            job: job.id.clone(),
                            layer: at,
                            act: g.state().map(<[f32]>::to_vec).unwrap_or_else(|e| {
                                failed = Some(e);
                                Vec::new()
                            }),
                        }),
                    })
                    .map_err(|p| match failed.take() {
                        Some(e) => MediaError::from(PipelineError::from(e)),
                        None => MediaError::from(p),
                    })?;
            }
        }
        let tiles: Vec<Vec<u8>> = g
            .state()
            .map_err(PipelineError::from)?
            .chunks_exact(IMAGE_LEN)
            .map(encode::to_rgb)
            .collect();
        let (w, h, pixels) = encode::grid(&tiles);
        Ok(MediaOutput::Image {
            width: w as u32,
            height: h as u32,
            channels: 3,
            pixels,
        })
    }

    fn pack(&self, _job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
        let MediaOutput::Image {
            width,
            height,
            channels: 3,
            pixels,
        } = output
        else {
            return Err(PipelineError::internal(
                "dcgan image: not an RGB image output",
            ));
        };
        Ok(MediaFile {
            mime: "image/png".into(),
            extension: "png".into(),
            bytes: encode::png(width, height, &pixels).map_err(PipelineError::internal)?,
        })
    }
}
