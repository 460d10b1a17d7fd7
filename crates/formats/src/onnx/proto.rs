//! Decoding of the ONNX messages this reader needs: ModelProto → GraphProto →
//! TensorProto / NodeProto / AttributeProto (field numbers from `onnx.proto3`).
//!
//! Key design choice: each message is decoded by one function taking the field
//! path (for error messages) and a nesting depth that is checked against
//! [`MAX_DEPTH`]; every other field is skipped by the wire reader, and each
//! tensor's payload size is checked against its shape and data type here, so the
//! model is fully validated once `parse_model` returns.

use std::path::Path;

use super::error::OnnxError;
use super::external::resolve_external;
use super::types::{
    OnnxAttrValue, OnnxAttribute, OnnxDataType, OnnxGraph, OnnxNode, OnnxTensorInfo, TensorData,
};
use super::wire::{WireReader, WireValue};

/// Deepest message nesting accepted (model → graph → node → attribute → graph ...).
pub const MAX_DEPTH: usize = 32;

/// What the parser needs to know besides the bytes.
pub struct Ctx<'a> {
    /// The model file (for error messages).
    pub path: &'a Path,
    /// Folder that external-data locations are relative to; `None` refuses external data.
    pub base_dir: Option<&'a Path>,
}

impl Ctx<'_> {
    fn invalid(&self, field: &str, reason: impl Into<String>) -> OnnxError {
        OnnxError::Invalid {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    fn next(
        &self,
        r: &mut WireReader<'_>,
        field: &str,
    ) -> Result<Option<(u32, WireValue)>, OnnxError> {
        r.next_field().map_err(|source| OnnxError::Wire {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            source,
        })
    }

    fn wire(&self, field: &str, source: super::wire::WireError) -> OnnxError {
        OnnxError::Wire {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            source,
        }
    }

    fn deeper(&self, depth: usize, field: &str) -> Result<usize, OnnxError> {
        if depth >= MAX_DEPTH {
            return Err(OnnxError::TooDeep {
                path: self.path.to_path_buf(),
                field: field.to_string(),
                limit: MAX_DEPTH,
            });
        }
        Ok(depth + 1)
    }
}

fn bytes_of(value: WireValue) -> Option<(usize, usize)> {
    match value {
        WireValue::Bytes { start, end } => Some((start, end)),
        _ => None,
    }
}

fn string(ctx: &Ctx<'_>, base: &[u8], value: WireValue, field: &str) -> Result<String, OnnxError> {
    let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid(field, "expected a string"))?;
    Ok(String::from_utf8_lossy(&base[s..e]).into_owned())
}

fn varint(ctx: &Ctx<'_>, value: WireValue, field: &str) -> Result<u64, OnnxError> {
    match value {
        WireValue::Varint(v) => Ok(v),
        _ => Err(ctx.invalid(field, "expected a varint")),
    }
}

/// Appends the elements of a repeated varint field (packed or not).
fn push_varints(
    ctx: &Ctx<'_>,
    r: &WireReader<'_>,
    value: WireValue,
    field: &str,
    out: &mut Vec<u64>,
) -> Result<(), OnnxError> {
    match value {
        WireValue::Varint(v) => out.push(v),
        WireValue::Bytes { start, end } => {
            let mut p = r.sub(start, end);
            while !p.is_empty() {
                out.push(p.varint().map_err(|e| ctx.wire(field, e))?);
            }
        }
        _ => return Err(ctx.invalid(field, "expected varints")),
    }
    Ok(())
}

/// Appends the elements of a repeated fixed-size field (packed or not) as raw LE words.
fn push_fixed<const N: usize>(
    ctx: &Ctx<'_>,
    base: &[u8],
    value: WireValue,
    field: &str,
    out: &mut Vec<[u8; N]>,
) -> Result<(), OnnxError> {
    match (value, N) {
        (WireValue::Fixed32(v), 4) => out.push(pad(&v.to_le_bytes())),
        (WireValue::Fixed64(v), 8) => out.push(pad(&v.to_le_bytes())),
        (WireValue::Bytes { start, end }, _) => {
            let bytes = &base[start..end];
            if !bytes.len().is_multiple_of(N) {
                return Err(ctx.invalid(
                    field,
                    format!("packed length {} is not a multiple of {N}", bytes.len()),
                ));
            }
            out.extend(bytes.chunks_exact(N).map(pad));
        }
        _ => return Err(ctx.invalid(field, format!("expected {N}-byte values"))),
    }
    Ok(())
}

fn pad<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = b.len().min(N);
    out[..n].copy_from_slice(&b[..n]);
    out
}

/// Decodes a ModelProto and returns its main graph (an empty graph if absent).
pub fn parse_model(ctx: &Ctx<'_>, bytes: &[u8]) -> Result<OnnxGraph, OnnxError> {
    let mut r = WireReader::new(bytes);
    let mut graph = None;
    while let Some((field, value)) = ctx.next(&mut r, "model")? {
        if field == 7 {
            let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid("graph", "not a message"))?;
            graph = Some(parse_graph(ctx, r.sub(s, e), "graph", 1)?);
        }
    }
    graph.ok_or_else(|| ctx.invalid("model", "no graph (field 7); is this an ONNX model?"))
}

fn parse_graph(
    ctx: &Ctx<'_>,
    mut r: WireReader<'_>,
    path: &str,
    depth: usize,
) -> Result<OnnxGraph, OnnxError> {
    let depth = ctx.deeper(depth, path)?;
    let base = r.base();
    let mut g = OnnxGraph::default();
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        match field {
            1 => {
                let f = format!("{path}.node[{}]", g.nodes.len());
                let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid(&f, "not a message"))?;
                g.nodes.push(parse_node(ctx, r.sub(s, e), &f, depth)?);
            }
            2 => g.name = string(ctx, base, value, &format!("{path}.name"))?,
            5 => {
                let f = format!("{path}.initializer[{}]", g.initializers.len());
                let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid(&f, "not a message"))?;
                g.initializers
                    .push(parse_tensor(ctx, r.sub(s, e), &f, depth)?);
            }
            11 | 12 => {
                let f = format!("{path}.{}", if field == 11 { "input" } else { "output" });
                let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid(&f, "not a message"))?;
                let name = value_info_name(ctx, r.sub(s, e), &f)?;
                if field == 11 {
                    g.inputs.push(name);
                } else {
                    g.outputs.push(name);
                }
            }
            _ => {}
        }
    }
    Ok(g)
}

fn value_info_name(ctx: &Ctx<'_>, mut r: WireReader<'_>, path: &str) -> Result<String, OnnxError> {
    let mut name = String::new();
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        if field == 1 {
            name = string(ctx, r.base(), value, &format!("{path}.name"))?;
        }
    }
    Ok(name)
}

fn parse_node(
    ctx: &Ctx<'_>,
    mut r: WireReader<'_>,
    path: &str,
    depth: usize,
) -> Result<OnnxNode, OnnxError> {
    let depth = ctx.deeper(depth, path)?;
    let base = r.base();
    let mut n = OnnxNode::default();
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        match field {
            1 => n
                .inputs
                .push(string(ctx, base, value, &format!("{path}.input"))?),
            2 => n
                .outputs
                .push(string(ctx, base, value, &format!("{path}.output"))?),
            3 => n.name = string(ctx, base, value, &format!("{path}.name"))?,
            4 => n.op_type = string(ctx, base, value, &format!("{path}.op_type"))?,
            7 => n.domain = string(ctx, base, value, &format!("{path}.domain"))?,
            5 => {
                let f = format!("{path}.attribute[{}]", n.attributes.len());
                let (s, e) = bytes_of(value).ok_or_else(|| ctx.invalid(&f, "not a message"))?;
                n.attributes
                    .push(parse_attribute(ctx, r.sub(s, e), &f, depth)?);
            }
            _ => {}
        }
    }
    Ok(n)
}

fn parse_attribute(
    ctx: &Ctx<'_>,
    mut r: WireReader<'_>,
    path: &str,
    depth: usize,
) -> Result<OnnxAttribute, OnnxError> {
    let depth = ctx.deeper(depth, path)?;
    let base = r.base();
    let mut name = String::new();
    let mut ty: Option<i32> = None;
    let (mut f, mut i, mut s) = (None, None, None);
    let (mut t, mut g) = (None, None);
    let mut floats: Vec<[u8; 4]> = Vec::new();
    let mut ints: Vec<u64> = Vec::new();
    let mut strings: Vec<Vec<u8>> = Vec::new();
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        match field {
            1 => name = string(ctx, base, value, &format!("{path}.name"))?,
            20 => ty = Some(varint(ctx, value, &format!("{path}.type"))? as i32),
            2 => match value {
                WireValue::Fixed32(v) => f = Some(f32::from_bits(v)),
                _ => return Err(ctx.invalid(&format!("{path}.f"), "expected a float")),
            },
            3 => i = Some(varint(ctx, value, &format!("{path}.i"))? as i64),
            4 => {
                let (a, b) = bytes_of(value)
                    .ok_or_else(|| ctx.invalid(&format!("{path}.s"), "expected bytes"))?;
                s = Some(base[a..b].to_vec());
            }
            5 => {
                let fp = format!("{path}.t");
                let (a, b) = bytes_of(value).ok_or_else(|| ctx.invalid(&fp, "not a message"))?;
                t = Some(parse_tensor(ctx, r.sub(a, b), &fp, depth)?);
            }
            6 => {
                let fp = format!("{path}.g");
                let (a, b) = bytes_of(value).ok_or_else(|| ctx.invalid(&fp, "not a message"))?;
                g = Some(parse_graph(ctx, r.sub(a, b), &fp, depth)?);
            }
            7 => push_fixed::<4>(ctx, base, value, &format!("{path}.floats"), &mut floats)?,
            8 => push_varints(ctx, &r, value, &format!("{path}.ints"), &mut ints)?,
            9 => {
                let (a, b) = bytes_of(value)
                    .ok_or_else(|| ctx.invalid(&format!("{path}.strings"), "expected bytes"))?;
                strings.push(base[a..b].to_vec());
            }
            _ => {}
        }
    }
    let missing = |what: &str| ctx.invalid(path, format!("attribute '{name}' lacks its {what}"));
    let value = match ty.unwrap_or(0) {
        1 => OnnxAttrValue::Float(f.ok_or_else(|| missing("float f"))?),
        2 => OnnxAttrValue::Int(i.ok_or_else(|| missing("int i"))?),
        3 => OnnxAttrValue::String(s.ok_or_else(|| missing("string s"))?),
        4 => OnnxAttrValue::Tensor(Box::new(t.ok_or_else(|| missing("tensor t"))?)),
        5 => OnnxAttrValue::Graph(Box::new(g.ok_or_else(|| missing("graph g"))?)),
        6 => OnnxAttrValue::Floats(floats.into_iter().map(f32::from_le_bytes).collect()),
        7 => OnnxAttrValue::Ints(ints.into_iter().map(|v| v as i64).collect()),
        8 => OnnxAttrValue::Strings(strings),
        other => OnnxAttrValue::Unsupported(other),
    };
    Ok(OnnxAttribute { name, value })
}

/// Raw fields of a TensorProto before validation.
#[derive(Default)]
struct RawTensor {
    name: String,
    dims: Vec<u64>,
    data_type: i32,
    raw: Option<(usize, usize)>,
    floats: Vec<[u8; 4]>,
    doubles: Vec<[u8; 8]>,
    int32s: Vec<u64>,
    int64s: Vec<u64>,
    uint64s: Vec<u64>,
    strings: usize,
    external: Vec<(String, String)>,
    external_location: bool,
}

fn parse_tensor(
    ctx: &Ctx<'_>,
    mut r: WireReader<'_>,
    path: &str,
    depth: usize,
) -> Result<OnnxTensorInfo, OnnxError> {
    let depth = ctx.deeper(depth, path)?;
    let base = r.base();
    let mut t = RawTensor::default();
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        match field {
            1 => push_varints(ctx, &r, value, &format!("{path}.dims"), &mut t.dims)?,
            2 => t.data_type = varint(ctx, value, &format!("{path}.data_type"))? as i32,
            4 => push_fixed::<4>(
                ctx,
                base,
                value,
                &format!("{path}.float_data"),
                &mut t.floats,
            )?,
            5 => push_varints(ctx, &r, value, &format!("{path}.int32_data"), &mut t.int32s)?,
            6 => t.strings += 1,
            7 => push_varints(ctx, &r, value, &format!("{path}.int64_data"), &mut t.int64s)?,
            8 => t.name = string(ctx, base, value, &format!("{path}.name"))?,
            9 => {
                t.raw =
                    Some(bytes_of(value).ok_or_else(|| {
                        ctx.invalid(&format!("{path}.raw_data"), "expected bytes")
                    })?)
            }
            10 => push_fixed::<8>(
                ctx,
                base,
                value,
                &format!("{path}.double_data"),
                &mut t.doubles,
            )?,
            11 => push_varints(
                ctx,
                &r,
                value,
                &format!("{path}.uint64_data"),
                &mut t.uint64s,
            )?,
            13 => {
                let fp = format!("{path}.external_data");
                let (a, b) = bytes_of(value).ok_or_else(|| ctx.invalid(&fp, "not a message"))?;
                t.external.push(parse_entry(ctx, r.sub(a, b), &fp, depth)?);
            }
            14 => t.external_location = varint(ctx, value, &format!("{path}.data_location"))? == 1,
            _ => {}
        }
    }
    finish_tensor(ctx, t, path)
}

fn parse_entry(
    ctx: &Ctx<'_>,
    mut r: WireReader<'_>,
    path: &str,
    depth: usize,
) -> Result<(String, String), OnnxError> {
    ctx.deeper(depth, path)?;
    let (mut k, mut v) = (String::new(), String::new());
    while let Some((field, value)) = ctx.next(&mut r, path)? {
        match field {
            1 => k = string(ctx, r.base(), value, &format!("{path}.key"))?,
            2 => v = string(ctx, r.base(), value, &format!("{path}.value"))?,
            _ => {}
        }
    }
    Ok((k, v))
}

/// Checks the payload against shape and type and builds the public description.
fn finish_tensor(ctx: &Ctx<'_>, t: RawTensor, path: &str) -> Result<OnnxTensorInfo, OnnxError> {
    use OnnxDataType as D;
    let field = format!("{path} '{}'", t.name);
    let mut shape = Vec::with_capacity(t.dims.len());
    let mut n_elems: usize = 1;
    for &d in &t.dims {
        let d = usize::try_from(d)
            .ok()
            .filter(|&d| (d as u64) < (1u64 << 62))
            .ok_or_else(|| {
                ctx.invalid(
                    &field,
                    format!("dimension {} is negative or huge", d as i64),
                )
            })?;
        n_elems = n_elems
            .checked_mul(d)
            .ok_or_else(|| ctx.invalid(&field, "element count overflows"))?;
        shape.push(d);
    }
    let data_type = D::from_id(t.data_type);
    let n_bytes = data_type
        .element_size()
        .and_then(|s| s.checked_mul(n_elems));
    let count_is = |field_name: &str, got: usize, per: usize| -> Result<(), OnnxError> {
        if Some(got) == n_elems.checked_mul(per) {
            Ok(())
        } else {
            Err(ctx.invalid(
                &format!("{field}.{field_name}"),
                format!("{got} values for shape {shape:?} of {data_type:?}"),
            ))
        }
    };
    let data = if t.external_location {
        let need = n_bytes.ok_or_else(|| {
            ctx.invalid(
                &field,
                format!("external data of type {data_type:?} is not supported"),
            )
        })?;
        resolve_external(ctx.path, ctx.base_dir, &t.name, &t.external, need as u64)?
    } else if let Some((start, end)) = t.raw {
        let need = n_bytes.ok_or_else(|| {
            ctx.invalid(
                &field,
                format!("raw_data of type {data_type:?} is not supported"),
            )
        })?;
        if end - start != need {
            return Err(ctx.invalid(
                &format!("{field}.raw_data"),
                format!(
                    "{} bytes, shape {shape:?} of {data_type:?} needs {need}",
                    end - start
                ),
            ));
        }
        TensorData::Raw { start, end }
    } else if !t.floats.is_empty() {
        let per = match data_type {
            D::Float => 1,
            D::Complex64 => 2,
            _ => return Err(ctx.invalid(&field, format!("float_data for type {data_type:?}"))),
        };
        count_is("float_data", t.floats.len(), per)?;
        TensorData::Floats(t.floats.into_iter().map(f32::from_le_bytes).collect())
    } else if !t.doubles.is_empty() {
        let per = match data_type {
            D::Double => 1,
            D::Complex128 => 2,
            _ => return Err(ctx.invalid(&field, format!("double_data for type {data_type:?}"))),
        };
        count_is("double_data", t.doubles.len(), per)?;
        TensorData::Doubles(t.doubles.into_iter().map(f64::from_le_bytes).collect())
    } else if !t.int32s.is_empty() {
        match data_type {
            D::Int32
            | D::Int16
            | D::Int8
            | D::Uint16
            | D::Uint8
            | D::Bool
            | D::Float16
            | D::Bfloat16
            | D::Float8E4M3FN
            | D::Float8E4M3FNUZ
            | D::Float8E5M2
            | D::Float8E5M2FNUZ => {}
            _ => return Err(ctx.invalid(&field, format!("int32_data for type {data_type:?}"))),
        }
        count_is("int32_data", t.int32s.len(), 1)?;
        TensorData::Int32s(t.int32s.into_iter().map(|v| v as i32).collect())
    } else if !t.int64s.is_empty() {
        if data_type != D::Int64 {
            return Err(ctx.invalid(&field, format!("int64_data for type {data_type:?}")));
        }
        count_is("int64_data", t.int64s.len(), 1)?;
        TensorData::Int64s(t.int64s.into_iter().map(|v| v as i64).collect())
    } else if !t.uint64s.is_empty() {
        if !matches!(data_type, D::Uint32 | D::Uint64) {
            return Err(ctx.invalid(&field, format!("uint64_data for type {data_type:?}")));
        }
        count_is("uint64_data", t.uint64s.len(), 1)?;
        TensorData::Uint64s(t.uint64s)
    } else if t.strings > 0 {
        if data_type != D::String {
            return Err(ctx.invalid(&field, format!("string_data for type {data_type:?}")));
        }
        count_is("string_data", t.strings, 1)?;
        TensorData::Strings(t.strings)
    } else if n_elems == 0 {
        TensorData::Empty
    } else {
        return Err(ctx.invalid(&field, format!("no data for shape {shape:?}")));
    };
    Ok(OnnxTensorInfo {
        name: t.name,
        shape,
        data_type,
        data,
    })
}
