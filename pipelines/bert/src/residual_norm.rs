//! The residual add and LayerNorm of a transformer layer in one pass:
//! `x = LayerNorm(x + delta) · weight + bias`, row by row.
//!
//! Key design choice: one read of `x` and `delta` and one write of `x` per row (the separate
//! `add` then `layer_norm` passes read and wrote the `[tokens, hidden]` activations twice
//! more); the row stays in L1 between its statistics pass and its output pass. Statistics are
//! two-pass (mean, then centered variance) in f32 with 16-lane partial sums (AVX-512) or a
//! portable loop; rows are spread over rayon tasks of ≥ 16 K elements.

use rayon::prelude::*;

/// Elements per rayon task.
const CHUNK: usize = 16 * 1024;

/// `x[r] = LayerNorm(x[r] + delta[r])` for every row of `weight.len()` elements.
pub fn add_layer_norm(x: &mut [f32], delta: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    let dim = weight.len();
    if dim == 0 || bias.len() != dim || x.len() != delta.len() || !x.len().is_multiple_of(dim) {
        debug_assert!(dim == 0, "add_layer_norm: shapes");
        return;
    }
    let rows_per = (CHUNK / dim).max(1);
    let run = |(xc, dc): (&mut [f32], &[f32])| {
        for (xr, dr) in xc.chunks_exact_mut(dim).zip(dc.chunks_exact(dim)) {
            row(xr, dr, weight, bias, eps);
        }
    };
    if x.len() > CHUNK {
        x.par_chunks_mut(rows_per * dim)
            .zip(delta.par_chunks(rows_per * dim))
            .for_each(run);
    } else {
        run((x, delta));
    }
}

fn row(x: &mut [f32], d: &[f32], w: &[f32], b: &[f32], eps: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F was detected; all slices have the row's length (checked by the
        // caller's chunking).
        unsafe { avx512::row(x, d, w, b, eps) };
        return;
    }
    row_scalar(x, d, w, b, eps);
}

fn row_scalar(x: &mut [f32], d: &[f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f32;
    for (xv, dv) in x.iter_mut().zip(d) {
        *xv += *dv;
    }
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((xv, wv), bv) in x.iter_mut().zip(w).zip(b) {
        *xv = (*xv - mean) * inv * *wv + *bv;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512 F; `d`, `w`, `b` at least `x.len()` long.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row(x: &mut [f32], d: &[f32], w: &[f32], b: &[f32], eps: f32) {
        let n = x.len();
        let (xp, dp, wp, bp) = (x.as_mut_ptr(), d.as_ptr(), w.as_ptr(), b.as_ptr());
        let mask = |j: usize| -> __mmask16 {
            if n - j >= 16 {
                0xFFFF
            } else {
                (1u16 << (n - j)) - 1
            }
        };
        // SAFETY (all masked accesses): lanes under the mask are below n.
        unsafe {
            let mut s = _mm512_setzero_ps();
            let mut j = 0;
            while j < n {
                let m = mask(j);
                let v = _mm512_add_ps(
                    _mm512_maskz_loadu_ps(m, xp.add(j)),
                    _mm512_maskz_loadu_ps(m, dp.add(j)),
                );
                _mm512_mask_storeu_ps(xp.add(j), m, v);
                s = _mm512_add_ps(s, v);
                j += 16;
            }
            let mean = _mm512_reduce_add_ps(s) / n as f32;
            let mv = _mm512_set1_ps(mean);
            let mut q = _mm512_setzero_ps();
            j = 0;
            while j < n {
                let m = mask(j);
                let c = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, xp.add(j)), mv);
                q = _mm512_fmadd_ps(c, c, q);
                j += 16;
            }
            let var = _mm512_reduce_add_ps(q) / n as f32;
            let inv = _mm512_set1_ps(1.0 / (var + eps).sqrt());
            j = 0;
            while j < n {
                let m = mask(j);
                let c = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xp.add(j)), mv), inv);
                let o = _mm512_fmadd_ps(
                    c,
                    _mm512_maskz_loadu_ps(m, wp.add(j)),
                    _mm512_maskz_loadu_ps(m, bp.add(j)),
                );
                _mm512_mask_storeu_ps(xp.add(j), m, o);
                j += 16;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Against an f64 LayerNorm of the f32 sum; rows of 384 (MiniLM), 37 (masked tail) and
    /// 1024, many rows (rayon split) and one. Tolerance: abs err ≤ 1e-5 · max(1, |want|).
    #[test]
    fn fused_add_layer_norm_matches_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        for &(rows, dim) in &[(1, 384), (100, 384), (7, 37), (40, 1024), (3, 16)] {
            let x: Vec<f32> = (0..rows * dim)
                .map(|_| rng.random_range(-3.0f32..3.0) + 0.5)
                .collect();
            let d: Vec<f32> = (0..rows * dim)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let w: Vec<f32> = (0..dim).map(|_| rng.random_range(0.5f32..1.5)).collect();
            let b: Vec<f32> = (0..dim).map(|_| rng.random_range(-0.2f32..0.2)).collect();
            let mut scalar = x.clone();
            for (xr, dr) in scalar.chunks_exact_mut(dim).zip(d.chunks_exact(dim)) {
                row_scalar(xr, dr, &w, &b, 1e-12);
            }
            let mut got = x.clone();
            add_layer_norm(&mut got, &d, &w, &b, 1e-12);
            for r in 0..rows {
                let s: Vec<f64> = (0..dim)
                    .map(|c| f64::from(x[r * dim + c] + d[r * dim + c]))
                    .collect();
                let mean = s.iter().sum::<f64>() / dim as f64;
                let var = s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / dim as f64;
                for c in 0..dim {
                    let want =
                        (s[c] - mean) / (var + 1e-12).sqrt() * f64::from(w[c]) + f64::from(b[c]);
                    for (path, v) in [
                        ("dispatched", got[r * dim + c]),
                        ("scalar", scalar[r * dim + c]),
                    ] {
                        let e = (f64::from(v) - want).abs();
                        assert!(
                            e <= 1e-5 * want.abs().max(1.0),
                            "{path} rows={rows} dim={dim}: {e}"
                        );
                    }
                }
            }
        }
    }
}
