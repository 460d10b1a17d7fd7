//! Portable block dot products: one weight row (raw GGUF blocks) · one quantized
//! activation row, integer sums per block and the scales applied per block in f32.
//!
//! Key design choice: these are the references the SIMD bodies must reproduce
//! bit-for-bit in their integer parts; only the f32 accumulation order may differ.

use super::act::ActRow;
use super::blocks::{GgufType, f16_at, k4_scales, q5_high, q6_codes};

#[inline]
fn idot(w: impl Iterator<Item = i32>, y: &[i8]) -> i32 {
    w.zip(y).map(|(a, &b)| a * i32::from(b)).sum()
}

/// Σ over the row's blocks; `w` holds whole blocks for `a.qs.len()` elements.
pub(crate) fn row_dot(ty: GgufType, w: &[u8], a: ActRow<'_>) -> f32 {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut acc = 0f32;
    for (i, (b, y)) in w.chunks_exact(ts).zip(a.qs.chunks_exact(bs)).enumerate() {
        acc += match ty {
            GgufType::Q4_0 => {
                let qs = &b[2..18];
                let q = qs
                    .iter()
                    .map(|v| i32::from(v & 0x0F))
                    .chain(qs.iter().map(|v| i32::from(v >> 4)));
                let s = idot(q.map(|v| v - 8), y);
                f16_at(b, 0) * a.d[i] * s as f32
            }
            GgufType::Q4_1 => {
                let qs = &b[4..20];
                let q = qs
                    .iter()
                    .map(|v| i32::from(v & 0x0F))
                    .chain(qs.iter().map(|v| i32::from(v >> 4)));
                let s = idot(q, y);
                f16_at(b, 0) * a.d[i] * s as f32 + f16_at(b, 2) * a.s[i]
            }
            GgufType::Q5_0 | GgufType::Q5_1 => {
                let off = if ty == GgufType::Q5_0 { 2 } else { 4 };
                let h = q5_high(u32::from_le_bytes([
                    b[off],
                    b[off + 1],
                    b[off + 2],
                    b[off + 3],
                ]));
                let qs = &b[off + 4..off + 20];
                let q = qs
                    .iter()
                    .map(|v| v & 0x0F)
                    .chain(qs.iter().map(|v| v >> 4))
                    .zip(h)
                    .map(|(lo, hi)| i32::from(lo | hi));
                if ty == GgufType::Q5_0 {
                    f16_at(b, 0) * a.d[i] * idot(q.map(|v| v - 16), y) as f32
                } else {
                    f16_at(b, 0) * a.d[i] * idot(q, y) as f32 + f16_at(b, 2) * a.s[i]
                }
            }
            GgufType::Q8_0 => {
                let s = idot(b[2..34].iter().map(|&v| i32::from(v as i8)), y);
                f16_at(b, 0) * a.d[i] * s as f32
            }
            GgufType::Q4_K | GgufType::Q5_K => {
                let five = ty == GgufType::Q5_K;
                let (sc, mn) = k4_scales(&b[4..16]);
                let qs = if five { &b[48..176] } else { &b[16..144] };
                let (mut sumi, mut summ) = (0i32, 0i32);
                for j in 0..8 {
                    let src = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    let q = src.iter().enumerate().map(|(l, v)| {
                        let mut q = (v >> (4 * (j % 2))) & 0x0F;
                        if five {
                            q |= ((b[16 + l] >> j) & 1) << 4;
                        }
                        i32::from(q)
                    });
                    sumi += i32::from(sc[j]) * idot(q, &y[32 * j..32 * j + 32]);
                    summ +=
                        i32::from(mn[j]) * (a.sums[16 * i + 2 * j] + a.sums[16 * i + 2 * j + 1]);
                }
                let d = a.d[i] * f16_at(b, 0);
                let dmin = a.d[i] * f16_at(b, 2);
                d * sumi as f32 - dmin * summ as f32
            }
            GgufType::Q6_K => {
                let q = q6_codes(b);
                let mut sumi = 0i32;
                for g in 0..16 {
                    let s = idot(
                        q[16 * g..16 * g + 16].iter().map(|&v| i32::from(v) - 32),
                        &y[16 * g..16 * g + 16],
                    );
                    sumi += i32::from(b[192 + g] as i8) * s;
                }
                f16_at(b, 208) * a.d[i] * sumi as f32
            }
        };
    }
    acc
}
