//! Block decoders from ggml tensor types to `f32`.
//!
//! Key design choice: one plain loop per type over `chunks_exact` blocks, with the
//! arithmetic done in `f32` in the same order as ggml's reference dequantizers
//! (scale products first, then `scale * q - min`), and no fused multiply-add, so
//! results are bit-identical to the reference. Block layouts follow the ggml spec
//! (`ggml-common.h` block structs); all multi-byte fields are little-endian.

use half::{bf16, f16};

use super::error::GgufError;
use super::types::GgmlType;

/// Elements per k-quant super-block.
const QK_K: usize = 256;

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Applies a block decoder over fixed-size blocks (array types let the compiler
/// drop bounds checks inside the decoders).
fn run<const TS: usize, const BS: usize>(
    bytes: &[u8],
    out: &mut [f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) {
    let (blocks, _) = bytes.as_chunks::<TS>();
    let (outs, _) = out.as_chunks_mut::<BS>();
    for (b, o) in blocks.iter().zip(outs) {
        f(b, o);
    }
}

/// Decodes `n_elems` elements of type `ty` from `bytes` into `out`.
///
/// `bytes` must hold exactly the encoded size of `n_elems` elements and `out`
/// exactly `n_elems` values.
pub fn dequantize(
    ty: GgmlType,
    bytes: &[u8],
    n_elems: usize,
    out: &mut [f32],
) -> Result<(), GgufError> {
    let bs = ty.block_size();
    if !n_elems.is_multiple_of(bs) {
        return Err(GgufError::PartialBlock {
            ty,
            n_elems,
            block_size: bs,
        });
    }
    let need_bytes = (n_elems / bs).checked_mul(ty.type_size());
    if need_bytes != Some(bytes.len()) || out.len() != n_elems {
        return Err(GgufError::LengthMismatch {
            ty,
            n_elems,
            need_bytes: need_bytes.unwrap_or(usize::MAX),
            got_bytes: bytes.len(),
            got_out: out.len(),
        });
    }
    let ts = ty.type_size();
    let blocks = bytes.chunks_exact(ts).zip(out.chunks_exact_mut(bs));
    match ty {
        GgmlType::F32 => {
            blocks.for_each(|(b, o)| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, o)| o[0] = f16_at(b, 0)),
        GgmlType::BF16 => blocks
            .for_each(|(b, o)| o[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        GgmlType::F64 => blocks.for_each(|(b, o)| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            o[0] = f64::from_le_bytes(a) as f32;
        }),
        GgmlType::I8 => blocks.for_each(|(b, o)| o[0] = f32::from(b[0] as i8)),
        GgmlType::I16 => {
            blocks.for_each(|(b, o)| o[0] = f32::from(i16::from_le_bytes([b[0], b[1]])))
        }
        GgmlType::I32 => {
            blocks.for_each(|(b, o)| o[0] = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
        }
        GgmlType::I64 => blocks.for_each(|(b, o)| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            o[0] = i64::from_le_bytes(a) as f32;
        }),
        GgmlType::Q4_0 => run::<18, 32>(bytes, out, q4_0),
        GgmlType::Q4_1 => run::<20, 32>(bytes, out, q4_1),
        GgmlType::Q5_0 => run::<22, 32>(bytes, out, q5_0),
        GgmlType::Q5_1 => run::<24, 32>(bytes, out, q5_1),
        GgmlType::Q8_0 => run::<34, 32>(bytes, out, q8_0),
        GgmlType::Q2_K => run::<84, 256>(bytes, out, q2_k),
        GgmlType::Q3_K => run::<110, 256>(bytes, out, q3_k),
        GgmlType::Q4_K => run::<144, 256>(bytes, out, q4_k),
        GgmlType::Q5_K => run::<176, 256>(bytes, out, q5_k),
        GgmlType::Q6_K => run::<210, 256>(bytes, out, q6_k),
        GgmlType::Q8_K => run::<292, 256>(bytes, out, q8_k),
        _ => return Err(GgufError::UnsupportedType { ty }),
    }
    Ok(())
}

/// Q4_0: f16 d, 16 bytes of nibbles; element j low nibble, j+16 high; x = d*(q-8).
fn q4_0(b: &[u8; 18], o: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        o[j] = d * (i32::from(qs[j] & 0x0F) - 8) as f32;
        o[j + 16] = d * (i32::from(qs[j] >> 4) - 8) as f32;
    }
}

/// Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d*q + m.
fn q4_1(b: &[u8; 20], o: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        o[j] = d * f32::from(qs[j] & 0x0F) + m;
        o[j + 16] = d * f32::from(qs[j] >> 4) + m;
    }
}

/// Q5_0: f16 d, u32 qh (bit i = 5th bit of element i), 16 bytes of nibbles; x = d*(q-16).
fn q5_0(b: &[u8; 22], o: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        o[j] = d * (i32::from(lo) - 16) as f32;
        o[j + 16] = d * (i32::from(hi) - 16) as f32;
    }
}

/// Q5_1: f16 d, f16 m, u32 qh, 16 bytes of nibbles; x = d*q + m.
fn q5_1(b: &[u8; 24], o: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        o[j] = d * f32::from(lo) + m;
        o[j + 16] = d * f32::from(hi) + m;
    }
}

/// Q8_0: f16 d, 32 signed bytes; x = d*q.
fn q8_0(b: &[u8; 34], o: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for (x, &q) in o.iter_mut().zip(&b[2..34]) {
        *x = f32::from(q as i8) * d;
    }
}

/// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64] (2-bit), f16 d, f16 dmin.
/// Element e = 128h + 32s + l takes bits 2s of qs[32h + l]; its 16-element group is e/16.
fn q2_k(b: &[u8; 84], o: &mut [f32; 256]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for h in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                let e = 128 * h + 32 * s + l;
                let sc = scales[e / 16];
                let dl = d * f32::from(sc & 0x0F);
                let ml = dmin * f32::from(sc >> 4);
                let q = (qs[32 * h + l] >> (2 * s)) & 3;
                o[e] = dl * f32::from(q) - ml;
            }
        }
    }
}

/// Q3_K: hmask[32], qs[64] (low 2 bits), scales[12] (16 six-bit signed scales), f16 d.
/// Low bits as Q2_K; the high bit of element e is bit e/32 of hmask[e%32], and a
/// *clear* high bit subtracts 4.
fn q3_k(b: &[u8; 110], o: &mut [f32; 256]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let sb = &b[96..108];
    let d = f16_at(b, 108);
    let mut dl = [0f32; 16];
    for (i, v) in dl.iter_mut().enumerate() {
        let low = (sb[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (sb[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        let sc = i32::from(low | (high << 4)) - 32;
        *v = d * sc as f32;
    }
    for h in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                let e = 128 * h + 32 * s + l;
                let low = i32::from((qs[32 * h + l] >> (2 * s)) & 3);
                let hbit = (hmask[e % 32] >> (e / 32)) & 1;
                let q = if hbit == 0 { low - 4 } else { low };
                o[e] = dl[e / 16] * q as f32;
            }
        }
    }
}

/// The eight 6-bit (scale, min) pairs packed in the 12 `scales` bytes of Q4_K/Q5_K.
fn scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        mn[j] = s[j + 4] & 0x3F;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}

/// Q4_K: f16 d, f16 dmin, scales[12], qs[128]. Sub-block j (32 elements) = nibble
/// j%2 of qs[32*(j/2) ..]; x = (d*sc_j)*q - dmin*m_j.
fn q4_k(b: &[u8; 144], o: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for j in 0..8 {
        let dj = d * f32::from(sc[j]);
        let mj = dmin * f32::from(mn[j]);
        let shift = 4 * (j % 2);
        let src = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for (x, &q) in o[32 * j..32 * j + 32].iter_mut().zip(src) {
            *x = dj * f32::from((q >> shift) & 0x0F) - mj;
        }
    }
}

/// Q5_K: as Q4_K plus qh[32] before qs; the 5th bit of sub-block j element l is
/// bit j of qh[l].
fn q5_k(b: &[u8; 176], o: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let qh = &b[16..48];
    let qs = &b[48..176];
    for j in 0..8 {
        let dj = d * f32::from(sc[j]);
        let mj = dmin * f32::from(mn[j]);
        let shift = 4 * (j % 2);
        let src = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for l in 0..32 {
            let q = ((src[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4);
            o[32 * j + l] = dj * f32::from(q) - mj;
        }
    }
}

/// Q6_K: ql[128], qh[64], scales[16] (i8), f16 d. Element e = 128h + 64s + l
/// (l < 64) takes nibble s of ql[64h + l]; element e = 128h + 32t + l (l < 32)
/// takes bits 2t of qh[32h + l]; x = (d*scale[e/16])*(q-32).
fn q6_k(b: &[u8; 210], o: &mut [f32; 256]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = f16_at(b, 208);
    let mut dl = [0f32; 16];
    for (v, &s) in dl.iter_mut().zip(scales) {
        *v = d * f32::from(s as i8);
    }
    for h in 0..2 {
        for t in 0..4 {
            for l in 0..32 {
                let e = 128 * h + 32 * t + l;
                let low = (ql[64 * h + (e % 64)] >> (4 * ((e % 128) / 64))) & 0x0F;
                let high = (qh[32 * h + l] >> (2 * t)) & 0x03;
                let q = i32::from(low | (high << 4)) - 32;
                o[e] = dl[e / 16] * q as f32;
            }
        }
    }
}

/// Q8_K: f32 d, qs[256] (i8), bsums[16] (i16, unused for decoding); x = d*q.
fn q8_k(b: &[u8; 292], o: &mut [f32; 256]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (x, &q) in o.iter_mut().zip(&b[4..4 + QK_K]) {
        *x = d * f32::from(q as i8);
    }
}
