//! Public data types of the ONNX reader: element types, tensor descriptions,
//! graph nodes and their attributes.
//!
//! Key design choice: tensor payloads are described, not copied: `raw_data` is a
//! byte range into the mapped model and external data a (file, offset, length)
//! triple, both validated at open; only the rarely used typed repeated fields
//! (`float_data`, `int64_data`, ...) are decoded into owned vectors.

use std::path::PathBuf;

/// `TensorProto.DataType` of the ONNX spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnnxDataType {
    Float,
    Uint8,
    Int8,
    Uint16,
    Int16,
    Int32,
    Int64,
    String,
    Bool,
    Float16,
    Double,
    Uint32,
    Uint64,
    Complex64,
    Complex128,
    Bfloat16,
    Float8E4M3FN,
    Float8E4M3FNUZ,
    Float8E5M2,
    Float8E5M2FNUZ,
    /// Any other id (UNDEFINED = 0, 4-bit types, future additions).
    Other(i32),
}

impl OnnxDataType {
    /// Maps the protobuf enum value.
    pub fn from_id(id: i32) -> Self {
        use OnnxDataType::*;
        match id {
            1 => Float,
            2 => Uint8,
            3 => Int8,
            4 => Uint16,
            5 => Int16,
            6 => Int32,
            7 => Int64,
            8 => String,
            9 => Bool,
            10 => Float16,
            11 => Double,
            12 => Uint32,
            13 => Uint64,
            14 => Complex64,
            15 => Complex128,
            16 => Bfloat16,
            17 => Float8E4M3FN,
            18 => Float8E4M3FNUZ,
            19 => Float8E5M2,
            20 => Float8E5M2FNUZ,
            other => Other(other),
        }
    }

    /// Bytes per element in `raw_data`, `None` for strings and sub-byte/unknown types.
    pub fn element_size(self) -> Option<usize> {
        use OnnxDataType::*;
        match self {
            Uint8 | Int8 | Bool | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ => {
                Some(1)
            }
            Uint16 | Int16 | Float16 | Bfloat16 => Some(2),
            Float | Int32 | Uint32 => Some(4),
            Int64 | Double | Uint64 | Complex64 => Some(8),
            Complex128 => Some(16),
            String | Other(_) => None,
        }
    }
}

/// Where a tensor's elements live.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// `raw_data`: absolute byte range `start..end` in the model file.
    Raw { start: usize, end: usize },
    /// `data_location = EXTERNAL`: `length` bytes at `offset` of `path`
    /// (already resolved inside the model's folder and checked against its size).
    External {
        path: PathBuf,
        offset: u64,
        length: u64,
    },
    /// `float_data` (FLOAT, COMPLEX64).
    Floats(Vec<f32>),
    /// `double_data` (DOUBLE, COMPLEX128).
    Doubles(Vec<f64>),
    /// `int32_data` (INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16/BFLOAT16 bits, FLOAT8 bits).
    Int32s(Vec<i32>),
    /// `int64_data` (INT64).
    Int64s(Vec<i64>),
    /// `uint64_data` (UINT32, UINT64).
    Uint64s(Vec<u64>),
    /// `string_data` (STRING): only the count is kept.
    Strings(usize),
    /// No payload (zero elements).
    Empty,
}

/// One tensor (an initializer or a Constant node's value).
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxTensorInfo {
    pub name: String,
    /// Shape, slowest dimension first (ONNX order, same as PyTorch).
    pub shape: Vec<usize>,
    pub data_type: OnnxDataType,
    pub data: TensorData,
}

impl OnnxTensorInfo {
    /// Number of elements (product of the shape; 1 for a scalar).
    pub fn n_elems(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Value of one node attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum OnnxAttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Box<OnnxTensorInfo>),
    Graph(Box<OnnxGraph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    /// An attribute type this reader does not decode (sparse tensors, type protos), by type id.
    Unsupported(i32),
}

/// One named attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxAttribute {
    pub name: String,
    pub value: OnnxAttrValue,
}

/// One graph node (operator invocation); never executed, only described.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OnnxNode {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<OnnxAttribute>,
}

impl OnnxNode {
    /// The attribute called `name`, if present.
    pub fn attribute(&self, name: &str) -> Option<&OnnxAttrValue> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.value)
    }
}

/// A graph (the main graph or a subgraph attribute of If/Loop/Scan).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OnnxGraph {
    pub name: String,
    pub nodes: Vec<OnnxNode>,
    pub initializers: Vec<OnnxTensorInfo>,
    /// Names of the graph inputs and outputs (types are not decoded).
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}
