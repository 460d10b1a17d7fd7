//! ONNX model reader for weights: initializer tensors (inline or external data)
//! and a description of the graph's nodes. Nothing is ever executed.
//!
//! Key design choice: a hand-written protobuf wire decoder ([`wire`]) walks only
//! the messages needed (ModelProto → GraphProto → TensorProto/NodeProto/
//! AttributeProto), checking every length against the remaining bytes and
//! limiting nesting depth; the file is memory-mapped and `raw_data` stays a
//! range of the map, so opening a large model copies no weights.

mod convert;
mod error;
mod external;
mod proto;
mod types;
pub mod wire;

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub use error::OnnxError;
pub use proto::MAX_DEPTH;
pub use types::{
    OnnxAttrValue, OnnxAttribute, OnnxDataType, OnnxGraph, OnnxNode, OnnxTensorInfo, TensorData,
};

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

/// A parsed, validated ONNX model.
pub struct OnnxModel {
    path: PathBuf,
    data: Backing,
    graph: OnnxGraph,
}

impl std::fmt::Debug for OnnxModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxModel")
            .field("path", &self.path)
            .field("initializers", &self.graph.initializers.len())
            .field("nodes", &self.graph.nodes.len())
            .finish()
    }
}

impl OnnxModel {
    /// Maps and parses `path`; external data is looked up next to it.
    pub fn open(path: &Path) -> Result<OnnxModel, OnnxError> {
        let io = |source| OnnxError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every model reader we assume the file
        // is not truncated by another process while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self::parse(path.to_path_buf(), Backing::Map(map), Some(&base_dir))
    }

    /// Parses an in-memory model; external data (if any) is resolved in
    /// `base_dir`, and refused when it is `None`.
    pub fn from_bytes(bytes: Vec<u8>, base_dir: Option<&Path>) -> Result<OnnxModel, OnnxError> {
        Self::parse(PathBuf::from("<memory>"), Backing::Owned(bytes), base_dir)
    }

    fn parse(path: PathBuf, data: Backing, base_dir: Option<&Path>) -> Result<Self, OnnxError> {
        let ctx = proto::Ctx {
            path: &path,
            base_dir,
        };
        let graph = proto::parse_model(&ctx, data.bytes())?;
        Ok(OnnxModel { path, data, graph })
    }

    /// The model file (or `<memory>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The main graph.
    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }

    /// The main graph's initializers, in file order.
    pub fn initializers(&self) -> &[OnnxTensorInfo] {
        &self.graph.initializers
    }

    /// The main graph's nodes, in file order.
    pub fn nodes(&self) -> &[OnnxNode] {
        &self.graph.nodes
    }

    /// The initializer called `name`.
    pub fn initializer(&self, name: &str) -> Option<&OnnxTensorInfo> {
        self.graph.initializers.iter().find(|t| t.name == name)
    }

    /// The main-graph `Constant` node whose output is `output`.
    pub fn constant_node(&self, output: &str) -> Option<&OnnxNode> {
        self.graph
            .nodes
            .iter()
            .find(|n| n.op_type == "Constant" && n.outputs.first().is_some_and(|o| o == output))
    }

    /// Raw little-endian bytes of a `raw_data` or external tensor (`None` for
    /// typed-field payloads, which have no byte form in the file).
    pub fn tensor_bytes(&self, info: &OnnxTensorInfo) -> Result<Option<Cow<'_, [u8]>>, OnnxError> {
        match &info.data {
            TensorData::Raw { start, end } => {
                Ok(self.data.bytes().get(*start..*end).map(Cow::Borrowed))
            }
            TensorData::External {
                path,
                offset,
                length,
            } => {
                let io = |source| OnnxError::Io {
                    path: path.clone(),
                    source,
                };
                let mut f = std::fs::File::open(path).map_err(io)?;
                f.seek(SeekFrom::Start(*offset)).map_err(io)?;
                let mut buf = Vec::new();
                f.take(*length).read_to_end(&mut buf).map_err(io)?;
                if buf.len() as u64 != *length {
                    return Err(OnnxError::ExternalData {
                        path: self.path.clone(),
                        tensor: info.name.clone(),
                        reason: format!(
                            "{} shrank: read {} of {length} bytes",
                            path.display(),
                            buf.len()
                        ),
                    });
                }
                Ok(Some(Cow::Owned(buf)))
            }
            _ => Ok(None),
        }
    }

    /// Decodes any tensor description (an initializer, a Constant's value, a
    /// subgraph's initializer) of this model to f32, row-major.
    pub fn decode_f32(&self, info: &OnnxTensorInfo) -> Result<Vec<f32>, OnnxError> {
        let unsupported = || OnnxError::UnsupportedDtype {
            path: self.path.clone(),
            name: info.name.clone(),
            data_type: info.data_type,
        };
        let values = match self.tensor_bytes(info)? {
            Some(bytes) => convert::raw_to_f32(info.data_type, &bytes),
            None => convert::typed_to_f32(info.data_type, &info.data),
        }
        .ok_or_else(unsupported)?;
        if values.len() != info.n_elems() {
            return Err(OnnxError::Invalid {
                path: self.path.clone(),
                field: format!("tensor '{}'", info.name),
                reason: format!(
                    "{} values for shape {:?} of {:?}",
                    values.len(),
                    info.shape,
                    info.data_type
                ),
            });
        }
        Ok(values)
    }

    /// An initializer, or else a `Constant` node output (attribute `value`,
    /// `value_float(s)` or `value_int(s)`), as f32 values and shape.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), OnnxError> {
        if let Some(info) = self.initializer(name) {
            return Ok((self.decode_f32(info)?, info.shape.clone()));
        }
        let not_found = || OnnxError::NotFound {
            path: self.path.clone(),
            name: name.to_string(),
        };
        let node = self.constant_node(name).ok_or_else(not_found)?;
        for attr in &node.attributes {
            let out = match (&attr.value, attr.name.as_str()) {
                (OnnxAttrValue::Tensor(t), "value") => (self.decode_f32(t)?, t.shape.clone()),
                (OnnxAttrValue::Float(v), "value_float") => (vec![*v], vec![]),
                (OnnxAttrValue::Int(v), "value_int") => (vec![*v as f32], vec![]),
                (OnnxAttrValue::Floats(v), "value_floats") => (v.clone(), vec![v.len()]),
                (OnnxAttrValue::Ints(v), "value_ints") => {
                    (v.iter().map(|&x| x as f32).collect(), vec![v.len()])
                }
                _ => continue,
            };
            return Ok(out);
        }
        Err(not_found())
    }
}
