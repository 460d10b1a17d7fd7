//! Favlo's VITS family: Piper voices (`en_US-joe-medium` by default) as a
//! speech pipeline on Favlo's own CPU kernels, weights read from the ONNX
//! initializers, phonemes from the `espeak-ng` program.
//!
//! Key design choice: the ONNX graph is a weight container, not a program: the
//! network (text encoder, stochastic duration predictor, flow, HiFi-GAN) is
//! written here against the runtime's kernels, with convolution weights found
//! through the graph's nodes. A job's stages are its sentences and its hold is
//! the finished samples, so a preempted job resumes to byte-identical output.

pub mod audio;
mod error;
mod espeak_lib;

pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod model;
pub mod noise;
pub mod phonemize;
pub mod request;
mod voice;
pub mod weights;

pub use config::{Scales, VoiceConfig};
pub use error::VitsError;
pub use model::{Noise, Trace, Vits};
pub use phonemize::{Phonemizer, Sentence};
pub use voice::PiperVoice;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_pipeline::{MediaPipeline, ModelSpec, PipelineError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{self, Ledger, Owner};

/// Frames per second at 22.05 kHz with a 256-sample hop (for messages).
const FRAMES_PER_SECOND: f64 = 22050.0 / 256.0;
/// Longest sentence the working set is fitted for, in frames (about 30 s).
pub const MAX_SENTENCE_FRAMES: usize = 2600;
/// Shortest acceptable fit (about 4.6 s of speech per sentence).
pub const MIN_SENTENCE_FRAMES: usize = 400;
/// Scratch floats per frame at the decoder's widest stage (Piper medium: 32
/// channels × 256 samples), times the eight buffers alive there.
const SCRATCH_FLOATS_PER_FRAME: u64 = 32 * 256 * 8;

/// The `.onnx` file of a model row: its first `.onnx` file, else the first in
/// its directory.
pub fn onnx_path(spec: &ModelSpec) -> Result<PathBuf, PipelineError> {
    if let Some(f) = spec
        .files
        .iter()
        .find(|f| f.extension().and_then(|e| e.to_str()) == Some("onnx"))
    {
        return Ok(spec.dir.join(f));
    }
    let found = std::fs::read_dir(&spec.dir).ok().and_then(|rd| {
        rd.filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("onnx"))
            .min()
    });
    found.ok_or_else(|| {
        PipelineError::internal(format!("{}: no .onnx voice file", spec.dir.display()))
    })
}

/// The voice config beside a Piper `.onnx`: `<file>.onnx.json`.
pub fn config_path(onnx: &Path) -> PathBuf {
    let mut json = onnx.as_os_str().to_owned();
    json.push(".json");
    PathBuf::from(json)
}

/// Validates a speech body for a `vits` row without opening the voice (reads
/// only its small JSON config for the default scales): the job `parse` makes.
pub fn parse_job(
    spec: &ModelSpec,
    id: &str,
    body: &serde_json::Value,
) -> Result<favlo_pipeline::MediaJob, PipelineError> {
    let config = VoiceConfig::open(&config_path(&onnx_path(spec)?))?;
    Ok(favlo_pipeline::MediaJob {
        id: id.to_string(),
        kind: favlo_pipeline::MediaKind::Voice,
        params: request::speech_params(id, body, config.scales)?.to_json(),
    })
}

/// Opens a Piper voice from its `.onnx` (config beside it as `.onnx.json`):
/// checks espeak-ng first, fits weights plus the sentence working set in the
/// ledger's room (the knob: the longest sentence, in frames), then loads.
pub fn open_path(
    onnx: &Path,
    ledger: &Arc<Ledger>,
    owner: &Owner,
) -> Result<PiperVoice, VitsError> {
    open_path_on(onnx, ledger, owner, Device::Cpu)
}

/// [`open_path`] with the text encoder, the duration predictor, the flow and the
/// HiFi-GAN decoder on `device` (`Device::Cpu`: exactly [`open_path`];
/// `Device::Cuda(n)`: their weights also go to cuda:`n`, fitted in its ledger for the
/// same longest sentence, and every sentence's encoder, durations, flow and decoder run
/// there). The device is checked before anything loads.
pub fn open_path_on(
    onnx: &Path,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    device: Device,
) -> Result<PiperVoice, VitsError> {
    model::check_device(device)?;
    let config = VoiceConfig::open(&config_path(onnx))?;
    let phonemizer = Phonemizer::new(&config.espeak_voice, config.phoneme_id_map.clone())?;
    let weights = std::fs::metadata(onnx)
        .map_err(|e| VitsError::Checkpoint {
            path: onnx.to_path_buf(),
            reason: e.to_string(),
        })?
        .len();
    let request = format!(
        "the Piper voice {} with sentences up to {:.0} s",
        onnx.file_stem().and_then(|s| s.to_str()).unwrap_or("voice"),
        MIN_SENTENCE_FRAMES as f64 / FRAMES_PER_SECOND
    );
    let max_frames = ledger::fit(
        ledger,
        &request,
        MIN_SENTENCE_FRAMES,
        MAX_SENTENCE_FRAMES,
        |f| weights + 4 * SCRATCH_FLOATS_PER_FRAME * f as u64,
    )?;
    let vits = Vits::open_on(onnx, ledger, owner, device, max_frames)?;
    Ok(PiperVoice::new(vits, config, phonemizer, max_frames))
}

/// Opens the speech pipeline for a `vits` row (kind `voice`), its decoder on `device`.
pub fn open_voice(
    spec: &ModelSpec,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    device: Device,
) -> Result<Box<dyn MediaPipeline>, PipelineError> {
    let voice = open_path_on(&onnx_path(spec)?, ledger, owner, device)?;
    Ok(Box::new(voice))
}
