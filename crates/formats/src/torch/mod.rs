//! Reader for PyTorch `torch.save` zip checkpoints (state dicts, possibly nested
//! in a dict such as `{"netG_state_dict": {...}, "epoch": 5}`).
//!
//! Key design choice: `data.pkl` is interpreted by a restricted unpickler
//! ([`pickle`]) that never imports or calls anything and accepts only the torch
//! tensor/storage rebuilders and `OrderedDict`; the resulting tree is walked once
//! at open into a flat tensor table whose every (offset, shape, strides) is
//! bounds-checked against its storage, so decoding later cannot read out of range.

mod container;
mod error;
pub mod pickle;
mod strided;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use container::{StorageBytes, read_container};
pub use error::TorchError;
use pickle::{Obj, Unpickled, Value};
pub use pickle::{PickleError, StorageDtype};

/// Deepest dict/list nesting walked when collecting tensors.
pub const MAX_NESTING: usize = 32;

/// One tensor of the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorchTensorInfo {
    /// Full key: the dict keys from the root joined with '/', e.g.
    /// `netG_state_dict/main.0.weight` (just `main.0.weight` at the root).
    pub key: String,
    /// Key of the containing dict (`None` at the root), e.g. `netG_state_dict`.
    pub prefix: Option<String>,
    /// Key inside the containing dict, e.g. `main.0.weight`.
    pub name: String,
    pub dtype: StorageDtype,
    pub shape: Vec<usize>,
    /// Element strides (PyTorch semantics).
    pub strides: Vec<usize>,
    /// Element offset into the storage.
    pub storage_offset: usize,
    /// Storage key (`data/<key>` in the zip); shared storages share the key.
    pub storage_key: String,
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

/// An opened, validated checkpoint.
pub struct TorchCheckpoint {
    path: PathBuf,
    data: Backing,
    storages: HashMap<String, StorageBytes>,
    tensors: Vec<TorchTensorInfo>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for TorchCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchCheckpoint")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl TorchCheckpoint {
    /// Maps and validates a `torch.save` zip.
    pub fn open(path: &Path) -> Result<TorchCheckpoint, TorchError> {
        let io = |source| TorchError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: read-only map; we assume the file is not truncated while open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::build(path.to_path_buf(), Backing::Map(map))
    }

    /// Validates an in-memory `torch.save` zip.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<TorchCheckpoint, TorchError> {
        Self::build(PathBuf::from("<memory>"), Backing::Owned(bytes))
    }

    fn build(path: PathBuf, data: Backing) -> Result<Self, TorchError> {
        let c = read_container(&path, data.bytes())?;
        let un = pickle::unpickle(&c.pickle).map_err(|source| TorchError::Pickle {
            path: path.clone(),
            entry: c.pickle_entry.clone(),
            source,
        })?;
        let mut walker = Walker {
            path: &path,
            un: &un,
            seen: HashSet::new(),
            out: Vec::new(),
        };
        let root = un.root.unwrap_or(Value::None);
        walker.walk(root, &mut Vec::new(), 0)?;
        let tensors = walker.out;
        let mut ck = TorchCheckpoint {
            index: HashMap::new(),
            path,
            data,
            storages: c.storages,
            tensors: Vec::new(),
        };
        for t in &tensors {
            ck.check_bounds(t)?;
        }
        ck.index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.key.clone(), i))
            .collect();
        ck.tensors = tensors;
        Ok(ck)
    }

    fn invalid(&self, field: &str, reason: String) -> TorchError {
        TorchError::Invalid {
            path: self.path.clone(),
            field: field.to_string(),
            reason,
        }
    }

    fn storage_bytes(&self, key: &str) -> Option<&[u8]> {
        match self.storages.get(key)? {
            StorageBytes::Range(r) => self.data.bytes().get(r.clone()),
            StorageBytes::Owned(v) => Some(v),
        }
    }

    fn check_bounds(&self, t: &TorchTensorInfo) -> Result<(), TorchError> {
        let field = format!("tensor '{}'", t.key);
        let bytes = self.storage_bytes(&t.storage_key).ok_or_else(|| {
            self.invalid(&field, format!("storage data/{} is missing", t.storage_key))
        })?;
        let numel = bytes.len() / t.dtype.size();
        if let Some(last) = strided::last_index(t.storage_offset, &t.shape, &t.strides)
            && last >= numel
        {
            return Err(self.invalid(
                &field,
                format!(
                    "offset {} shape {:?} strides {:?} reach element {last} of a {numel}-element storage",
                    t.storage_offset, t.shape, t.strides
                ),
            ));
        }
        if strided::n_elems(&t.shape).is_none() {
            return Err(self.invalid(&field, "element count overflows".into()));
        }
        Ok(())
    }

    /// The checkpoint file (or `<memory>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, in pickle order.
    pub fn all_tensors(&self) -> &[TorchTensorInfo] {
        &self.tensors
    }

    /// Tensors directly inside the dict at `prefix_key` (`None`: the root dict),
    /// e.g. `tensors(Some("netG_state_dict"))`.
    pub fn tensors(&self, prefix_key: Option<&str>) -> Vec<&TorchTensorInfo> {
        self.tensors
            .iter()
            .filter(|t| t.prefix.as_deref() == prefix_key)
            .collect()
    }

    /// The tensor with this full key.
    pub fn tensor(&self, key: &str) -> Option<&TorchTensorInfo> {
        self.index.get(key).map(|&i| &self.tensors[i])
    }

    /// A tensor by full key as row-major f32 values (strides honoured:
    /// non-contiguous tensors are gathered) and its shape.
    pub fn tensor_f32(&self, key: &str) -> Result<(Vec<f32>, Vec<usize>), TorchError> {
        let t = self.tensor(key).ok_or_else(|| TorchError::NotFound {
            path: self.path.clone(),
            key: key.to_string(),
        })?;
        Ok((self.decode_f32(t)?, t.shape.clone()))
    }

    /// Decodes one tensor of this checkpoint to row-major f32.
    pub fn decode_f32(&self, t: &TorchTensorInfo) -> Result<Vec<f32>, TorchError> {
        let bytes = self.storage_bytes(&t.storage_key).ok_or_else(|| {
            self.invalid(
                &format!("tensor '{}'", t.key),
                format!("storage data/{} is missing", t.storage_key),
            )
        })?;
        strided::gather_f32(bytes, t.dtype, t.storage_offset, &t.shape, &t.strides).ok_or_else(
            || {
                self.invalid(
                    &format!("tensor '{}'", t.key),
                    "does not fit its storage".into(),
                )
            },
        )
    }
}

struct Walker<'a> {
    path: &'a Path,
    un: &'a Unpickled,
    seen: HashSet<usize>,
    out: Vec<TorchTensorInfo>,
}

impl Walker<'_> {
    fn key_of(&self, k: Value) -> Option<String> {
        match k {
            Value::Int(i) => Some(i.to_string()),
            _ => self.un.str(k).map(str::to_string),
        }
    }

    fn walk(&mut self, v: Value, keys: &mut Vec<String>, depth: usize) -> Result<(), TorchError> {
        let Value::Obj(idx) = v else {
            return Ok(()); // scalars (epoch numbers, flags) carry no tensors
        };
        if depth > MAX_NESTING {
            return Err(TorchError::Invalid {
                path: self.path.to_path_buf(),
                field: keys.join("/"),
                reason: format!("nested deeper than {MAX_NESTING} levels"),
            });
        }
        let Some(obj) = self.un.objs.get(idx) else {
            return Ok(());
        };
        match obj {
            Obj::Tensor(t) => {
                let to_usize = |v: &[u64]| -> Option<Vec<usize>> {
                    v.iter().map(|&x| usize::try_from(x).ok()).collect()
                };
                let (Some(shape), Some(strides), Ok(off)) = (
                    to_usize(&t.shape),
                    to_usize(&t.strides),
                    usize::try_from(t.offset),
                ) else {
                    return Err(TorchError::Invalid {
                        path: self.path.to_path_buf(),
                        field: keys.join("/"),
                        reason: "size, stride or offset does not fit in memory".into(),
                    });
                };
                let name = keys.last().cloned().unwrap_or_default();
                let prefix = (keys.len() > 1).then(|| keys[..keys.len() - 1].join("/"));
                self.out.push(TorchTensorInfo {
                    key: keys.join("/"),
                    prefix,
                    name,
                    dtype: t.storage.dtype,
                    shape,
                    strides,
                    storage_offset: off,
                    storage_key: t.storage.key.clone(),
                });
            }
            Obj::Dict(pairs) => {
                if !self.seen.insert(idx) {
                    return Ok(());
                }
                for &(k, val) in pairs {
                    let Some(key) = self.key_of(k) else { continue };
                    keys.push(key);
                    self.walk(val, keys, depth + 1)?;
                    keys.pop();
                }
            }
            Obj::List(items) | Obj::Tuple(items) => {
                if !self.seen.insert(idx) {
                    return Ok(());
                }
                for (i, &val) in items.iter().enumerate() {
                    keys.push(i.to_string());
                    self.walk(val, keys, depth + 1)?;
                    keys.pop();
                }
            }
            _ => {}
        }
        Ok(())
    }
}
