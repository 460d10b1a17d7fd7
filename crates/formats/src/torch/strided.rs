//! Strided gathers from a storage's little-endian bytes into row-major f32.
//!
//! Key design choice: bounds are computed once from (offset, shape, strides)
//! with checked arithmetic; a contiguous tensor is converted as one slice, any
//! other layout walks the index odometer.

use half::{bf16, f16};

use super::pickle::StorageDtype;

/// Product of the shape, `None` on overflow.
pub fn n_elems(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Largest storage element index the tensor touches; `None` for an empty
/// tensor, `Some(usize::MAX)` on overflow (always out of range).
pub fn last_index(offset: usize, shape: &[usize], strides: &[usize]) -> Option<usize> {
    if shape.contains(&0) || shape.len() != strides.len() {
        return if shape.len() != strides.len() {
            Some(usize::MAX)
        } else {
            None
        };
    }
    let mut last = Some(offset);
    for (&d, &s) in shape.iter().zip(strides) {
        last = last.and_then(|l| (d - 1).checked_mul(s).and_then(|x| l.checked_add(x)));
    }
    Some(last.unwrap_or(usize::MAX))
}

fn element(bytes: &[u8], dtype: StorageDtype, i: usize) -> Option<f32> {
    use StorageDtype::*;
    let sz = dtype.size();
    let b = bytes.get(i.checked_mul(sz)?..i.checked_mul(sz)?.checked_add(sz)?)?;
    Some(match dtype {
        F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32,
        F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
        BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32,
        I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        I16 => f32::from(i16::from_le_bytes([b[0], b[1]])),
        I8 => f32::from(b[0] as i8),
        U8 => f32::from(b[0]),
        Bool => f32::from(u8::from(b[0] != 0)),
    })
}

/// Gathers the tensor to row-major f32; `None` if any index is out of range.
pub fn gather_f32(
    bytes: &[u8],
    dtype: StorageDtype,
    offset: usize,
    shape: &[usize],
    strides: &[usize],
) -> Option<Vec<f32>> {
    let n = n_elems(shape)?;
    if n == 0 {
        return Some(Vec::new());
    }
    if let Some(last) = last_index(offset, shape, strides)
        && last.checked_add(1)?.checked_mul(dtype.size())? > bytes.len()
    {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    // Contiguous row-major strides?
    let mut expect = 1usize;
    let mut contiguous = true;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expect {
            contiguous = false;
        }
        expect = expect.saturating_mul(d);
    }
    if contiguous {
        for i in offset..offset + n {
            out.push(element(bytes, dtype, i)?);
        }
        return Some(out);
    }
    let mut idx = vec![0usize; shape.len()];
    let mut pos = offset;
    for _ in 0..n {
        out.push(element(bytes, dtype, pos)?);
        // advance the odometer (last dimension fastest)
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            pos += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            pos -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    Some(out)
}
