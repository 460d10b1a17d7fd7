//! Element conversions from safetensors dtypes to `f32`.
//!
//! Key design choice: small, exact decoders per dtype over little-endian byte
//! chunks (no alignment assumptions on the mapped bytes); the FP8 formats are
//! decoded from their bit fields here rather than through another crate.

use half::{bf16, f16};
use safetensors::Dtype;

/// FP8 E4M3 ("fn" variant: no infinities, S.1111.111 is NaN), exponent bias 7.
pub fn decode_f8_e4m3(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((code >> 3) & 0x0F);
    let man = f32::from(code & 0x07);
    if exp == 0x0F && code & 0x07 == 0x07 {
        return f32::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f32.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// FP8 E5M2 (IEEE-like: exponent 31 is Inf/NaN), exponent bias 15.
pub fn decode_f8_e5m2(code: u8) -> f32 {
    // E5M2 is the top byte of an IEEE half.
    f16::from_bits(u16::from(code) << 8).to_f32()
}

/// E8M0 scale: 2^(e-127); 0xFF is NaN.
pub fn decode_e8m0(code: u8) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        2f32.powi(i32::from(code) - 127)
    }
}

fn map<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f32) -> Vec<f32> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

/// Converts little-endian elements of `dtype` to `f32`; `None` for unsupported
/// dtypes. Wide integers and F64 are rounded to the nearest `f32`.
pub fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => map(bytes, f32::from_le_bytes),
        Dtype::F16 => map(bytes, |a| f16::from_le_bytes(a).to_f32()),
        Dtype::BF16 => map(bytes, |a| bf16::from_le_bytes(a).to_f32()),
        Dtype::F64 => map(bytes, |a| f64::from_le_bytes(a) as f32),
        Dtype::F8_E4M3 => {
            let table: Vec<f32> = (0..=255u8).map(decode_f8_e4m3).collect();
            bytes.iter().map(|&b| table[usize::from(b)]).collect()
        }
        Dtype::F8_E5M2 => bytes.iter().map(|&b| decode_f8_e5m2(b)).collect(),
        Dtype::F8_E8M0 => bytes.iter().map(|&b| decode_e8m0(b)).collect(),
        Dtype::I8 => bytes.iter().map(|&b| f32::from(b as i8)).collect(),
        Dtype::U8 => bytes.iter().map(|&b| f32::from(b)).collect(),
        Dtype::BOOL => bytes
            .iter()
            .map(|&b| if b != 0 { 1.0 } else { 0.0 })
            .collect(),
        Dtype::I16 => map(bytes, |a| f32::from(i16::from_le_bytes(a))),
        Dtype::U16 => map(bytes, |a| f32::from(u16::from_le_bytes(a))),
        Dtype::I32 => map(bytes, |a| i32::from_le_bytes(a) as f32),
        Dtype::U32 => map(bytes, |a| u32::from_le_bytes(a) as f32),
        Dtype::I64 => map(bytes, |a| i64::from_le_bytes(a) as f32),
        Dtype::U64 => map(bytes, |a| u64::from_le_bytes(a) as f32),
        _ => return None,
    })
}
