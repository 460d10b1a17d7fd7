//! Bounds-checked parser for the GGUF header, metadata and tensor table.
//!
//! Key design choice: a cursor over the whole file that checks every read against
//! the bytes that remain, and checks every count against the smallest possible
//! encoding of that many items *before* allocating, so a corrupt count can never
//! cause a huge allocation; nesting of arrays is capped to bound recursion.

use std::collections::BTreeMap;
use std::path::Path;

use super::GgufTensorInfo;
use super::error::GgufError;
use super::types::GgmlType;
use super::value::{GgufValue, tag};

/// Deepest array nesting accepted (real files use 1).
const MAX_ARRAY_DEPTH: u32 = 16;
/// Most dimensions a tensor may have (ggml uses 4).
const MAX_DIMS: u32 = 8;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Everything before the tensor data.
pub struct Header {
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: u64,
    pub data_start: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn truncated(&self, field: String, need: u64) -> GgufError {
        GgufError::Truncated {
            path: self.path.to_path_buf(),
            field,
            need,
            have: self.remaining(),
        }
    }

    fn invalid(&self, field: String, reason: impl Into<String>) -> GgufError {
        GgufError::Invalid {
            path: self.path.to_path_buf(),
            field,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: u64, field: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(field(), n));
        }
        let start = self.pos;
        // n <= remaining <= usize::MAX, so the cast is lossless.
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, field: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let b = self.take(N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u32(&mut self, field: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(field).map(u32::from_le_bytes)
    }

    fn u64(&mut self, field: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A length-prefixed string's raw bytes.
    fn str_bytes(&mut self, field: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        let len = self.u64(&|| format!("{} length", field()))?;
        self.take(len, field)
    }

    /// A length-prefixed string that must be valid UTF-8 (keys, tensor names).
    fn strict_string(&mut self, field: &dyn Fn() -> String) -> Result<String, GgufError> {
        let bytes = self.str_bytes(field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.invalid(field(), format!("not valid UTF-8 ({e})"))),
        }
    }

    /// Checks that `count` items of at least `min` bytes each can still fit.
    fn check_count(
        &self,
        count: u64,
        min: u64,
        field: &dyn Fn() -> String,
    ) -> Result<(), GgufError> {
        match count.checked_mul(min) {
            Some(need) if need <= self.remaining() => Ok(()),
            Some(need) => Err(self.truncated(field(), need)),
            None => Err(self.truncated(field(), u64::MAX)),
        }
    }

    fn value(
        &mut self,
        ty: u32,
        depth: u32,
        field: &dyn Fn() -> String,
    ) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            tag::U8 => GgufValue::U8(self.array::<1>(field)?[0]),
            tag::I8 => GgufValue::I8(i8::from_le_bytes(self.array(field)?)),
            tag::U16 => GgufValue::U16(u16::from_le_bytes(self.array(field)?)),
            tag::I16 => GgufValue::I16(i16::from_le_bytes(self.array(field)?)),
            tag::U32 => GgufValue::U32(u32::from_le_bytes(self.array(field)?)),
            tag::I32 => GgufValue::I32(i32::from_le_bytes(self.array(field)?)),
            tag::U64 => GgufValue::U64(u64::from_le_bytes(self.array(field)?)),
            tag::I64 => GgufValue::I64(i64::from_le_bytes(self.array(field)?)),
            tag::F32 => GgufValue::F32(f32::from_le_bytes(self.array(field)?)),
            tag::F64 => GgufValue::F64(f64::from_le_bytes(self.array(field)?)),
            tag::BOOL => match self.array::<1>(field)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.invalid(field(), format!("bool byte {b} is neither 0 nor 1"))),
            },
            // Values may come from tokenizers with odd bytes; keep them readable.
            tag::STRING => {
                GgufValue::String(String::from_utf8_lossy(self.str_bytes(field)?).into_owned())
            }
            tag::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.invalid(
                        field(),
                        format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem_ty = self.u32(&|| format!("{} array element type", field()))?;
                let Some(min) = tag::min_size(elem_ty) else {
                    return Err(GgufError::UnknownType {
                        path: self.path.to_path_buf(),
                        field: format!("{} array element type", field()),
                        what: "metadata value type",
                        id: elem_ty,
                    });
                };
                let count = self.u64(&|| format!("{} array length", field()))?;
                self.check_count(count, min, &|| {
                    format!("{} array of {count} elements", field())
                })?;
                // count * min <= remaining bytes, so this allocation is bounded by the file size.
                let mut items = Vec::with_capacity(count as usize);
                for i in 0..count {
                    items.push(self.value(elem_ty, depth + 1, &|| format!("{}[{i}]", field()))?);
                }
                GgufValue::Array(items)
            }
            other => {
                return Err(GgufError::UnknownType {
                    path: self.path.to_path_buf(),
                    field: format!("{} type", field()),
                    what: "metadata value type",
                    id: other,
                });
            }
        })
    }

    fn tensor_info(&mut self, index: u64) -> Result<GgufTensorInfo, GgufError> {
        let name = self.strict_string(&|| format!("tensor #{index} name"))?;
        let label = |what: &str| format!("tensor '{name}' {what}");
        let n_dims = self.u32(&|| label("n_dims"))?;
        if n_dims > MAX_DIMS {
            return Err(self.invalid(
                label("n_dims"),
                format!("{n_dims} dimensions (at most {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elems: u64 = 1;
        for d in 0..n_dims {
            let dim = self.u64(&|| label(&format!("dims[{d}]")))?;
            n_elems = n_elems
                .checked_mul(dim)
                .ok_or_else(|| self.invalid(label("dims"), "element count overflows u64"))?;
            dims.push(dim);
        }
        let type_id = self.u32(&|| label("type"))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownType {
            path: self.path.to_path_buf(),
            field: label("type"),
            what: "ggml tensor type",
            id: type_id,
        })?;
        let row = dims.first().copied().unwrap_or(1);
        if !row.is_multiple_of(ggml_type.block_size() as u64) {
            return Err(self.invalid(
                label("dims[0]"),
                format!(
                    "{row} is not a multiple of the {ggml_type:?} block size {}",
                    ggml_type.block_size()
                ),
            ));
        }
        let n_bytes = ggml_type
            .bytes_for(n_elems)
            .ok_or_else(|| self.invalid(label("dims"), "byte size overflows u64"))?;
        let offset = self.u64(&|| label("offset"))?;
        Ok(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_elems,
            n_bytes,
        })
    }
}

/// Parses everything up to the data section and validates every tensor's extent
/// against `buf.len()`.
pub fn parse_header(path: &Path, buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0, path };
    let magic: [u8; 4] = c.array(&|| "magic".to_owned())?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic,
        });
    }
    let version = c.u32(&|| "version".to_owned())?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
        });
    }
    let n_tensors = c.u64(&|| "tensor count".to_owned())?;
    let n_kv = c.u64(&|| "metadata count".to_owned())?;
    // Smallest key/value: 8-byte key length + 4-byte type + 1-byte value.
    c.check_count(n_kv, 13, &|| format!("metadata table of {n_kv} entries"))?;

    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        let key = c.strict_string(&|| format!("metadata key #{i}"))?;
        let ty = c.u32(&|| format!("metadata '{key}' type"))?;
        let value = c.value(ty, 0, &|| format!("metadata '{key}' value"))?;
        if metadata.contains_key(&key) {
            return Err(c.invalid(format!("metadata key '{key}'"), "appears twice"));
        }
        metadata.insert(key, value);
    }

    // Smallest tensor info: name length 8 + n_dims 4 + type 4 + offset 8.
    c.check_count(n_tensors, 24, &|| {
        format!("tensor table of {n_tensors} entries")
    })?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        tensors.push(c.tensor_info(i)?);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u32() {
            Some(a) if a != 0 && a.is_power_of_two() => u64::from(a),
            _ => {
                return Err(c.invalid(
                    "metadata 'general.alignment'".to_owned(),
                    format!("{v:?} is not a power-of-two u32"),
                ));
            }
        },
    };
    let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for t in &tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(c.invalid(format!("tensor '{}'", t.name), "name appears twice"));
        }
        if !t.offset.is_multiple_of(alignment) {
            return Err(c.invalid(
                format!("tensor '{}' offset", t.name),
                format!(
                    "{} is not a multiple of the alignment {alignment}",
                    t.offset
                ),
            ));
        }
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::Truncated {
                    path: path.to_path_buf(),
                    field: format!("tensor '{}' data", t.name),
                    need: end.unwrap_or(u64::MAX),
                    have: file_len,
                });
            }
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}
