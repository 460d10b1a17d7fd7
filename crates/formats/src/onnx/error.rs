//! Errors of the ONNX reader.
//!
//! Key design choice: every error names the model file and the protobuf field
//! path being read (`graph.initializer[3] 'conv.weight' raw_data`), so a corrupt
//! model can be diagnosed from the message alone.

use std::path::PathBuf;

use super::types::OnnxDataType;
use super::wire::WireError;

/// Everything that can go wrong while reading an ONNX model.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The model or an external-data file could not be opened, mapped or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The protobuf wire encoding of `field` is malformed or truncated.
    #[error("{path}: malformed ONNX protobuf in {field}: {source}")]
    Wire {
        path: PathBuf,
        field: String,
        #[source]
        source: WireError,
    },
    /// A field holds a value ONNX does not allow (or sizes disagree).
    #[error("{path}: invalid ONNX {field}: {reason}")]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// Messages are nested deeper than the reader allows.
    #[error("{path}: {field}: ONNX messages nested deeper than {limit} levels")]
    TooDeep {
        path: PathBuf,
        field: String,
        limit: usize,
    },
    /// An external-data reference is unsafe or does not match its file.
    #[error("{path}: tensor '{tensor}': external data: {reason}")]
    ExternalData {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// No initializer (or Constant node output) has this name.
    #[error("{path}: no initializer or constant named '{name}'")]
    NotFound { path: PathBuf, name: String },
    /// The tensor's element type cannot be converted to f32.
    #[error(
        "{path}: tensor '{name}': converting ONNX data type {data_type:?} to f32 is not supported"
    )]
    UnsupportedDtype {
        path: PathBuf,
        name: String,
        data_type: OnnxDataType,
    },
}
