//! Errors of the DCGAN family and their mapping onto the pipeline seam's classes.
//!
//! Key design choice: loading errors name the checkpoint and tensor; the seam
//! sees `DoesNotFit` (503) for a ledger (host or GPU) without room and `Internal`
//! otherwise.

use std::path::PathBuf;

use favlo_pipeline::PipelineError;
use favlo_runtime::ledger::LedgerError;

/// What can go wrong while opening or running the generator.
#[derive(Debug, thiserror::Error)]
pub enum DcganError {
    /// The checkpoint could not be read.
    #[error("{path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// A tensor has the wrong shape for the generator.
    #[error("tensor {name}: expected shape {expected:?}, found {found:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// The ledger refused an allocation.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The device cannot run the generator (CUDA missing or unusable, a driver call
    /// failed); the message says why ("CUDA is unavailable: …").
    #[error("{message}")]
    Device { message: String },
}

impl From<DcganError> for PipelineError {
    fn from(e: DcganError) -> Self {
        match e {
            DcganError::Ledger(LedgerError::DoesNotFit { request, .. }) => {
                PipelineError::does_not_fit(request)
            }
            DcganError::Ledger(LedgerError::NoRoom { owner, .. }) => {
                PipelineError::does_not_fit(format!("the DCGAN generator for {owner}"))
            }
            other => PipelineError::internal(other),
        }
    }
}
