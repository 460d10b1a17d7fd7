//! `pack` against an independent float64 scalar reference of MX block quantization, code by code.
//!
//! The reference knows nothing of the crate's bit tricks: it enumerates every finite element value,
//! picks the nearest one to x / 2^e in f64 (a tie goes to the even code, i.e. mantissa LSB 0;
//! beyond the largest value saturates), and chooses e as "smallest e with peak <= endpoint * 2^e"
//! (Ceil) or "floor(log2(peak)) - emax" (Ocp), found with f64 log2 and fixed up by exact f64
//! comparisons, clamped to -127..=127. Tolerance: none, every code and scale byte must be equal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Rng;
use favlo_mx::*;

const FORMATS: [ElementFormat; 3] = [
    ElementFormat::Fp4E2M1,
    ElementFormat::Fp8E4M3,
    ElementFormat::Fp8E5M2,
];
const RULES: [ScaleRule; 2] = [ScaleRule::Ceil, ScaleRule::Ocp];

/// (magnitude, code) of every finite non-negative element value, sorted by magnitude.
fn magnitudes(format: ElementFormat) -> Vec<(f64, u8)> {
    let (codes, m_bits, bias): (u8, u32, i32) = match format {
        ElementFormat::Fp4E2M1 => (8, 1, 1),
        ElementFormat::Fp8E4M3 => (0x7F, 3, 7), // 0x7F is NaN
        ElementFormat::Fp8E5M2 => (0x7C, 2, 15), // 0x7C is inf
    };
    (0..codes)
        .map(|c| {
            let e = i32::from(c) >> m_bits;
            let m = f64::from(u32::from(c) & ((1 << m_bits) - 1));
            let frac = m / f64::from(1u32 << m_bits);
            let v = if e == 0 {
                frac * 2f64.powi(1 - bias)
            } else {
                (1.0 + frac) * 2f64.powi(e - bias)
            };
            (v, c)
        })
        .collect()
}

fn ref_encode(table: &[(f64, u8)], sign_bit: u8, x: f64) -> u8 {
    let a = x.abs();
    let sign = if x.is_sign_negative() { sign_bit } else { 0 };
    let (max, max_code) = table[table.len() - 1];
    if a >= max {
        return sign | max_code;
    }
    let i = table.iter().position(|&(v, _)| v > a).unwrap();
    let (lo, lo_c) = table[i - 1];
    let (hi, hi_c) = table[i];
    let code = if a - lo < hi - a {
        lo_c
    } else if a - lo > hi - a {
        hi_c
    } else if lo_c % 2 == 0 {
        lo_c
    } else {
        hi_c
    };
    sign | code
}

fn ref_scale_exp(format: ElementFormat, rule: ScaleRule, peak: f64) -> i32 {
    if peak == 0.0 {
        return -127;
    }
    let endpoint = f64::from(format.max_value());
    let emax = match format {
        ElementFormat::Fp4E2M1 => 2,
        ElementFormat::Fp8E4M3 => 8,
        ElementFormat::Fp8E5M2 => 15,
    };
    let e = match rule {
        ScaleRule::Ceil => {
            let mut e = (peak / endpoint).log2().ceil() as i32;
            while peak > endpoint * 2f64.powi(e) {
                e += 1;
            }
            while peak <= endpoint * 2f64.powi(e - 1) {
                e -= 1;
            }
            e
        }
        ScaleRule::Ocp => {
            let mut f = peak.log2().floor() as i32;
            while 2f64.powi(f) > peak {
                f -= 1;
            }
            while 2f64.powi(f + 1) <= peak {
                f += 1;
            }
            f - emax
        }
    };
    e.clamp(-127, 127)
}

/// Reference quantization of one row: (codes one per value incl. K padding, scale bytes).
fn ref_row(
    format: ElementFormat,
    rule: ScaleRule,
    row: &[f32],
    padded: usize,
) -> (Vec<u8>, Vec<u8>) {
    let table = magnitudes(format);
    let sign_bit = if format == ElementFormat::Fp4E2M1 {
        0x8
    } else {
        0x80
    };
    let mut codes = vec![0u8; padded];
    let mut scales = vec![0u8; padded / 32];
    for (b, blk) in row.chunks(32).enumerate() {
        let peak = blk.iter().map(|v| f64::from(v.abs())).fold(0.0, f64::max);
        let e = ref_scale_exp(format, rule, peak);
        scales[b] = (e + 127) as u8;
        for (i, &v) in blk.iter().enumerate() {
            codes[b * 32 + i] = ref_encode(&table, sign_bit, f64::from(v) / 2f64.powi(e));
        }
    }
    (codes, scales)
}

/// Random rows with varied magnitudes, zero blocks, huge/tiny blocks and exact-boundary peaks.
fn test_matrix(rng: &mut Rng, rows: usize, cols: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let sigma = 2f64.powf(rng.uniform() * 40.0 - 20.0);
        for c in 0..cols {
            let x = match (r % 7, c / 32 % 5) {
                (0, 1) => 0.0,
                (1, _) => (rng.gaussian() * 1e-41) as f32, // f32 subnormals
                (2, 2) => (rng.gaussian() * 1e37) as f32,
                (3, _) => (rng.gaussian() * 1e-37) as f32,
                (4, 3) if c % 32 == 5 => {
                    // Block peak exactly at an endpoint * 2^k, or one f32 ulp above it.
                    let ep = [6.0f32, 448.0, 57344.0][r % 3] * 2f32.powi((r % 11) as i32 - 5);
                    if r % 2 == 0 {
                        ep
                    } else {
                        f32::from_bits(ep.to_bits() + 1)
                    }
                }
                (4, 3) => (rng.gaussian() * 0.01) as f32,
                _ => (rng.gaussian() * sigma) as f32,
            };
            v.push(x);
        }
    }
    v
}

#[test]
fn pack_matches_f64_reference_code_by_code() {
    let mut rng = Rng::new(7);
    for (rows, cols) in [(70, 300), (33, 517), (16, 1024), (9, 31)] {
        let x = test_matrix(&mut rng, rows, cols);
        for format in FORMATS {
            for rule in RULES {
                let layout = MxLayout { format, rows, cols };
                let mut out = vec![0xAAu8; layout.total_bytes()];
                pack(&x, layout, rule, &mut out).unwrap();
                let view = MxView::new(layout, &out).unwrap();
                for r in 0..rows {
                    let (codes, scales) = ref_row(
                        format,
                        rule,
                        &x[r * cols..(r + 1) * cols],
                        layout.padded_cols(),
                    );
                    assert_eq!(
                        &view.row_scales(r)[..layout.blocks_per_row()],
                        &scales[..],
                        "{format:?} {rule:?} {rows}x{cols} row {r} scales"
                    );
                    let data = view.row_data(r);
                    for (j, &want) in codes.iter().enumerate() {
                        let got = match format {
                            ElementFormat::Fp4E2M1 => (data[j / 2] >> (4 * (j % 2))) & 0xF,
                            _ => data[j],
                        };
                        assert_eq!(
                            got,
                            want,
                            "{format:?} {rule:?} {rows}x{cols} row {r} col {j} x={}",
                            x.get(r * cols + j).copied().unwrap_or(0.0)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn quantize_block_matches_reference() {
    let mut rng = Rng::new(11);
    for trial in 0..300 {
        let sigma = 2f64.powf(rng.uniform() * 60.0 - 30.0);
        let block: [f32; 32] = std::array::from_fn(|_| (rng.gaussian() * sigma) as f32);
        for format in FORMATS {
            for rule in RULES {
                let mut codes = [0u8; 32];
                let s = quantize_block(format, rule, &block, &mut codes).unwrap();
                let (want, scales) = ref_row(format, rule, &block, 32);
                assert_eq!(s, scales[0], "trial {trial} {format:?} {rule:?}");
                assert_eq!(&codes[..], &want[..], "trial {trial} {format:?} {rule:?}");
            }
        }
    }
}
