//! Errors of the GGUF reader.
//!
//! Key design choice: every parse error names the file and the field being read
//! (`"metadata 'general.name' value"`, `"tensor 'blk.0.attn_q.weight' data"`), with
//! the byte counts that were needed and available, so a corrupt file can be
//! diagnosed from the message alone.

use std::path::PathBuf;

use super::types::GgmlType;

/// Everything that can go wrong while reading or decoding a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{path}: cannot read GGUF file: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("{path}: not a GGUF file (magic {found:02x?}, expected \"GGUF\")")]
    BadMagic { path: PathBuf, found: [u8; 4] },
    /// Only GGUF v2 and v3 are read (v1 used 32-bit counts and is obsolete).
    #[error("{path}: unsupported GGUF version {version} (supported: 2, 3)")]
    UnsupportedVersion { path: PathBuf, version: u32 },
    /// The file ends before `field` could be read completely.
    #[error("{path}: truncated GGUF file: {field} needs {need} bytes, {have} available")]
    Truncated {
        path: PathBuf,
        field: String,
        need: u64,
        have: u64,
    },
    /// A field holds a value that the format does not allow.
    #[error("{path}: invalid GGUF {field}: {reason}")]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// A metadata value type or ggml tensor type id that this reader does not know.
    #[error("{path}: {field}: unknown {what} id {id}")]
    UnknownType {
        path: PathBuf,
        field: String,
        what: &'static str,
        id: u32,
    },
    /// `tensor_f32` was asked for a tensor the file does not contain.
    #[error("{path}: no tensor named '{name}'")]
    TensorNotFound { path: PathBuf, name: String },
    /// Decoding a tensor failed; `source` says why.
    #[error("{path}: tensor '{name}': {source}")]
    Decode {
        path: PathBuf,
        name: String,
        #[source]
        source: Box<GgufError>,
    },
    /// The block decoder for this type is not implemented.
    #[error("dequantizing ggml type {ty:?} is not supported")]
    UnsupportedType { ty: GgmlType },
    /// The element count is not a whole number of blocks.
    #[error("{n_elems} elements of {ty:?} are not a multiple of its block size {block_size}")]
    PartialBlock {
        ty: GgmlType,
        n_elems: usize,
        block_size: usize,
    },
    /// Input or output slice lengths disagree with the element count.
    #[error(
        "{n_elems} elements of {ty:?} need {need_bytes} input bytes (got {got_bytes}) and {n_elems} outputs (got {got_out})"
    )]
    LengthMismatch {
        ty: GgmlType,
        n_elems: usize,
        need_bytes: usize,
        got_bytes: usize,
        got_out: usize,
    },
}
