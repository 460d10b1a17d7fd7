//! AVX512-VNNI register tile for the 32-element block types (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0):
//! `R` weight rows × `M` activation rows per pass over the blocks (prefill: 2 × 4;
//! decode: 4 × 1, prefetching the next group of rows).
//!
//! Key design choices:
//! - Each weight block is unpacked once for 4 activation rows, and each activation
//!   block is loaded once for `R` weight rows: the pair's work is one `vpdpbusd`, a
//!   convert, a scale multiply and an FMA.
//! - Signed codes go in unsigned (`q + off`: Q4_0 +8, Q5_0 +16, Q8_0 +128) and the
//!   offset comes back through `vpdpbusd`'s accumulator input, preset per activation
//!   block to `−off · Σy` per 4-byte lane ([`super::act::QuantAct::offset_corrections`]).
//!   The lane sums are exact integers, so every lane equals the `|w|·sign(y, w)` body's
//!   lane and every output is bit-identical to [`super::avx2::row_dot`].
//! - Per output the f32 order is ggml's one-row order: `acc += (d_w·d_y)·lanes` per
//!   block in 8 lanes, then the lane sum, then (Q4_1/Q5_1) the scalar min term.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::act::ActRow;
use super::avx2::{h2f2, hsum_ps, nibbles16, q5_bits};
use super::blocks::GgufType;

/// Activation rows per prefill tile.
pub(crate) const ROWS: usize = 4;

/// Weight rows per decode tile (one activation row).
pub(crate) const DECODE_ROWS: usize = 4;

/// Whether [`tile_dots`] handles `ty`.
pub(crate) fn has_tile(ty: GgufType) -> bool {
    matches!(
        ty,
        GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q5_0 | GgufType::Q5_1 | GgufType::Q8_0
    )
}

/// What is added to a signed type's codes to make them unsigned (0 for Q4_1/Q5_1).
pub(crate) fn code_offset(ty: GgufType) -> i32 {
    match ty {
        GgufType::Q4_0 => 8,
        GgufType::Q5_0 => 16,
        GgufType::Q8_0 => 128,
        _ => 0,
    }
}

/// The 32 unsigned codes of the block at `b`.
///
/// # Safety
/// AVX2 must be available; `b` points at one whole block of `ty` (a tile type).
#[inline(always)]
unsafe fn codes(ty: GgufType, b: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the block and the features.
    unsafe {
        let high = |at: usize| q5_bits(std::ptr::read_unaligned(b.add(at) as *const u32));
        match ty {
            GgufType::Q8_0 => _mm256_xor_si256(
                _mm256_loadu_si256(b.add(2) as *const __m256i),
                _mm256_set1_epi8(-128),
            ),
            GgufType::Q4_0 => nibbles16(b.add(2)),
            GgufType::Q4_1 => nibbles16(b.add(4)),
            GgufType::Q5_0 => _mm256_or_si256(nibbles16(b.add(6)), high(2)),
            _ => _mm256_or_si256(nibbles16(b.add(8)), high(4)),
        }
    }
}

/// `out[j][r]` = row `w[j]` · activation row `a[r]`, bit-identical to `row_dot`.
/// `corr[r]` holds 8 lane corrections per block of `a[r]` for signed types (see the
/// module docs; empty for Q4_1/Q5_1). With `ahead > 0` each weight block read also
/// prefetches the byte `ahead` further on (the rows of the next tile).
///
/// # Safety
/// AVX2, FMA, F16C, AVX512-VNNI and AVX512-VL must be available; `ty` satisfies
/// [`has_tile`]; every `w[j]` holds the blocks of `a[r].qs.len()` codes and every
/// signed type's `corr[r]` 8 values per block.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(crate) unsafe fn tile_dots<const R: usize, const M: usize>(
    ty: GgufType,
    w: [&[u8]; R],
    a: [ActRow<'_>; M],
    corr: [&[i32]; M],
    out: &mut [[f32; M]; R],
    ahead: usize,
) {
    let ts = ty.type_size();
    let signed = code_offset(ty) != 0;
    let has_min = !signed;
    let mut nb = usize::MAX;
    for r in 0..M {
        nb = nb.min(a[r].qs.len() / 32).min(a[r].d.len());
        if signed {
            nb = nb.min(corr[r].len() / 8);
        } else {
            nb = nb.min(a[r].s.len());
        }
    }
    for wj in &w {
        nb = nb.min(wj.len() / ts);
    }
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    let mut tail = [[0f32; M]; R];
    // SAFETY (every read below): i < nb, so block i of each weight row, codes
    // i*32..i*32+32, scale i and corrections i*8..i*8+8 of each activation row exist.
    unsafe {
        for i in 0..nb {
            let mut q = [_mm256_setzero_si256(); R];
            let mut dw = [_mm256_setzero_ps(); R];
            let mut mw = [0f32; R];
            for j in 0..R {
                let b = w[j].as_ptr().add(i * ts);
                if ahead > 0 {
                    // A hint only: prefetching never faults.
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(ahead) as *const i8);
                }
                q[j] = codes(ty, b);
                let (d, m) = h2f2(b);
                dw[j] = _mm256_set1_ps(d);
                mw[j] = m;
            }
            for r in 0..M {
                let y = _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 32) as *const __m256i);
                let c = if signed {
                    _mm256_loadu_si256(corr[r].as_ptr().add(i * 8) as *const __m256i)
                } else {
                    _mm256_setzero_si256()
                };
                let dy = _mm256_set1_ps(*a[r].d.get_unchecked(i));
                let sy = if has_min {
                    *a[r].s.get_unchecked(i)
                } else {
                    0.0
                };
                for j in 0..R {
                    let p = _mm256_dpbusd_epi32(c, q[j], y);
                    let dd = _mm256_mul_ps(dw[j], dy);
                    acc[j][r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[j][r]);
                    if has_min {
                        tail[j][r] += mw[j] * sy;
                    }
                }
            }
        }
        for j in 0..R {
            for r in 0..M {
                out[j][r] = hsum_ps(acc[j][r]) + tail[j][r];
            }
        }
    }
}
