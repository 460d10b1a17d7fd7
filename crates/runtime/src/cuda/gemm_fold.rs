//! MXFP4 weights for the FP8 tensor-core GEMM: every E2M1 value times a power of two
//! re-encoded as an E4M3 code, exactly, under one scale per (row, 128 k) where it can be.
//!
//! Key design choice: the E2M1 values are 0, 0.5, 1, 1.5, 2, 3, 4, 6; times 2^j they are
//! E4M3 values for −8 ≤ j ≤ 6 (E4M3 is normal down to 2^-6 and its subnormal step 2^-9
//! divides 0.5·2^-8; 6·2^6 = 384 ≤ 448). So the four 32-value blocks of a 128-value
//! group whose E8M0 scales lie within 14 binades of each other share one scale (their
//! largest minus 6) with no rounding at all, and the GEMM can promote its accumulator
//! once per 128 k instead of once per 32 (the grouped kernel of [`super::GemmMx`]). A
//! matrix with a wider group falls back to one scale per block (its codes times 2^6
//! always fit), still exact.

use favlo_mx::{MxView, decode_fp4_e2m1, decode_fp8_e4m3, encode_fp8_e4m3};
use rayon::prelude::*;

/// An MXFP4 matrix as E4M3 codes: `[rows][padded cols]` codes, `[rows][groups · 4]` E8M0
/// scales (the same byte four times per group when `grouped`).
pub(super) struct Folded {
    pub codes: Vec<u8>,
    pub scales: Vec<u8>,
    pub grouped: bool,
}

const BLOCK: usize = 32;
const GROUP: usize = 128;

fn fp4_code(data: &[u8], i: usize) -> u8 {
    let b = data.get(i / 2).copied().unwrap_or(0);
    if i.is_multiple_of(2) { b & 0xF } else { b >> 4 }
}

/// The E4M3 code of E2M1 `code` times 2^shift, if it is exact.
fn reencode_slow(code: u8, shift: i32) -> Option<u8> {
    if code & 7 == 0 {
        return Some(if code & 8 != 0 { 0x80 } else { 0 });
    }
    let v = decode_fp4_e2m1(code) * 2f32.powi(shift);
    let e = encode_fp8_e4m3(v);
    (decode_fp8_e4m3(e).to_bits() == v.to_bits()).then_some(e)
}

/// Shifts the table covers: a scale difference of two E8M0 bytes.
const SHIFTS: i32 = 256;

/// [`reencode_slow`] for every (shift, code), built once: folding an 8B model looks up
/// billions of codes.
fn table() -> &'static [[Option<u8>; 16]] {
    static TABLE: std::sync::OnceLock<Vec<[Option<u8>; 16]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (-SHIFTS..SHIFTS)
            .map(|shift| std::array::from_fn(|c| reencode_slow(c as u8, shift)))
            .collect()
    })
}

/// The E4M3 code of E2M1 `code` times 2^shift, if it is exact (`shift` within ±255).
fn reencode(table: &[[Option<u8>; 16]], code: u8, shift: i32) -> Option<u8> {
    table
        .get(usize::try_from(shift + SHIFTS).ok()?)
        .and_then(|row| row[usize::from(code & 0xF)])
}

/// One row: `grouped` = one scale per group (None if a group cannot), else per block.
fn fold_row(
    (data, sc): (&[u8], &[u8]),
    groups: usize,
    grouped: bool,
    codes: &mut [u8],
    out_sc: &mut [u8],
) -> Option<()> {
    let table = table();
    for g in 0..groups {
        let scales: [u8; 4] = std::array::from_fn(|b| sc.get(4 * g + b).copied().unwrap_or(0));
        let live: [bool; 4] = std::array::from_fn(|b| {
            (0..BLOCK).any(|i| fp4_code(data, g * GROUP + b * BLOCK + i) & 7 != 0)
        });
        // Grouped: the largest live block's scale minus 6 (a NaN scale cannot share).
        let top = (0..4).filter(|&b| live[b]).map(|b| scales[b]).max();
        if grouped && top == Some(255) {
            return None;
        }
        for b in 0..4 {
            let s = scales[b];
            let t = match (grouped, s) {
                (true, _) => top.unwrap_or(127).saturating_sub(6),
                (false, 255) => 255,
                (false, _) => s.saturating_sub(6),
            };
            out_sc[4 * g + b] = t;
            let shift = i32::from(s) - i32::from(t);
            for i in 0..BLOCK {
                let k = g * GROUP + b * BLOCK + i;
                codes[k] = reencode(table, fp4_code(data, k), shift)?;
            }
        }
    }
    Some(())
}

/// Re-encodes an MXFP4 matrix (see the module doc) over `groups` 128-value k blocks per
/// row (zero past the row's columns).
pub(super) fn fold_fp4(view: MxView<'_>, groups: usize) -> Folded {
    let rows = view.layout.rows;
    let width = groups * GROUP;
    let mut codes = vec![0u8; rows * width];
    let mut scales = vec![0u8; rows * groups * 4];
    // Rows in parallel (an 8B model has billions of codes); `all` stops early when one
    // row cannot share its group scales.
    let mut fold = |grouped: bool| {
        codes
            .par_chunks_mut(width)
            .zip(scales.par_chunks_mut(groups * 4))
            .enumerate()
            .all(|(r, (c, s))| {
                fold_row(
                    (view.row_data(r), view.row_scales(r)),
                    groups,
                    grouped,
                    c,
                    s,
                )
                .is_some()
            })
    };
    let grouped = fold(true);
    if !grouped {
        // Per block every code fits (6·2^6 = 384), so this cannot fail.
        let exact = fold(false);
        debug_assert!(exact, "per-block MXFP4 folding is always exact");
    }
    Folded {
        codes,
        scales,
        grouped,
    }
}

#[cfg(test)]
mod tests {
    use super::{fold_fp4, reencode, reencode_slow, table};

    #[test]
    fn the_table_is_the_slow_reencoding() {
        for shift in -255..=255 {
            for code in 0..16u8 {
                assert_eq!(
                    reencode(table(), code, shift),
                    reencode_slow(code, shift),
                    "code {code} shift {shift}"
                );
            }
        }
        assert_eq!(reencode(table(), 1, 256), None);
        assert_eq!(reencode(table(), 1, -257), None);
    }
    use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule, decode_e8m0, decode_fp8_e4m3};

    /// Decodes folded rows back to f32 and compares them bit for bit with the MX decode.
    fn check(view: MxView<'_>, want_grouped: bool) {
        let l = view.layout;
        let groups = l.padded_cols() / 128;
        let f = fold_fp4(view, groups);
        assert_eq!(f.grouped, want_grouped);
        let mut row = vec![0f32; l.cols];
        for r in 0..l.rows {
            view.dequantize_row(r, &mut row);
            for (k, want) in row.iter().enumerate() {
                let s = f.scales[r * groups * 4 + k / 32];
                let got = decode_fp8_e4m3(f.codes[r * groups * 128 + k])
                    * decode_e8m0(s).unwrap_or(f32::NAN);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "row {r} k {k}: {got} vs {want}"
                );
            }
            if f.grouped {
                for g in 0..groups {
                    let s = &f.scales[r * groups * 4 + 4 * g..][..4];
                    assert!(s.iter().all(|v| *v == s[0]), "row {r} group {g}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn fp4_folds_exactly_grouped_and_per_block() -> Result<(), favlo_mx::MxError> {
        let (rows, cols) = (37, 300);
        let l = MxLayout::new(ElementFormat::Fp4E2M1, rows, cols);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        // Block magnitudes within 2^±6 of each other: one scale per group.
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((next() * 2.0 - 1.0) * 2f64.powi(((i / 32) % 13) as i32 - 6)) as f32)
            .collect();
        let mut packed = vec![0u8; l.total_bytes()];
        favlo_mx::pack(&w, l, ScaleRule::Ceil, &mut packed)?;
        check(MxView::new(l, &packed)?, true);
        // One block 2^30 below its neighbours: 24 binades, so per block.
        let mut w2 = w.clone();
        w2[..32].iter_mut().for_each(|v| *v *= 2f32.powi(-30));
        favlo_mx::pack(&w2, l, ScaleRule::Ceil, &mut packed)?;
        check(MxView::new(l, &packed)?, false);
        Ok(())
    }
}
