//! safetensors reader: single files and sharded checkpoints
//! (`model.safetensors.index.json` with a `weight_map`).
//!
//! Key design choice: each shard is memory-mapped and its header parsed and
//! validated by the `safetensors` crate at open (which checks that the data
//! offsets exactly cover the file), after which only absolute byte ranges are
//! kept; every later access is an infallible slice of the map. Errors name the
//! file (and the tensor) they concern.

mod convert;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use convert::{decode_e8m0, decode_f8_e4m3, decode_f8_e5m2};
pub use safetensors::Dtype;

/// Name of the index file of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Errors of the safetensors reader.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// A file could not be opened, mapped or read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The safetensors header is malformed, or the file is truncated / has extra bytes.
    #[error("{path}: invalid safetensors file (corrupt or truncated): {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// The sharded index is malformed or inconsistent with its shards.
    #[error("{path}: invalid safetensors index: {reason}")]
    Index { path: PathBuf, reason: String },
    /// No checkpoint could be found in a directory.
    #[error("{path}: no model.safetensors or model.safetensors.index.json in this directory")]
    NothingToOpen { path: PathBuf },
    /// Two shards hold a tensor of the same name.
    #[error("tensor '{name}' appears in both {first} and {second}")]
    Duplicate {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// The tensor does not exist.
    #[error("no tensor named '{name}' in {path}")]
    NotFound { path: PathBuf, name: String },
    /// The tensor's dtype cannot be converted to f32.
    #[error("{path}: tensor '{name}': converting dtype {dtype:?} to f32 is not supported")]
    UnsupportedDtype {
        path: PathBuf,
        name: String,
        dtype: Dtype,
    },
}

/// Dtype and shape of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

enum Backing {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

struct Shard {
    path: PathBuf,
    data: Backing,
    metadata: HashMap<String, String>,
}

impl Shard {
    fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// One or more memory-mapped safetensors shards seen as one set of tensors.
pub struct SafeTensors {
    origin: PathBuf,
    shards: Vec<Shard>,
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeTensors")
            .field("origin", &self.origin)
            .field("shards", &self.shards.len())
            .field("tensors", &self.entries.len())
            .finish()
    }
}

fn map_file(path: &Path) -> Result<Backing, SafetensorsError> {
    let io = |source| SafetensorsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() == 0 {
        return Ok(Backing::Owned(Vec::new()));
    }
    // SAFETY: read-only private map; like every mmap reader we rely on the file
    // not being truncated by another process while open. Offsets were validated
    // against the length at open.
    Ok(Backing::Map(
        unsafe { memmap2::Mmap::map(&file) }.map_err(io)?,
    ))
}

impl SafeTensors {
    /// Opens a `.safetensors` file, an index `.json`, or a directory holding
    /// `model.safetensors.index.json` or `model.safetensors`.
    pub fn open(path: &Path) -> Result<Self, SafetensorsError> {
        if path.is_dir() {
            let index = path.join(INDEX_FILE);
            if index.is_file() {
                return Self::open_index(&index);
            }
            let single = path.join("model.safetensors");
            if single.is_file() {
                return Self::open_file(&single);
            }
            return Err(SafetensorsError::NothingToOpen {
                path: path.to_path_buf(),
            });
        }
        if path.extension().is_some_and(|e| e == "json") {
            return Self::open_index(path);
        }
        Self::open_file(path)
    }

    /// Opens one `.safetensors` file.
    pub fn open_file(path: &Path) -> Result<Self, SafetensorsError> {
        let data = map_file(path)?;
        let mut st = SafeTensors {
            origin: path.to_path_buf(),
            shards: Vec::new(),
            entries: BTreeMap::new(),
        };
        st.add_shard(path.to_path_buf(), data)?;
        Ok(st)
    }

    /// Parses an in-memory safetensors image; `path` is only used in messages.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, SafetensorsError> {
        let path = path.into();
        let mut st = SafeTensors {
            origin: path.clone(),
            shards: Vec::new(),
            entries: BTreeMap::new(),
        };
        st.add_shard(path, Backing::Owned(bytes))?;
        Ok(st)
    }

    /// Opens a sharded checkpoint from its index file.
    pub fn open_index(index_path: &Path) -> Result<Self, SafetensorsError> {
        let bad = |reason: String| SafetensorsError::Index {
            path: index_path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(index_path).map_err(|source| SafetensorsError::Io {
            path: index_path.to_path_buf(),
            source,
        })?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no \"weight_map\" object".to_owned()))?;
        let dir = index_path.parent().unwrap_or(Path::new("."));
        // Shard file names in first-seen order of the (sorted) weight map.
        let mut shard_names: Vec<&str> = Vec::new();
        let mut wanted: Vec<(&str, &str)> = Vec::with_capacity(map.len());
        for (tensor, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| bad(format!("weight_map['{tensor}'] is not a string")))?;
            let p = Path::new(file);
            if file.is_empty()
                || p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(bad(format!(
                    "weight_map['{tensor}'] = '{file}' is not a relative file name"
                )));
            }
            if !shard_names.contains(&file) {
                shard_names.push(file);
            }
            wanted.push((tensor, file));
        }
        let mut st = SafeTensors {
            origin: index_path.to_path_buf(),
            shards: Vec::new(),
            entries: BTreeMap::new(),
        };
        for name in &shard_names {
            let p = dir.join(name);
            let data = map_file(&p)?;
            st.add_shard(p, data)?;
        }
        for (tensor, file) in wanted {
            let shard_path = dir.join(file);
            match st.entries.get(tensor) {
                Some(e) if st.shards[e.shard].path == shard_path => {}
                Some(e) => {
                    return Err(bad(format!(
                        "tensor '{tensor}' is mapped to {file} but found in {}",
                        st.shards[e.shard].path.display()
                    )));
                }
                None => {
                    return Err(bad(format!(
                        "tensor '{tensor}' is mapped to {file} but that shard lacks it"
                    )));
                }
            }
        }
        Ok(st)
    }

    fn add_shard(&mut self, path: PathBuf, data: Backing) -> Result<(), SafetensorsError> {
        let shard_idx = self.shards.len();
        let bytes = match &data {
            Backing::Map(m) => &m[..],
            Backing::Owned(v) => &v[..],
        };
        let (header_len, meta) =
            safetensors::SafeTensors::read_metadata(bytes).map_err(|source| {
                SafetensorsError::Parse {
                    path: path.clone(),
                    source,
                }
            })?;
        // read_metadata checked that the offsets tile exactly the bytes after the header.
        let base = 8 + header_len;
        let mut new_entries = Vec::new();
        for (name, info) in meta.tensors() {
            let (s, e) = info.data_offsets;
            if let Some(prev) = self.entries.get(&name) {
                return Err(SafetensorsError::Duplicate {
                    name,
                    first: self.shards[prev.shard].path.clone(),
                    second: path,
                });
            }
            new_entries.push((
                name,
                Entry {
                    shard: shard_idx,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start: base + s,
                    end: base + e,
                },
            ));
        }
        for (name, e) in new_entries {
            if e.end > bytes.len() || e.start > e.end {
                return Err(SafetensorsError::Index {
                    path,
                    reason: format!("tensor '{name}' data lies outside the file"),
                });
            }
            self.entries.insert(name, e);
        }
        let metadata = meta.metadata().clone().unwrap_or_default();
        self.shards.push(Shard {
            path,
            data,
            metadata,
        });
        Ok(())
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Paths of the shard files, in load order.
    pub fn shard_paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// The `__metadata__` string map of every shard, merged (later shards win).
    pub fn file_metadata(&self) -> HashMap<&str, &str> {
        self.shards
            .iter()
            .flat_map(|s| s.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect()
    }

    /// Dtype and shape of one tensor.
    pub fn info(&self, name: &str) -> Option<TensorInfo> {
        self.entries.get(name).map(|e| TensorInfo {
            dtype: e.dtype,
            shape: e.shape.clone(),
        })
    }

    fn entry(&self, name: &str) -> Result<&Entry, SafetensorsError> {
        self.entries
            .get(name)
            .ok_or_else(|| SafetensorsError::NotFound {
                path: self.origin.clone(),
                name: name.to_owned(),
            })
    }

    /// Raw little-endian bytes of one tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], SafetensorsError> {
        let e = self.entry(name)?;
        Ok(&self.shards[e.shard].bytes()[e.start..e.end])
    }

    /// Path of the shard holding a tensor.
    pub fn tensor_path(&self, name: &str) -> Option<&Path> {
        self.entries
            .get(name)
            .map(|e| self.shards[e.shard].path.as_path())
    }

    /// One tensor converted to `f32`, row-major, with its shape. Converts F32,
    /// F16, BF16, F64, F8_E4M3, F8_E5M2, F8_E8M0, BOOL and all integer dtypes.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), SafetensorsError> {
        let e = self.entry(name)?;
        let bytes = &self.shards[e.shard].bytes()[e.start..e.end];
        let values =
            convert::to_f32(e.dtype, bytes).ok_or_else(|| SafetensorsError::UnsupportedDtype {
                path: self.shards[e.shard].path.clone(),
                name: name.to_owned(),
                dtype: e.dtype,
            })?;
        Ok((values, e.shape.clone()))
    }
}
