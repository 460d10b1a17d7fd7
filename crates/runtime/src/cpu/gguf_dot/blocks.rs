//! GGUF block geometry and the f32 dequantizers of the block types the dot kernels read.
//!
//! Key design choice: the runtime does not depend on `favlo-formats`, so the handful of
//! block layouts the kernels need (ggml's `block_q4_0` … `block_q6_K`, all little-endian)
//! are restated here; `favlo-formats` stays the loader's decoder and the tests compare
//! the two. Dequantization follows ggml's reference order (`d * q + m`, `d*sc*q - dmin*m`)
//! without fused multiply-adds.

use half::f16;

/// A GGUF block type the dot kernels handle.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufType {
    /// 32 × 4-bit, f16 d; x = d·(q − 8).
    Q4_0,
    /// 32 × 4-bit, f16 d, f16 m; x = d·q + m.
    Q4_1,
    /// 32 × 5-bit, f16 d; x = d·(q − 16).
    Q5_0,
    /// 32 × 5-bit, f16 d, f16 m; x = d·q + m.
    Q5_1,
    /// 32 × i8, f16 d; x = d·q.
    Q8_0,
    /// 256 × 4-bit in 8 sub-blocks with 6-bit scales and mins.
    Q4_K,
    /// 256 × 5-bit in 8 sub-blocks with 6-bit scales and mins.
    Q5_K,
    /// 256 × 6-bit in 16 groups with i8 scales; x = d·sc·(q − 32).
    Q6_K,
}

#[allow(non_camel_case_types)]
/// Which quantized form the activation row takes for a weight type (ggml's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActType {
    /// 32-element blocks, f16 scale.
    Q8_0,
    /// 32-element blocks, f16 scale and f16 `d·Σq`.
    Q8_1,
    /// 256-element blocks, f32 scale, i16 sums per 16.
    Q8_K,
}

impl GgufType {
    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            GgufType::Q4_K | GgufType::Q5_K | GgufType::Q6_K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            GgufType::Q4_0 => 18,
            GgufType::Q4_1 => 20,
            GgufType::Q5_0 => 22,
            GgufType::Q5_1 => 24,
            GgufType::Q8_0 => 34,
            GgufType::Q4_K => 144,
            GgufType::Q5_K => 176,
            GgufType::Q6_K => 210,
        }
    }

    /// Bytes of one row of `k` elements (`k` a multiple of the block size).
    pub fn row_bytes(self, k: usize) -> usize {
        k / self.block_size() * self.type_size()
    }

    /// The activation quantization ggml pairs with this weight type.
    pub fn act_type(self) -> ActType {
        match self {
            GgufType::Q4_1 | GgufType::Q5_1 => ActType::Q8_1,
            GgufType::Q4_0 | GgufType::Q5_0 | GgufType::Q8_0 => ActType::Q8_0,
            GgufType::Q4_K | GgufType::Q5_K | GgufType::Q6_K => ActType::Q8_K,
        }
    }
}

#[inline]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// The 5th bits of a Q5_0/Q5_1 block as 32 values 0/16.
#[inline]
pub(crate) fn q5_high(qh: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    for (j, v) in h.iter_mut().enumerate() {
        *v = (((qh >> j) & 1) as u8) << 4;
    }
    h
}

/// The eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block's 12 scale bytes.
#[inline]
pub(crate) fn k4_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
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

/// The 256 unsigned 6-bit codes (0..63) of a Q6_K block, in element order.
#[inline]
pub(crate) fn q6_codes(b: &[u8]) -> [u8; 256] {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let mut q = [0u8; 256];
    for h in 0..2 {
        for t in 0..4 {
            for l in 0..32 {
                let lo = (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
                let hi = (qh[32 * h + l] >> (2 * t)) & 0x03;
                q[128 * h + 32 * t + l] = lo | (hi << 4);
            }
        }
    }
    q
}

/// Dequantize one row (`bytes` = whole blocks, `out.len()` = their element count).
pub fn dequantize_row(ty: GgufType, bytes: &[u8], out: &mut [f32]) {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    for (b, o) in bytes.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
        match ty {
            GgufType::Q4_0 => {
                let d = f16_at(b, 0);
                for j in 0..16 {
                    o[j] = d * (i32::from(b[2 + j] & 0x0F) - 8) as f32;
                    o[j + 16] = d * (i32::from(b[2 + j] >> 4) - 8) as f32;
                }
            }
            GgufType::Q4_1 => {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                for j in 0..16 {
                    o[j] = d * f32::from(b[4 + j] & 0x0F) + m;
                    o[j + 16] = d * f32::from(b[4 + j] >> 4) + m;
                }
            }
            GgufType::Q5_0 => {
                let d = f16_at(b, 0);
                let h = q5_high(u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
                for j in 0..16 {
                    o[j] = d * (i32::from((b[6 + j] & 0x0F) | h[j]) - 16) as f32;
                    o[j + 16] = d * (i32::from((b[6 + j] >> 4) | h[j + 16]) - 16) as f32;
                }
            }
            GgufType::Q5_1 => {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let h = q5_high(u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
                for j in 0..16 {
                    o[j] = d * f32::from((b[8 + j] & 0x0F) | h[j]) + m;
                    o[j + 16] = d * f32::from((b[8 + j] >> 4) | h[j + 16]) + m;
                }
            }
            GgufType::Q8_0 => {
                let d = f16_at(b, 0);
                for (x, &q) in o.iter_mut().zip(&b[2..34]) {
                    *x = f32::from(q as i8) * d;
                }
            }
            GgufType::Q4_K | GgufType::Q5_K => {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                let (sc, mn) = k4_scales(&b[4..16]);
                let five = ty == GgufType::Q5_K;
                let qs = if five { &b[48..176] } else { &b[16..144] };
                for j in 0..8 {
                    let dj = d * f32::from(sc[j]);
                    let mj = dmin * f32::from(mn[j]);
                    let src = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    for l in 0..32 {
                        let mut q = (src[l] >> (4 * (j % 2))) & 0x0F;
                        if five {
                            q |= ((b[16 + l] >> j) & 1) << 4;
                        }
                        o[32 * j + l] = dj * f32::from(q) - mj;
                    }
                }
            }
            GgufType::Q6_K => {
                let d = f16_at(b, 208);
                let q = q6_codes(b);
                for (e, x) in o.iter_mut().enumerate() {
                    let dl = d * f32::from(b[192 + e / 16] as i8);
                    *x = dl * (i32::from(q[e]) - 32) as f32;
                }
            }
        }
    }
}
