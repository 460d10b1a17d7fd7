//! Activation rows quantized the way ggml quantizes `src1` before its block dot products.
//!
//! Key design choice: the numerics are ggml's x86 ones, restated: Q8_0/Q8_1 take
//! `d = amax/127` (stored as f16), multiply by `id = 127/amax` (unrounded) and round
//! half to even (the AVX2 `_mm256_round_ps` path); Q8_1 also stores `s = f16(d·Σq)`.
//! Q8_K (ggml's reference quantizer, which x86 uses) scales by `−127/max` where `max`
//! is the signed value of largest magnitude, rounds half to even, clamps at 127 and
//! keeps `d = 1/iscale` in f32 plus i16 sums per 16 elements. Values are kept in
//! plain arrays (not byte blocks): the kernels read `qs`, `d`, `s`/`sums` by index.

use half::f16;

use super::blocks::ActType;

/// `m` activation rows of `k` elements, quantized for one [`ActType`].
pub(crate) struct QuantAct {
    pub kind: ActType,
    pub k: usize,
    /// `m * k` codes.
    pub qs: Vec<i8>,
    /// Per block scale (32-blocks: f16-rounded; Q8_K: f32).
    pub d: Vec<f32>,
    /// Q8_1: per block `f16(d·Σq)`; otherwise empty.
    pub s: Vec<f32>,
    /// Q8_K: per 16 elements Σq; otherwise empty.
    pub sums: Vec<i32>,
    /// Per 32-block and 4-byte lane `−off · Σ` of the lane's 4 codes (8 per block),
    /// for the VNNI tile's unsigned-offset codes; empty unless
    /// [`QuantAct::offset_corrections`] filled it.
    pub corr: Vec<i32>,
    /// Rows `0..batch_rows` take ggml's batched K-quant f32 order (its tiled matmul
    /// for Q6_K at ≥ 8 rows, the q4_K_8x8 gemm for Q4_K's whole groups of 4 rows);
    /// the others its one-row order (`vec_dot` / gemv). Set by the driver.
    pub batch_rows: usize,
}

/// Round half to even for |v| < 2^22 (ggml's `nearest_int` trick: adding 1.5·2^23
/// leaves the rounded integer in the low mantissa bits), without a libm `rintf` call.
#[inline]
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits();
    (bits & 0x007F_FFFF) as i32 - 0x0040_0000
}

/// One quantized activation row.
#[derive(Clone, Copy)]
pub(crate) struct ActRow<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub s: &'a [f32],
    pub sums: &'a [i32],
    /// Whether this row takes the batched order (see [`QuantAct::batch_rows`]).
    pub batch: bool,
}

fn block_len(kind: ActType) -> usize {
    if kind == ActType::Q8_K { 256 } else { 32 }
}

impl QuantAct {
    /// Quantize `x` (`m * k`, `k` a multiple of the block length).
    pub(crate) fn new(kind: ActType, x: &[f32], k: usize) -> QuantAct {
        let bl = block_len(kind);
        let nb = x.len() / bl;
        let mut a = QuantAct {
            kind,
            k,
            qs: vec![0; x.len()],
            d: vec![0.0; nb],
            s: Vec::new(),
            sums: Vec::new(),
            corr: Vec::new(),
            batch_rows: 0,
        };
        match kind {
            ActType::Q8_0 | ActType::Q8_1 => {
                if kind == ActType::Q8_1 {
                    a.s = vec![0.0; nb];
                }
                for (b, (xb, qb)) in x
                    .chunks_exact(32)
                    .zip(a.qs.chunks_exact_mut(32))
                    .enumerate()
                {
                    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                    let mut sum = 0i32;
                    for (q, v) in qb.iter_mut().zip(xb) {
                        let r = nearest_int(v * id);
                        *q = r as i8;
                        sum += r;
                    }
                    a.d[b] = f16::from_f32(d).to_f32();
                    if kind == ActType::Q8_1 {
                        a.s[b] = f16::from_f32(d * sum as f32).to_f32();
                    }
                }
            }
            ActType::Q8_K => {
                a.sums = vec![0; x.len() / 16];
                for (b, (xb, qb)) in x
                    .chunks_exact(256)
                    .zip(a.qs.chunks_exact_mut(256))
                    .enumerate()
                {
                    let (mut amax, mut max) = (0f32, 0f32);
                    for &v in xb {
                        if v.abs() > amax {
                            amax = v.abs();
                            max = v;
                        }
                    }
                    if amax == 0.0 {
                        continue;
                    }
                    let iscale = -127.0 / max;
                    for (q, v) in qb.iter_mut().zip(xb) {
                        let r = nearest_int(iscale * v).min(127);
                        *q = r as i8;
                    }
                    for (g, qg) in qb.chunks_exact(16).enumerate() {
                        a.sums[b * 16 + g] = qg.iter().map(|&q| i32::from(q)).sum();
                    }
                    a.d[b] = 1.0 / iscale;
                }
            }
        }
        a
    }

    /// Fill [`QuantAct::corr`] for codes offset by `off` (32-element blocks only).
    pub(crate) fn offset_corrections(&mut self, off: i32) {
        self.corr = self
            .qs
            .chunks_exact(4)
            .map(|l| -off * l.iter().map(|&q| i32::from(q)).sum::<i32>())
            .collect();
    }

    /// Row `i`'s lane corrections (empty when not filled).
    pub(crate) fn corr_row(&self, i: usize) -> &[i32] {
        let per_row = self.k / 4;
        self.corr.get(i * per_row..(i + 1) * per_row).unwrap_or(&[])
    }

    /// Row `i`.
    pub(crate) fn row(&self, i: usize) -> ActRow<'_> {
        let k = self.k;
        let nb = k / block_len(self.kind);
        ActRow {
            qs: &self.qs[i * k..(i + 1) * k],
            d: &self.d[i * nb..(i + 1) * nb],
            s: if self.s.is_empty() {
                &[]
            } else {
                &self.s[i * nb..(i + 1) * nb]
            },
            sums: if self.sums.is_empty() {
                &[]
            } else {
                &self.sums[i * k / 16..(i + 1) * k / 16]
            },
            batch: i < self.batch_rows,
        }
    }

    /// The values the kernels effectively multiply with (`d·q`), row-major `m * k`.
    pub(crate) fn dequantized(&self) -> Vec<f32> {
        let bl = block_len(self.kind);
        self.qs
            .iter()
            .enumerate()
            .map(|(i, &q)| self.d[i / bl] * f32::from(q))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::nearest_int;

    #[test]
    fn nearest_int_is_round_half_even() {
        let mut v = -130.0f32;
        while v <= 130.0 {
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
            v += 0.125;
        }
        for v in [0.49999997f32, -0.49999997, 126.5, -126.5, 1e-30, -1e-30] {
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
        }
    }
}
