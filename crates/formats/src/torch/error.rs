//! Errors of the torch checkpoint reader.
//!
//! Key design choice: each error names the checkpoint file and what was being
//! read (the zip entry, the pickle opcode/global, or the tensor key).

use std::path::PathBuf;

use super::pickle::PickleError;

/// Everything that can go wrong while reading a `torch.save` checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum TorchError {
    /// The file could not be opened, mapped or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The zip container is malformed.
    #[error("{path}: not a readable torch.save zip: {reason}")]
    Zip { path: PathBuf, reason: String },
    /// `data.pkl` uses an opcode or global that is refused, or is malformed.
    #[error("{path}: {entry}: {source}")]
    Pickle {
        path: PathBuf,
        entry: String,
        #[source]
        source: PickleError,
    },
    /// The unpickled structure is not a (nested) dict of tensors, or a tensor
    /// does not fit its storage.
    #[error("{path}: invalid checkpoint {field}: {reason}")]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// No tensor has this key.
    #[error("{path}: no tensor '{key}'")]
    NotFound { path: PathBuf, key: String },
}
