//! Conversion of ONNX tensor payloads to f32.
//!
//! Key design choice: one function per payload representation (raw little-endian
//! bytes, or one of the typed repeated fields); integer and 64-bit float types are
//! converted with `as`, 16-bit floats through `half`, FP8 through the shared
//! decoders of the safetensors module.

use half::{bf16, f16};

use super::types::{OnnxDataType, TensorData};
use crate::safetensors::{decode_f8_e4m3, decode_f8_e5m2};

/// Converts little-endian raw bytes of `ty`; `None` if the type is not convertible.
/// The caller guarantees `bytes.len()` is a whole number of elements.
pub fn raw_to_f32(ty: OnnxDataType, bytes: &[u8]) -> Option<Vec<f32>> {
    use OnnxDataType as D;
    fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        b.chunks_exact(N).map(|c| {
            let mut w = [0u8; N];
            w.copy_from_slice(c);
            w
        })
    }
    Some(match ty {
        D::Float => words::<4>(bytes).map(f32::from_le_bytes).collect(),
        D::Double => words::<8>(bytes)
            .map(|w| f64::from_le_bytes(w) as f32)
            .collect(),
        D::Float16 => words::<2>(bytes)
            .map(|w| f16::from_le_bytes(w).to_f32())
            .collect(),
        D::Bfloat16 => words::<2>(bytes)
            .map(|w| bf16::from_le_bytes(w).to_f32())
            .collect(),
        D::Int64 => words::<8>(bytes)
            .map(|w| i64::from_le_bytes(w) as f32)
            .collect(),
        D::Uint64 => words::<8>(bytes)
            .map(|w| u64::from_le_bytes(w) as f32)
            .collect(),
        D::Int32 => words::<4>(bytes)
            .map(|w| i32::from_le_bytes(w) as f32)
            .collect(),
        D::Uint32 => words::<4>(bytes)
            .map(|w| u32::from_le_bytes(w) as f32)
            .collect(),
        D::Int16 => words::<2>(bytes)
            .map(|w| f32::from(i16::from_le_bytes(w)))
            .collect(),
        D::Uint16 => words::<2>(bytes)
            .map(|w| f32::from(u16::from_le_bytes(w)))
            .collect(),
        D::Int8 => bytes.iter().map(|&b| f32::from(b as i8)).collect(),
        D::Uint8 => bytes.iter().map(|&b| f32::from(b)).collect(),
        D::Bool => bytes.iter().map(|&b| f32::from(u8::from(b != 0))).collect(),
        D::Float8E4M3FN => bytes.iter().map(|&b| decode_f8_e4m3(b)).collect(),
        D::Float8E5M2 => bytes.iter().map(|&b| decode_f8_e5m2(b)).collect(),
        _ => return None,
    })
}

/// Converts a typed-field payload; `None` if the type is not convertible.
pub fn typed_to_f32(ty: OnnxDataType, data: &TensorData) -> Option<Vec<f32>> {
    use OnnxDataType as D;
    Some(match (data, ty) {
        (TensorData::Floats(v), D::Float) => v.clone(),
        (TensorData::Doubles(v), D::Double) => v.iter().map(|&x| x as f32).collect(),
        (TensorData::Int64s(v), D::Int64) => v.iter().map(|&x| x as f32).collect(),
        (TensorData::Uint64s(v), D::Uint32 | D::Uint64) => v.iter().map(|&x| x as f32).collect(),
        (TensorData::Int32s(v), _) => {
            // int32_data carries every narrow type; 16/8-bit floats as their bit patterns.
            let mut out = Vec::with_capacity(v.len());
            for &x in v {
                out.push(match ty {
                    D::Int32 => x as f32,
                    D::Int16 => f32::from(x as i16),
                    D::Int8 => f32::from(x as i8),
                    D::Uint16 => f32::from(x as u16),
                    D::Uint8 => f32::from(x as u8),
                    D::Bool => f32::from(u8::from(x != 0)),
                    D::Float16 => f16::from_bits(x as u16).to_f32(),
                    D::Bfloat16 => bf16::from_bits(x as u16).to_f32(),
                    D::Float8E4M3FN => decode_f8_e4m3(x as u8),
                    D::Float8E5M2 => decode_f8_e5m2(x as u8),
                    _ => return None,
                });
            }
            out
        }
        (TensorData::Empty, _) => Vec::new(),
        _ => return None,
    })
}
