//! Errors of the llama pipeline.
//!
//! Key design choice: lower-crate errors are kept as sources (not stringified)
//! so a caller can still match on a ledger `DoesNotFit`; [`LlamaError::into_pipeline`]
//! maps them onto the seam's status classes.

use favlo_pipeline::PipelineError;
use favlo_runtime::ledger::LedgerError;

/// Anything that can go wrong opening or running a Llama-family model.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The config / metadata is missing a field or has an unsupported value.
    #[error("model config: {message}")]
    Config { message: String },
    /// A tensor is missing or has the wrong shape.
    #[error("tensor {name}: {message}")]
    Tensor { name: String, message: String },
    /// Reading the checkpoint failed.
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    /// The tokenizer could not be built or failed.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] favlo_formats::tokenizer::TokenizerError),
    /// The ledger refused an allocation (or nothing fits).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// MX packing failed.
    #[error("MX packing: {0}")]
    Mx(#[from] favlo_mx::MxError),
    /// The accelerator could not be used (CUDA missing, a driver call failed).
    #[error("{message}")]
    Device { message: String },
    /// A request the model cannot serve (too long, bad ids...).
    #[error("{message}")]
    Request { message: String },
}

impl LlamaError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        LlamaError::Config {
            message: message.into(),
        }
    }

    pub(crate) fn tensor(name: &str, message: impl Into<String>) -> Self {
        LlamaError::Tensor {
            name: name.to_string(),
            message: message.into(),
        }
    }

    /// The seam's error class for this failure.
    pub fn into_pipeline(self) -> PipelineError {
        match self {
            LlamaError::Ledger(LedgerError::DoesNotFit { request, .. }) => {
                PipelineError::does_not_fit(request)
            }
            LlamaError::Ledger(e @ LedgerError::NoRoom { .. }) => {
                PipelineError::does_not_fit(e.to_string())
            }
            LlamaError::Request { message } => PipelineError::invalid(message, Some("messages")),
            other => PipelineError::internal(other),
        }
    }
}
