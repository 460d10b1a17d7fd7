//! Errors of the VITS family and their mapping onto the pipeline seam's classes.
//!
//! Key design choice: loading errors name the file and the tensor or node; the
//! seam sees `DoesNotFit` (503) for a ledger without room, `InvalidRequest` for
//! text that yields no phonemes or a sentence too long for the fitted working
//! set, and `Internal` otherwise (a missing espeak-ng says how to install it).

use std::path::PathBuf;

use favlo_pipeline::PipelineError;
use favlo_runtime::ledger::LedgerError;

/// What can go wrong while opening or running a voice.
#[derive(Debug, thiserror::Error)]
pub enum VitsError {
    /// The ONNX file or the voice config could not be read.
    #[error("{path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// A weight or graph node is missing or has an unexpected shape.
    #[error("{path}: {what}: {reason}")]
    Graph {
        path: PathBuf,
        what: String,
        reason: String,
    },
    /// The `espeak-ng` program is missing or failed.
    #[error("espeak-ng: {reason}")]
    Espeak { reason: String },
    /// A request the voice cannot synthesize.
    #[error("{message}")]
    Request {
        message: String,
        field: Option<&'static str>,
    },
    /// Noise tensors given by the caller do not match the sentence.
    #[error("noise tensor {name}: expected {expected} values, found {found}")]
    Noise {
        name: &'static str,
        expected: usize,
        found: usize,
    },
    /// The requested device cannot run the voice, or a device call failed; the
    /// message says why ("CUDA is unavailable: …").
    #[error("{message}")]
    Device { message: String },
    /// The ledger refused an allocation.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<VitsError> for PipelineError {
    fn from(e: VitsError) -> Self {
        match e {
            VitsError::Ledger(LedgerError::DoesNotFit { request, .. }) => {
                PipelineError::does_not_fit(request)
            }
            VitsError::Ledger(LedgerError::NoRoom { owner, .. }) => {
                PipelineError::does_not_fit(format!("the VITS voice for {owner}"))
            }
            VitsError::Request { message, field } => PipelineError::invalid(message, field),
            other => PipelineError::internal(other),
        }
    }
}
