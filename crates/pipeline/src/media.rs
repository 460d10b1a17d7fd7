//! The media seam: parse a body into a job, generate it stage by stage with
//! preemption, pack the output into a file.
//!
//! Key design choice: preemption is cooperative and lossless. `generate` checks
//! [`Control`] at each stage boundary (a denoising step, a decoded chunk); on
//! preempt it returns [`MediaPaused::Preempt`] with a host-side [`MediaHold`]
//! holding exactly what the next stage needs (never a device buffer: those do
//! not survive `close`). The server closes the runtime, serves the chat, reopens
//! and calls `generate` again with that hold and the same job, which must then
//! produce the same output it would have produced unpreempted.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::PipelineError;

/// What a media job produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    /// A still image.
    Image,
    /// A video clip.
    Video,
    /// Music.
    Music,
    /// Speech.
    Voice,
}

/// A parsed, validated media request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MediaJob {
    /// Job id (stable across preemptions).
    pub id: String,
    /// What it makes.
    pub kind: MediaKind,
    /// The pipeline's own resolved parameters (size, seconds, seed, prompt...).
    pub params: serde_json::Value,
}

/// A preempted job's host checkpoint: the finished stage count and whatever
/// host values the pipeline needs to continue (its own type, downcast on resume).
pub struct MediaHold {
    /// Stages finished so far (for progress and logs).
    pub stage: usize,
    /// The pipeline's state.
    pub state: Box<dyn Any + Send>,
}

impl std::fmt::Debug for MediaHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaHold")
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

/// Why `generate` returned without an output.
#[derive(Debug)]
pub enum MediaPaused {
    /// A chat preempted the job; resume with this hold.
    Preempt(MediaHold),
    /// The job was cancelled; nothing to resume.
    Cancel,
}

/// `generate`'s error: paused (not a failure) or failed.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// Preempted or cancelled at a stage boundary.
    #[error("media job paused")]
    Paused(MediaPaused),
    /// The job failed (`InvalidRequest` for a bad body is a 400).
    #[error(transparent)]
    Failed(#[from] PipelineError),
}

impl From<MediaPaused> for MediaError {
    fn from(p: MediaPaused) -> Self {
        MediaError::Paused(p)
    }
}

/// What a control check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Save a hold and return.
    Preempt,
    /// Drop everything and return.
    Cancel,
}

/// Preempt and cancel flags a running job reads at its stage boundaries.
/// Cloning shares the flags (the scheduler keeps one clone, the job the other).
#[derive(Clone, Debug, Default)]
pub struct Control {
    preempt: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
    passed: Arc<AtomicUsize>,
}

impl Control {
    /// Both flags lowered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the job to pause at its next stage boundary.
    pub fn preempt(&self) {
        self.preempt.store(true, Ordering::Release);
    }

    /// Ask the job to stop for good.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Release);
    }

    /// Lower the preempt flag before resuming.
    pub fn clear_preempt(&self) {
        self.preempt.store(false, Ordering::Release);
    }

    /// Stage boundaries passed since this control was made (the scheduler's
    /// progress: a boundary is checked after each finished stage).
    pub fn passed(&self) -> usize {
        self.passed.load(Ordering::Acquire)
    }

    /// The pending signal, cancel first.
    pub fn signal(&self) -> Option<Signal> {
        if self.cancel.load(Ordering::Acquire) {
            Some(Signal::Cancel)
        } else if self.preempt.load(Ordering::Acquire) {
            Some(Signal::Preempt)
        } else {
            None
        }
    }

    /// The stage-boundary check: `Ok` to continue; on preempt builds the hold
    /// with `hold` (called only then) and returns `Err(Preempt(hold))`; on
    /// cancel `Err(Cancel)`. Use `control.check(|| ...)?` inside `generate`.
    pub fn check(&self, hold: impl FnOnce() -> MediaHold) -> Result<(), MediaPaused> {
        match self.signal() {
            None => {
                self.passed.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            Some(Signal::Cancel) => Err(MediaPaused::Cancel),
            Some(Signal::Preempt) => Err(MediaPaused::Preempt(hold())),
        }
    }
}

/// A generated result before packing.
#[derive(Clone, Debug, PartialEq)]
pub enum MediaOutput {
    /// Interleaved 8-bit pixels, row-major.
    Image {
        /// Pixels per row.
        width: u32,
        /// Rows.
        height: u32,
        /// 3 (RGB) or 4 (RGBA).
        channels: u8,
        /// `width * height * channels` bytes.
        pixels: Vec<u8>,
    },
    /// Frames of interleaved 8-bit RGB.
    Video {
        /// Pixels per row.
        width: u32,
        /// Rows.
        height: u32,
        /// Frames per second.
        fps: f32,
        /// Each `width * height * 3` bytes.
        frames: Vec<Vec<u8>>,
    },
    /// Interleaved float samples in [-1, 1].
    Audio {
        /// Samples per second per channel.
        sample_rate: u32,
        /// Channel count.
        channels: u16,
        /// The samples.
        samples: Vec<f32>,
    },
}

/// A packed file, ready to store and serve.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaFile {
    /// MIME type (`image/png`, `audio/wav`, `video/mp4` ...).
    pub mime: String,
    /// File extension without the dot.
    pub extension: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A resident media model.
pub trait MediaPipeline: Send {
    /// Validate a body (the MCP tool arguments) into a job. A bad body is
    /// `InvalidRequest` (a 400 naming the field).
    fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError>;

    /// Run `job`, starting from `hold` when resuming. Check `control` at every
    /// stage boundary after the submitted work has finished.
    fn generate(
        &mut self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError>;

    /// How many stages `job` has (for progress), when the pipeline knows.
    fn stages(&self, job: &MediaJob) -> Option<usize> {
        let _ = job;
        None
    }

    /// Encode the output as a file.
    fn pack(&self, job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError>;

    /// Release the runtime (default: drop; the server sweeps the owner after).
    fn close(self: Box<Self>) -> Result<(), PipelineError> {
        drop(self);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Counts to `params.steps`, checking control between steps.
    struct Counter;
    impl MediaPipeline for Counter {
        fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
            let steps = body["steps"]
                .as_u64()
                .ok_or_else(|| PipelineError::invalid("steps must be an integer", Some("steps")))?;
            Ok(MediaJob {
                id: id.into(),
                kind: MediaKind::Image,
                params: serde_json::json!({ "steps": steps }),
            })
        }
        fn generate(
            &mut self,
            job: &MediaJob,
            hold: Option<MediaHold>,
            control: &Control,
        ) -> Result<MediaOutput, MediaError> {
            let steps = job.params["steps"].as_u64().unwrap_or(0) as usize;
            let (mut stage, mut acc) = match hold {
                Some(h) => {
                    let acc = *h
                        .state
                        .downcast::<u64>()
                        .map_err(|_| PipelineError::internal("bad hold"))?;
                    (h.stage, acc)
                }
                None => (0, 0u64),
            };
            while stage < steps {
                control.check(|| MediaHold {
                    stage,
                    state: Box::new(acc),
                })?;
                acc = acc * 31 + stage as u64 + 7;
                stage += 1;
                if stage == 2 {
                    control.preempt();
                }
            }
            Ok(MediaOutput::Image {
                width: 1,
                height: 1,
                channels: 3,
                pixels: vec![(acc % 256) as u8; 3],
            })
        }
        fn pack(&self, _job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
            match output {
                MediaOutput::Image { pixels, .. } => Ok(MediaFile {
                    mime: "application/octet-stream".into(),
                    extension: "raw".into(),
                    bytes: pixels,
                }),
                _ => Err(PipelineError::internal("not an image")),
            }
        }
    }

    #[test]
    fn preempt_resume_matches_uninterrupted() {
        let mut p = Counter;
        assert!(p.parse("j", &serde_json::json!({"steps": "x"})).is_err());
        let job = p.parse("j", &serde_json::json!({"steps": 5})).unwrap();
        // Reference: run with preemption ignored (acc computed directly).
        let mut acc = 0u64;
        for s in 0..5u64 {
            acc = acc * 31 + s + 7;
        }
        let control = Control::new();
        let hold = match p.generate(&job, None, &control) {
            Err(MediaError::Paused(MediaPaused::Preempt(h))) => h,
            other => panic!("expected preempt, got {other:?}"),
        };
        assert_eq!(hold.stage, 2);
        control.clear_preempt();
        // Resume from the hold: stages 2..5 run, no further preempt.
        let out = p.generate(&job, Some(hold), &control).unwrap();
        let file = p.pack(&job, out).unwrap();
        assert_eq!(file.bytes, vec![(acc % 256) as u8; 3]);

        let c2 = Control::new();
        c2.cancel();
        assert!(matches!(
            p.generate(&job, None, &c2),
            Err(MediaError::Paused(MediaPaused::Cancel))
        ));
    }
}
