//! The video pipeline, "DCGAN latent walk": a seeded walk through the face
//! generator's latent space (slerp between one keyframe per second), rendered
//! at the requested fps in chunks of 8 frames and packed as an MJPEG AVI. An
//! honest small default for the video path until a real video model lands.
//!
//! Key design choice: a stage is one chunk of frames; the hold is the finished
//! frames as RGB bytes (their position is their count), so resuming recomputes
//! nothing and the keyframes are re-derived from the seed.

use favlo_pipeline::{
    Control, MediaError, MediaFile, MediaHold, MediaJob, MediaKind, MediaOutput, MediaPaused,
    MediaPipeline, PipelineError, Signal,
};

use crate::avi;
use crate::encode;
use crate::engine::Engine;
use crate::generator::{IMAGE_LEN, MAX_BATCH, NZ, SIDE};
use crate::noise::LatentWalk;
use crate::request::{param, video_params};

/// Frames per stage.
pub const CHUNK: usize = MAX_BATCH;

/// What a video job holds while preempted.
#[derive(Debug)]
struct VideoHold {
    job: String,
    frames: Vec<Vec<u8>>,
}

/// The DCGAN latent-walk video pipeline.
#[derive(Debug)]
pub struct DcganVideo {
    generator: Engine,
}

impl DcganVideo {
    /// Wraps an opened generator (a CPU [`crate::Generator`] or any [`Engine`]).
    pub fn new(generator: impl Into<Engine>) -> Self {
        DcganVideo {
            generator: generator.into(),
        }
    }

    /// Where the generator runs.
    pub fn device(&self) -> favlo_runtime::device::Device {
        self.generator.device()
    }

    /// Stages of a job of `frames` frames.
    pub fn stages(frames: usize) -> usize {
        frames.div_ceil(CHUNK)
    }
}

impl MediaPipeline for DcganVideo {
    fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
        Ok(MediaJob {
            id: id.to_string(),
            kind: MediaKind::Video,
            params: video_params(id, body)?,
        })
    }

    fn stages(&self, job: &MediaJob) -> Option<usize> {
        param(&job.params, "frames")
            .ok()
            .map(|f| Self::stages(f as usize))
    }

    /// Checks `control` after every chunk but the last; a cancel also before the
    /// first. A resuming call always renders at least one chunk.
    fn generate(
        &mut self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError> {
        if control.signal() == Some(Signal::Cancel) {
            return Err(MediaPaused::Cancel.into());
        }
        let seconds = param(&job.params, "seconds")? as usize;
        let fps = param(&job.params, "fps")? as usize;
        let total = seconds * fps;
        let seed = param(&job.params, "seed")?;
        let mut frames = match hold {
            Some(h) => {
                let h = h
                    .state
                    .downcast::<VideoHold>()
                    .map_err(|_| PipelineError::internal("dcgan video: foreign hold"))?;
                if h.job != job.id || h.frames.len() > total {
                    return Err(PipelineError::internal("dcgan video: hold of another job").into());
                }
                h.frames
            }
            None => Vec::with_capacity(total),
        };
        let walk = LatentWalk::new(seed, seconds, fps, NZ);
        let g = &mut self.generator;
        while frames.len() < total {
            let start = frames.len();
            let b = CHUNK.min(total - start);
            let z: Vec<f32> = (start..start + b).flat_map(|f| walk.frame(f)).collect();
            let out = g
                .forward(&z, b)
                .map_err(PipelineError::from)?
                .ok_or_else(|| PipelineError::internal("dcgan video: bad chunk"))?;
            frames.extend(out.chunks_exact(IMAGE_LEN).map(encode::to_rgb));
            if frames.len() < total {
                control.check(|| MediaHold {
                    stage: frames.len().div_ceil(CHUNK),
                    state: Box::new(VideoHold {
                        job: job.id.clone(),
                        frames: std::mem::take(&mut frames),
                    }),
                })?;
            }
        }
        Ok(MediaOutput::Video {
            width: SIDE as u32,
            height: SIDE as u32,
            fps: fps as f32,
            frames,
        })
    }

    /// The frames as JPEGs in an MJPEG AVI (the server derives the MP4 it serves).
    fn pack(&self, job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
        let MediaOutput::Video {
            width,
            height,
            frames,
            ..
        } = output
        else {
            return Err(PipelineError::internal("dcgan video: not a video output"));
        };
        let fps = param(&job.params, "fps")? as u32;
        let jpegs = frames
            .iter()
            .map(|f| encode::jpeg(width, height, f))
            .collect::<Result<Vec<_>, _>>()
            .map_err(PipelineError::internal)?;
        Ok(MediaFile {
            mime: "video/x-msvideo".into(),
            extension: "avi".into(),
            bytes: avi::mjpeg_avi(width, height, fps, &jpegs),
        })
    }
}
