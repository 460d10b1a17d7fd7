//! bf16 splitting and the tile layouts: weights (B) packed once at load, activations (A)
//! converted per call into a small per-thread panel.
//!
//! Key design choice: the packed B is laid out in exactly the order the micro-kernel loads
//! it — per 32-column block, per 32-deep k step, the tiles one after another (hi tiles,
//! then lo tiles for [`Precision::Bf16x3`]) — so each block's whole right operand is one
//! sequential stream of 1 KiB tile loads. A tile of B holds 16 rows of *pairs*: row `r`,
//! column `c` is `[B[2r, c], B[2r+1, c]]` (the "VNNI" pairing `tdpbf16ps` expects).
//! `k` and `n` are zero-padded to whole tiles, so ragged shapes need no tile reconfiguration.

use super::Precision;

/// Depth of one tile step (32 bf16 = one 64-byte tile row of A).
pub(crate) const KB: usize = 32;
/// Columns of one tile of C / B.
pub(crate) const TN: usize = 16;
/// Columns of C per micro-kernel block (two tiles).
pub(crate) const NB: usize = 2 * TN;
/// Rows of one tile of A / C.
pub(crate) const TM: usize = 16;
/// Rows of C per micro-kernel block (two tiles).
pub(crate) const MB: usize = 2 * TM;
/// u16 elements of one tile (16 rows × 64 bytes).
pub(crate) const TILE: usize = 512;

/// How a weight matrix is stored before packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BLayout {
    /// `w[j·k + p]`: `[n, k]` row-major — a linear layer's weight, so `C = A·Wᵀ`.
    Nk,
    /// `w[p·n + j]`: `[k, n]` row-major, so `C = A·B`.
    Kn,
}

/// `k` rounded up to whole tile steps.
pub(crate) fn k_pad(k: usize) -> usize {
    k.div_ceil(KB) * KB
}

/// Tile parts per k step and column block: 2 (hi) or 4 (hi, lo).
pub(crate) fn parts(p: Precision) -> usize {
    match p {
        Precision::Bf16 => 2,
        Precision::Bf16x3 => 4,
    }
}

/// u16 elements of a packed `[k, n]` B.
pub fn packed_len(n: usize, k: usize, precision: Precision) -> usize {
    n.div_ceil(NB) * k_pad(k) / KB * parts(precision) * TILE
}

/// f32 → bf16 bits, rounded to nearest even (NaN kept quiet).
#[inline]
pub(crate) fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let round = 0x7FFF + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// bf16 bits → f32 (exact).
#[inline]
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `x ≈ hi + lo` with both bf16 (`lo` is the rounding error of `hi`, rounded again).
#[inline]
pub(crate) fn split(x: f32) -> (u16, u16) {
    let hi = bf16_bits(x);
    (hi, bf16_bits(x - bf16_to_f32(hi)))
}

/// Pack `w` (stored as `layout`) into `out` (length [`packed_len`]). Returns false, writing
/// nothing, when a length does not match.
pub fn pack_b_into(
    w: &[f32],
    layout: BLayout,
    n: usize,
    k: usize,
    precision: Precision,
    out: &mut [u16],
) -> bool {
    if w.len() != n * k || out.len() != packed_len(n, k, precision) {
        return false;
    }
    out.fill(0);
    let steps = k_pad(k) / KB;
    let parts = parts(precision);
    let get = |p: usize, j: usize| match layout {
        BLayout::Nk => w[j * k + p],
        BLayout::Kn => w[p * n + j],
    };
    for j in 0..n {
        let (nb, t, c) = (j / NB, (j % NB) / TN, j % TN);
        for p in 0..k {
            let (kb, r, e) = (p / KB, (p % KB) / 2, p % 2);
            let step = (nb * steps + kb) * parts * TILE;
            let at = t * TILE + r * 2 * TN + 2 * c + e;
            let (hi, lo) = split(get(p, j));
            out[step + at] = hi;
            if parts == 4 {
                out[step + 2 * TILE + at] = lo;
            }
        }
    }
    true
}

/// Convert rows `a[i·lda .. i·lda + k]` for `i < rows` into bf16 panels `[rows_pad][k_pad]`
/// (`hi`, and `lo` when given); rows `rows..rows_pad` and columns `k..k_pad` are zero.
pub(crate) fn convert_a(
    a: &[f32],
    lda: usize,
    rows: usize,
    k: usize,
    rows_pad: usize,
    hi: &mut [u16],
    mut lo: Option<&mut [u16]>,
) {
    let kp = k_pad(k);
    for i in 0..rows_pad {
        let h = &mut hi[i * kp..(i + 1) * kp];
        let l = lo.as_deref_mut().map(|l| &mut l[i * kp..(i + 1) * kp]);
        if i >= rows {
            h.fill(0);
            if let Some(l) = l {
                l.fill(0);
            }
            continue;
        }
        let src = &a[i * lda..i * lda + k];
        #[cfg(target_arch = "x86_64")]
        if super::detect::detected_amx() {
            // SAFETY: AMX detection also checked AVX-512 F/BW/BF16.
            unsafe { avx512::convert_row(src, h, l) };
            continue;
        }
        convert_row_scalar(src, h, l);
    }
}

fn convert_row_scalar(src: &[f32], hi: &mut [u16], lo: Option<&mut [u16]>) {
    let k = src.len();
    match lo {
        Some(lo) => {
            for (p, &x) in src.iter().enumerate() {
                (hi[p], lo[p]) = split(x);
            }
            lo[k..].fill(0);
        }
        None => {
            for (h, &x) in hi.iter_mut().zip(src) {
                *h = bf16_bits(x);
            }
        }
    }
    hi[k..].fill(0);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// One row: 16 floats per step with `vcvtneps2bf16` (round to nearest even), the
    /// remainder masked; the padding after `src.len()` is zeroed.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and BF16; `hi` (and `lo`) at least `src.len()` long.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx512vl")]
    pub(super) unsafe fn convert_row(src: &[f32], hi: &mut [u16], mut lo: Option<&mut [u16]>) {
        let k = src.len();
        let mut p = 0;
        while p < k {
            let left = k - p;
            let mask: __mmask16 = if left >= 16 {
                0xFFFF
            } else {
                (1u16 << left) - 1
            };
            // SAFETY: lanes under `mask` are in bounds of src, hi and lo.
            unsafe {
                let x = _mm512_maskz_loadu_ps(mask, src.as_ptr().add(p));
                let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(x));
                _mm256_mask_storeu_epi16(hi.as_mut_ptr().add(p).cast(), mask, h);
                if let Some(lo) = lo.as_deref_mut() {
                    let back =
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)));
                    let r: __m256i =
                        std::mem::transmute(_mm512_cvtneps_pbh(_mm512_sub_ps(x, back)));
                    _mm256_mask_storeu_epi16(lo.as_mut_ptr().add(p).cast(), mask, r);
                }
            }
            p += 16;
        }
        hi[k..].fill(0);
        if let Some(lo) = lo {
            lo[k..].fill(0);
        }
    }
}

/// Widen one packed column block (`steps` tile steps of [`NB`] columns) back to f32
/// `wide[p·NB + c] = hi (+ lo)` for `p < k`.
pub(crate) fn widen_block(b: &[u16], k: usize, precision: Precision, wide: &mut [f32]) {
    let parts = parts(precision);
    for p in 0..k {
        let (kb, r, e) = (p / KB, (p % KB) / 2, p % 2);
        let step = kb * parts * TILE;
        for c in 0..NB {
            let at = step + (c / TN) * TILE + r * 2 * TN + 2 * (c % TN) + e;
            let mut v = bf16_to_f32(b[at]);
            if parts == 4 {
                v += bf16_to_f32(b[at + 2 * TILE]);
            }
            wide[p * NB + c] = v;
        }
    }
}
