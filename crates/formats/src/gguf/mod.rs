//! GGUF v2/v3 reader: header, metadata, tensor table and block dequantization.
//!
//! Key design choice: the file is memory-mapped and the whole header is parsed and
//! validated at open (every count, length, type id and tensor extent is checked
//! against the file length), so afterwards `tensor_bytes` is an infallible slice
//! of the map and nothing a corrupt file contains can cause a panic or a huge
//! allocation. Quantized data is decoded on demand by [`dequantize`].

mod error;
mod parse;
mod quants;
mod types;
mod value;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use error::GgufError;
pub use parse::DEFAULT_ALIGNMENT;
pub use quants::dequantize;
pub use types::GgmlType;
pub use value::GgufValue;

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF order: `dims[0]` is the fastest-varying (row length).
    pub dims: Vec<u64>,
    /// Element encoding.
    pub ggml_type: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub n_elems: u64,
    /// Encoded size in bytes.
    pub n_bytes: u64,
}

impl GgufTensorInfo {
    /// The PyTorch-order shape (GGUF dims reversed: slowest first).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

enum Backing {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An open, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    data: Backing,
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and validates `path`.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let data = if len == 0 {
            Backing::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this struct. Like every
            // mmap-based reader we rely on the file not being truncated or rewritten
            // by another process while it is open; all offsets were validated
            // against the length at open time.
            Backing::Map(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        Self::from_backing(path.to_path_buf(), data)
    }

    /// Parses an in-memory GGUF image; `path` is only used in error messages.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(path.into(), Backing::Owned(bytes))
    }

    fn from_backing(path: PathBuf, data: Backing) -> Result<GgufFile, GgufError> {
        let h = parse::parse_header(&path, data.bytes())?;
        let by_name = h
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            data,
            version: h.version,
            alignment: h.alignment,
            data_start: h.data_start,
            metadata: h.metadata,
            tensors: h.tensors,
            by_name,
        })
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data-section alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// All metadata, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// An integer value that fits in `u32` (any integer type on disk).
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// An integer value that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An integer value that fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// A float value (`F32`, or `F64` rounded).
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// An array value's elements.
    pub fn get_array(&self, key: &str) -> Option<&[GgufValue]> {
        self.get(key)?.as_array()
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_string_array(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?.as_string_array()
    }

    /// An array of floats (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        self.get(key)?.as_f32_array()
    }

    /// An array of integers fitting `i32` (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        self.get(key)?.as_i32_array()
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// One tensor's table entry.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The encoded bytes of a tensor of this file (validated at open).
    ///
    /// An info that does not belong to this file yields the bytes its extent
    /// names, clipped to the file (possibly empty).
    pub fn tensor_bytes(&self, info: &GgufTensorInfo) -> &[u8] {
        let buf = self.data.bytes();
        let len = buf.len() as u64;
        let start = self.data_start.saturating_add(info.offset).min(len);
        let end = start.saturating_add(info.n_bytes).min(len);
        &buf[start as usize..end as usize]
    }

    /// Decodes a whole tensor to `f32`, row-major, with the PyTorch shape
    /// (GGUF dims reversed).
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), GgufError> {
        let info = self.tensor(name).ok_or_else(|| GgufError::TensorNotFound {
            path: self.path.clone(),
            name: name.to_owned(),
        })?;
        let wrap = |source| GgufError::Decode {
            path: self.path.clone(),
            name: name.to_owned(),
            source: Box::new(source),
        };
        if !info.ggml_type.can_dequantize() {
            return Err(wrap(GgufError::UnsupportedType { ty: info.ggml_type }));
        }
        let n = usize::try_from(info.n_elems).map_err(|_| {
            wrap(GgufError::PartialBlock {
                ty: info.ggml_type,
                n_elems: usize::MAX,
                block_size: info.ggml_type.block_size(),
            })
        })?;
        let mut out = vec![0f32; n];
        dequantize(info.ggml_type, self.tensor_bytes(info), n, &mut out).map_err(wrap)?;
        Ok((out, info.shape()))
    }
}
