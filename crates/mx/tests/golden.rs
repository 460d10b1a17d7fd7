//! Element codecs and E8M0 against golden tables from `ml_dtypes` (tools/fixtures/mx_golden.py).
//!
//! Comparison rule: decode must equal ml_dtypes bit-for-bit (NaN matches any NaN, ±0 distinct).
//! Encode must equal ml_dtypes' code exactly, where the reference for E4M3 is
//! `ml_dtypes(np.clip(x, -448, 448))` (ml_dtypes gives NaN on e4m3fn overflow/inf; our contract
//! saturates to ±448), for E5M2 plain ml_dtypes (overflow -> ±inf), for E2M1 plain ml_dtypes
//! (which already saturates to ±6 and maps NaN to a zero code with inverted sign).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{f32s, fixture, same};
use favlo_mx::*;

#[test]
fn decode_every_code_matches_ml_dtypes() {
    let t = f32s(&fixture("mx_decode.bin"));
    assert_eq!(t.len(), 528);
    for c in 0..=255u8 {
        let (e4, e5) = (t[c as usize], t[256 + c as usize]);
        assert!(
            same(decode_fp8_e4m3(c), e4),
            "e4m3 {c:#04x}: {} vs {e4}",
            decode_fp8_e4m3(c)
        );
        assert!(same(fp8_e4m3_table()[c as usize], e4));
        assert!(
            same(decode_fp8_e5m2(c), e5),
            "e5m2 {c:#04x}: {} vs {e5}",
            decode_fp8_e5m2(c)
        );
    }
    for c in 0..16u8 {
        let want = t[512 + c as usize];
        assert!(same(decode_fp4_e2m1(c), want), "e2m1 {c}");
        assert!(same(FP4_E2M1_VALUES[c as usize], want));
        assert!(
            same(decode_fp4_e2m1(c | 0xF0), want),
            "high nibble must be ignored"
        );
    }
}

fn check_encodes(inputs: &[f32], codes: &[u8], what: &str) {
    let n = inputs.len();
    assert_eq!(codes.len(), 3 * n);
    let mut bad = Vec::new();
    for (i, &x) in inputs.iter().enumerate() {
        let got = [encode_fp8_e4m3(x), encode_fp8_e5m2(x), encode_fp4_e2m1(x)];
        let want = [codes[i], codes[n + i], codes[2 * n + i]];
        if got != want {
            bad.push((x, x.to_bits(), got, want));
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} mismatches, first: {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

#[test]
fn encode_edge_and_random_inputs_match_ml_dtypes() {
    let x = f32s(&fixture("mx_encode_in.bin"));
    assert!(x.len() > 20_000);
    check_encodes(&x, &fixture("mx_encode_codes.bin"), "edge+random");
}

#[test]
fn encode_bit_sweep_matches_ml_dtypes() {
    // Inputs f32::from_bits(i << 16): every sign/exponent, the top 7 mantissa bits, exact ties.
    let x: Vec<f32> = (0..65536u32).map(|i| f32::from_bits(i << 16)).collect();
    check_encodes(&x, &fixture("mx_sweep_codes.bin"), "sweep");
}

#[test]
fn saturation_contract() {
    for x in [449.0f32, 464.0, 465.0, 1e9, f32::INFINITY] {
        assert_eq!(encode_fp8_e4m3(x), 0x7E, "{x}");
        assert_eq!(encode_fp8_e4m3(-x), 0xFE, "{x}");
        assert_eq!(encode_fp4_e2m1(x), 0x7, "{x}");
        assert_eq!(encode_fp4_e2m1(-x), 0xF, "{x}");
        assert_eq!(encode_fp8_e5m2_saturating(x * 200.0), 0x7B, "{x}");
    }
    assert_eq!(encode_fp8_e5m2(61440.0), 0x7C);
    assert_eq!(encode_fp8_e5m2(61439.0), 0x7B);
}

#[test]
fn e8m0_decode_all_bytes() {
    for b in 0..=255u8 {
        match decode_e8m0(b) {
            None => assert_eq!(b, 0xFF),
            Some(v) => {
                let want = 2f64.powi(i32::from(b) - 127);
                assert_eq!(f64::from(v), want, "byte {b}");
            }
        }
    }
}
