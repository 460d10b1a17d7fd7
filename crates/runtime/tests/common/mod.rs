//! Helpers shared by the kernel tests: seeded non-zero random inputs and the
//! error measure every tolerance is stated in (max |got − want| / max |want|).
#![allow(dead_code)]

#[cfg(feature = "cuda")]
pub mod cuda;

use rand::Rng;
use rand::rngs::StdRng;

/// `n` values in (−scale, scale) shifted off zero, from a seeded generator.
pub fn rand_vec(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random_range(-1.0f32..1.0) + 0.01) * scale)
        .collect()
}

/// Largest absolute error relative to the largest reference magnitude.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (g, w)| a.max((*g as f64 - w).abs()));
    err / max.max(1e-30)
}
