//! Favlo's DCGAN family: the `gan-face-generate==1.1.1` face generator (z=100 →
//! 64×64 RGB) served as an image pipeline (PNG) and as "DCGAN latent walk", a
//! small honest video pipeline (MJPEG AVI) over the same weights.
//!
//! Key design choice: everything that decides the output bytes (seed, noise
//! stream, latent walk, quantization, encoders) is fixed and documented, and the
//! generator runs one layer at a time over ledger buffers, so a job can be
//! preempted at any stage, resumed from host values, and still produce exactly
//! the bytes of an uninterrupted run.
//!
//! With the `cuda` feature the same layers run on an NVIDIA GPU (`cuda`,
//! `open_image`/`open_video` with `Device::Cuda(n)`): same noise, same stepping, the
//! output within f32 rounding of the CPU's.

pub mod avi;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod encode;
mod engine;
mod error;
pub mod generator;
mod image;
pub mod noise;
pub mod request;
mod video;

use std::path::PathBuf;
use std::sync::Arc;

use favlo_pipeline::{MediaPipeline, ModelSpec, PipelineError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

pub use engine::{Engine, check_device};
pub use error::DcganError;
pub use generator::Generator;
pub use image::DcganImage;
pub use video::DcganVideo;

/// The checkpoint file of a model row: its first `.tar`/`.pt`/`.pth` file, else
/// `weights.tar` in its directory.
pub fn checkpoint_path(spec: &ModelSpec) -> PathBuf {
    let file = spec.files.iter().find(|f| {
        matches!(
            f.extension().and_then(|e| e.to_str()),
            Some("tar" | "pt" | "pth")
        )
    });
    spec.dir.join(
        file.cloned()
            .unwrap_or_else(|| PathBuf::from("weights.tar")),
    )
}

/// Opens the image pipeline for a `dcgan` row (kind `image`) on `device` (the CPU,
/// or a CUDA GPU with the `cuda` feature; weights then live in the GPU's ledger).
pub fn open_image(
    spec: &ModelSpec,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    device: Device,
) -> Result<Box<dyn MediaPipeline>, PipelineError> {
    let g = Engine::open(&checkpoint_path(spec), ledger, owner, device)?;
    Ok(Box::new(DcganImage::new(g)))
}

/// Opens the latent-walk video pipeline for a `dcgan` row (kind `video`) on `device`.
pub fn open_video(
    spec: &ModelSpec,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    device: Device,
) -> Result<Box<dyn MediaPipeline>, PipelineError> {
    let g = Engine::open(&checkpoint_path(spec), ledger, owner, device)?;
    Ok(Box::new(DcganVideo::new(g)))
}
