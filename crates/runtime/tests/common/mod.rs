//! Helpers shared by the kernel tests: seeded non-zero random inputs and the
//! error measure every tolerance is stated in (max |got − want| / max |want|).
#![allow(dead_code)]

#[cfg(feature = "cuda")]
pub mod cuda;

use favlo_runtime::cpu::reference;
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
    reference::max_rel_err(got, want)
}

/// [`rel_err`] of an output that must be finite everywhere (none left unwritten).
pub fn max_rel(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter().all(|v| v.is_finite()),
        "non-finite output (unwritten or NaN)"
    );
    reference::max_rel_err(got, want)
}

/// max |got − want| / (1 + |want|) of an output that must be finite everywhere.
pub fn max_abs_scaled(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter().all(|v| v.is_finite()),
        "non-finite output (unwritten or NaN)"
    );
    reference::max_abs_scaled_err(got, want)
}

/// `rows × cols` random values whose row magnitudes step over 2^-6..2^6 (so the MX
/// block scales differ by row and by block), packed as `format` with the `Ceil` rule:
/// (layout, packed bytes).
pub fn packed_rows(
    rng: &mut StdRng,
    format: favlo_mx::ElementFormat,
    rows: usize,
    cols: usize,
) -> (favlo_mx::MxLayout, Vec<u8>) {
    let mut w = rand_vec(rng, rows * cols, 1.0);
    for (r, row) in w.chunks_mut(cols).enumerate() {
        let m = 2f32.powi((r % 13) as i32 - 6);
        row.iter_mut().for_each(|v| *v *= m);
    }
    let layout = favlo_mx::MxLayout { format, rows, cols };
    let mut packed = vec![0u8; layout.total_bytes()];
    favlo_mx::pack(&w, layout, favlo_mx::ScaleRule::Ceil, &mut packed)
        .unwrap_or_else(|e| panic!("pack {rows}x{cols}: {e}"));
    (layout, packed)
}

/// Largest error per 32-value block relative to that block's largest reference value
/// (an x preparation keeps ~22 bits of its block's largest value).
pub fn blockwise(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(got.iter().all(|v| v.is_finite()), "non-finite values");
    got.chunks(32)
        .zip(want.chunks(32))
        .fold(0f64, |a, (gc, wc)| {
            let m = wc.iter().fold(0f64, |a, b| a.max(b.abs())).max(1e-300);
            gc.iter()
                .zip(wc)
                .fold(a, |a, (g, w)| a.max((*g as f64 - w).abs() / m))
        })
}
