//! Native GGUF block kernels (`cpu::gguf_dot`) on every ISA this CPU has, on random
//! blocks with sane f16 scales and random non-zero activations.
//!
//! - Against an f64 reference of the *same* math: dequantized weights (`dequantize_row`)
//!   × the dequantized 8-bit activation codes (`quantize_activation`), with Q4_1/Q5_1's
//!   min term taken as `m · f16(d·Σq)` like ggml. Tolerance: |y − ref| ≤ 1e-5 · Σ|terms|
//!   (f32 accumulation of exact integer block sums).
//! - Against the plain f32 dot of dequantized weights and the unquantized x: the 8-bit
//!   activation rounding costs at most 1.5 % of max |y| over 64 outputs (measured
//!   ≈ 0.3–0.6 %).
//! - The driver (`gguf_linear_into`, threads, several x rows incl. the 4-row prefill
//!   body, column window) against per-row `gguf_row_dot`: bit-identical, except the
//!   K-quant rows that take ggml's batched f32 order (`batched_rows`: Q6_K's tiled
//!   matmul, Q4_K's 4-row gemm), which must stay within 1e-5 · Σ|terms| of it (the
//!   batched order itself is checked bitwise against llama.cpp by the favlo-llama
//!   agreement tests and `tools/fixtures/llama_dump_compare.py`).
//! - The activation quantizer: every code within half a step (plus f16 rounding of d).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_runtime::cpu::gguf_dot::{
    GgufMatrix, GgufType, batched_rows, dequantize_row, gguf_linear_into, gguf_row_dot,
    quantize_activation,
};
use favlo_runtime::cpu::simd::available_isas;
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TYPES: [GgufType; 8] = [
    GgufType::Q4_0,
    GgufType::Q4_1,
    GgufType::Q5_0,
    GgufType::Q5_1,
    GgufType::Q8_0,
    GgufType::Q4_K,
    GgufType::Q5_K,
    GgufType::Q6_K,
];

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// `n` random rows of `k` elements: random code bytes, f16 scales set to sane values.
fn rand_rows(rng: &mut StdRng, ty: GgufType, n: usize, k: usize) -> Vec<u8> {
    let ts = ty.type_size();
    let mut data: Vec<u8> = (0..n * ty.row_bytes(k)).map(|_| rng.random()).collect();
    for b in data.chunks_exact_mut(ts) {
        let d = rng.random_range(0.002f32..0.05);
        let m = -rng.random_range(0.0f32..0.4);
        match ty {
            GgufType::Q4_0 | GgufType::Q5_0 | GgufType::Q8_0 => put_f16(b, 0, d),
            GgufType::Q4_1 | GgufType::Q5_1 => {
                put_f16(b, 0, d);
                put_f16(b, 2, m);
            }
            GgufType::Q4_K | GgufType::Q5_K => {
                put_f16(b, 0, d / 8.0);
                put_f16(b, 2, -m / 16.0);
            }
            GgufType::Q6_K => put_f16(b, 208, d / 16.0),
        }
    }
    data
}

/// (f64 same-math reference, Σ|terms|, plain f32-input f64 dot).
fn reference(ty: GgufType, w: &[u8], x: &[f32]) -> (f64, f64, f64) {
    let k = x.len();
    let mut wd = vec![0f32; k];
    dequantize_row(ty, w, &mut wd);
    let qa = quantize_activation(ty, x);
    let (mut r, mut mag, mut plain) = (0f64, 0f64, 0f64);
    let with_min = matches!(ty, GgufType::Q4_1 | GgufType::Q5_1);
    for b in 0..k / 32 {
        let m = if with_min {
            f16::from_bits(u16::from_le_bytes([
                w[b * ty.type_size() + 2],
                w[b * ty.type_size() + 3],
            ]))
            .to_f64()
        } else {
            0.0
        };
        for j in 32 * b..32 * b + 32 {
            let t = (f64::from(wd[j]) - m) * f64::from(qa.values[j]);
            r += t;
            mag += t.abs();
            plain += f64::from(wd[j]) * f64::from(x[j]);
        }
        if with_min {
            r += m * f64::from(qa.block_sums[b]);
            mag += (m * f64::from(qa.block_sums[b])).abs();
        }
    }
    (r, mag, plain)
}

#[test]
fn row_dots_match_f64_reference_and_plain_dot() {
    let mut rng = StdRng::seed_from_u64(7);
    let (n, k) = (64, 768);
    for ty in TYPES {
        let w = rand_rows(&mut rng, ty, n, k);
        let x = common::rand_vec(&mut rng, k, 1.0);
        let rb = ty.row_bytes(k);
        // AVX2 and AVX-512 (VNNI `vpdpbusd` where present) give bit-identical rows.
        let isas = available_isas();
        if isas.len() == 3 {
            for r in 0..n {
                let row = &w[r * rb..(r + 1) * rb];
                let a = gguf_row_dot(ty, isas[1], row, &x);
                let b = gguf_row_dot(ty, isas[2], row, &x);
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{ty:?} row {r}: avx2 {a} vs avx512 {b}"
                );
            }
        }
        for isa in isas {
            let mut worst: f64 = 0.0;
            let (mut err_plain, mut max_plain) = (0f64, 0f64);
            for r in 0..n {
                let row = &w[r * rb..(r + 1) * rb];
                let got = f64::from(gguf_row_dot(ty, isa, row, &x));
                let (want, mag, plain) = reference(ty, row, &x);
                worst = worst.max((got - want).abs() / mag);
                err_plain = err_plain.max((got - plain).abs());
                max_plain = max_plain.max(plain.abs());
            }
            let rel_plain = err_plain / max_plain;
            println!("{ty:?} {isa:?}: same-math err {worst:.2e}, vs plain f32 {rel_plain:.2e}");
            assert!(worst <= 1e-5, "{ty:?} {isa:?}: {worst}");
            assert!(rel_plain <= 1.5e-2, "{ty:?} {isa:?}: {rel_plain}");
        }
    }
}

#[test]
fn linear_driver_matches_row_dots() {
    let mut rng = StdRng::seed_from_u64(11);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for ty in [
        GgufType::Q4_0,
        GgufType::Q4_1,
        GgufType::Q5_0,
        GgufType::Q5_1,
        GgufType::Q8_0,
        GgufType::Q4_K,
        GgufType::Q5_K,
        GgufType::Q6_K,
    ] {
        let (n, k) = (151, 512);
        let w = rand_rows(&mut rng, ty, n, k);
        let mat = GgufMatrix { ty, data: &w, n, k };
        for m in [1, 3, 9, 17] {
            let x = common::rand_vec(&mut rng, m * k, 2.0);
            let (ld, col0) = (n + 7, 5);
            let mut out = vec![-9.0f32; m * ld];
            pool.install(|| gguf_linear_into(&x, mat, &mut out, ld, col0));
            let best = *available_isas().last().unwrap();
            for i in 0..m {
                for j in 0..ld {
                    let got = out[i * ld + j];
                    if j < col0 || j >= col0 + n {
                        assert_eq!(got, -9.0, "window {ty:?} m={m} ({i},{j})");
                        continue;
                    }
                    let r = j - col0;
                    let xi = &x[i * k..(i + 1) * k];
                    let want = gguf_row_dot(ty, best, mat.row(r), xi);
                    if i < batched_rows(ty, m) {
                        let mut wr = vec![0f32; k];
                        dequantize_row(ty, mat.row(r), &mut wr);
                        let q = quantize_activation(ty, xi);
                        let terms: f32 = wr.iter().zip(&q.values).map(|(a, b)| (a * b).abs()).sum();
                        assert!(
                            (got - want).abs() <= 1e-5 * terms,
                            "batched {ty:?} m={m} ({i},{r}): {got} vs {want}"
                        );
                        continue;
                    }
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{ty:?} m={m} ({i},{r}): {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn activation_codes_within_half_step() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = common::rand_vec(&mut rng, 512, 3.0);
    for ty in [GgufType::Q8_0, GgufType::Q4_1, GgufType::Q6_K] {
        let q = quantize_activation(ty, &x);
        let bl = if ty == GgufType::Q6_K { 256 } else { 32 };
        for (xb, qb) in x.chunks(bl).zip(q.values.chunks(bl)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let step = amax / 127.0;
            for (a, b) in xb.iter().zip(qb) {
                let bound = step * (0.5 + 127.0 / 2048.0) + 1e-6;
                assert!((a - b).abs() <= bound, "{ty:?}: {a} vs {b} (step {step})");
            }
        }
    }
}
