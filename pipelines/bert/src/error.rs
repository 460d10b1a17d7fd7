//! The crate's error type. Key choice: one enum with structured fields (path, tensor name,
//! field) so callers and logs can tell a bad checkpoint from a full ledger without parsing text.

use std::path::PathBuf;

/// Everything that can fail while opening a checkpoint, quantizing it or running a batch.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    /// A file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file did not parse.
    #[error("invalid JSON in {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// `config.json` names an architecture this crate does not run.
    #[error("unsupported model_type {model_type:?} (expected bert, roberta or xlm-roberta)")]
    UnsupportedModel { model_type: String },
    /// A config field is missing or out of range.
    #[error("config field {field}: {reason}")]
    Config { field: &'static str, reason: String },
    /// The checkpoint could not be opened or read.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// A tensor is missing or has the wrong shape.
    #[error("tensor {name}: {reason}")]
    Tensor { name: String, reason: String },
    /// The memory ledger refused an allocation.
    #[error("memory ledger refused {what}: {reason}")]
    Ledger { what: String, reason: String },
    /// The device cannot run the encoder (CUDA missing, unusable, or a driver call failed).
    #[error("{message}")]
    Device { message: String },
    /// The tokenizer failed to load or encode.
    #[error("tokenizer: {reason}")]
    Tokenizer { reason: String },
}

impl BertError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BertError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn tensor(name: &str, reason: impl Into<String>) -> Self {
        BertError::Tensor {
            name: name.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn ledger(what: impl Into<String>, err: impl std::fmt::Display) -> Self {
        BertError::Ledger {
            what: what.into(),
            reason: err.to_string(),
        }
    }
}
