//! Per-channel symmetric int8 weights and their linear kernel.
//!
//! Layout: `q[n, k]` int8 (row-major, PyTorch `nn.Linear` order) and one f32 scale per output
//! row, `w[j, i] ≈ scale[j] * q[j, i]`, `scale[j] = max_i |w[j, i]| / 127`.
//! Key choices: activations stay f32 (only the weights are quantized, which keeps MiniLM's
//! cosine to the f32 model far above 0.999 without calibration); the scale is applied once per
//! output after the dot product. Few rows (GEMV, batch-1 decode of short inputs) run a
//! register-tiled AVX2/FMA kernel that widens int8 to f32 in registers and reads 4× fewer weight
//! bytes than f32; many rows widen the matrix into an f32 panel once per call and hand it to
//! the runtime's f32 GEMM (the widening costs `n*k` against the GEMM's `m*n*k`).

use rayon::prelude::*;

/// Rows of `x` at or above which [`linear_int8`] widens the weights and uses the f32 GEMM.
pub const GEMM_MIN_ROWS: usize = 16;

/// Quantize row-major `w[n, k]` per output row. Returns `(q, scales)`.
pub fn quantize_rows(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    let mut q = vec![0i8; n * k];
    let mut scales = vec![0f32; n];
    for (j, (row, qrow)) in w
        .chunks_exact(k)
        .zip(q.chunks_exact_mut(k))
        .enumerate()
        .take(n)
    {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
        scales[j] = scale;
        let inv = 1.0 / scale;
        for (d, &v) in qrow.iter_mut().zip(row) {
            *d = (v * inv).round().clamp(-127.0, 127.0) as i8;
        }
    }
    (q, scales)
}

/// Borrowed view of one int8 matrix.
#[derive(Clone, Copy, Debug)]
pub struct Int8View<'a> {
    pub q: &'a [i8],
    pub scales: &'a [f32],
    pub n: usize,
    pub k: usize,
}

/// Widen `view` to f32 (`scale * q`) into `out[n*k]`, in parallel over rows.
pub fn dequantize_into(view: Int8View<'_>, out: &mut [f32]) {
    let k = view.k;
    out.par_chunks_mut(k * 16)
        .zip(view.q.par_chunks(k * 16))
        .zip(view.scales.par_chunks(16))
        .for_each(|((o, q), s)| {
            for ((orow, qrow), &scale) in o.chunks_exact_mut(k).zip(q.chunks_exact(k)).zip(s) {
                for (d, &v) in orow.iter_mut().zip(qrow) {
                    *d = f32::from(v) * scale;
                }
            }
        });
}

/// `out[m, n] = x[m, k] · (scale ⊙ q)[n, k]^T + bias[n]`, `m = x.len() / k`.
///
/// `panel` is scratch for the many-rows path (at least `n*k` long when `m >= GEMM_MIN_ROWS`);
/// a shorter panel makes the call use the tiled kernel for every `m`.
pub fn linear_int8(
    x: &[f32],
    w: Int8View<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    panel: &mut [f32],
) {
    let (n, k) = (w.n, w.k);
    if k == 0 || n == 0 {
        return;
    }
    let m = x.len() / k;
    debug_assert_eq!(out.len(), m * n);
    if m >= GEMM_MIN_ROWS && panel.len() >= n * k {
        let panel = &mut panel[..n * k];
        dequantize_into(w, panel);
        favlo_runtime::cpu::linear(
            x,
            favlo_runtime::cpu::WeightRef::F32 { data: panel, n, k },
            bias,
            out,
        );
        return;
    }
    linear_int8_tiled(x, w, bias, out);
}

/// The register-tiled kernel, parallel over blocks of output columns.
pub fn linear_int8_tiled(x: &[f32], w: Int8View<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.n, w.k);
    let m = x.len() / k;
    const NB: usize = 32;
    let blocks: Vec<Vec<f32>> = (0..n.div_ceil(NB))
        .into_par_iter()
        .map(|b| {
            let j0 = b * NB;
            let j1 = (j0 + NB).min(n);
            let mut local = vec![0f32; m * (j1 - j0)];
            block(x, w, j0, j1, m, &mut local);
            local
        })
        .collect();
    for (b, local) in blocks.iter().enumerate() {
        let j0 = b * NB;
        let jb = local.len() / m.max(1);
        for i in 0..m {
            let dst = &mut out[i * n + j0..i * n + j0 + jb];
            dst.copy_from_slice(&local[i * jb..(i + 1) * jb]);
            if let Some(bias) = bias {
                for (d, &bv) in dst.iter_mut().zip(&bias[j0..j0 + jb]) {
                    *d += bv;
                }
            }
        }
    }
}

/// Columns `j0..j1` for all `m` rows into `local[m, j1-j0]` (scaled, no bias).
fn block(x: &[f32], w: Int8View<'_>, j0: usize, j1: usize, m: usize, local: &mut [f32]) {
    let k = w.k;
    let jb = j1 - j0;
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(4);
        let xs = &x[i * k..(i + rows) * k];
        for j in j0..j1 {
            let q = &w.q[j * k..(j + 1) * k];
            let mut acc = [0f32; 4];
            dot_rows(xs, q, k, rows, &mut acc);
            for (r, a) in acc.iter().enumerate().take(rows) {
                local[(i + r) * jb + (j - j0)] = a * w.scales[j];
            }
        }
        i += rows;
    }
}

/// `acc[r] = Σ_i xs[r*k + i] * q[i]` for `rows ≤ 4` rows.
fn dot_rows(xs: &[f32], q: &[i8], k: usize, rows: usize, acc: &mut [f32; 4]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected just above; slices are bounds-checked inside
            // via the lengths asserted by the caller's chunking (xs.len() == rows*k, q.len()==k).
            unsafe { avx2::dot_rows(xs, q, k, rows, acc) };
            return;
        }
    }
    dot_rows_scalar(xs, q, k, rows, acc);
}

fn dot_rows_scalar(xs: &[f32], q: &[i8], k: usize, rows: usize, acc: &mut [f32; 4]) {
    for (r, a) in acc.iter_mut().enumerate().take(rows) {
        let xr = &xs[r * k..(r + 1) * k];
        *a = xr.iter().zip(q).map(|(&a, &b)| a * f32::from(b)).sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// AVX2+FMA body of [`super::dot_rows`]: one weight vector widened per 8 columns and
    /// reused by up to 4 activation rows, two accumulators per row to hide FMA latency.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(xs: &[f32], q: &[i8], k: usize, rows: usize, acc: &mut [f32; 4]) {
        if xs.len() < rows * k || q.len() < k {
            return;
        }
        let k16 = k / 16 * 16;
        let mut a0 = [_mm256_setzero_ps(); 4];
        let mut a1 = [_mm256_setzero_ps(); 4];
        let qp = q.as_ptr();
        let xp = xs.as_ptr();
        let mut i = 0;
        while i < k16 {
            // SAFETY: i + 16 <= k <= q.len(); each row r reads xs[r*k + i .. r*k + i + 16] < rows*k.
            unsafe {
                let w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                    qp.add(i) as *const __m128i
                )));
                let w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                    qp.add(i + 8) as *const __m128i
                )));
                for r in 0..4 {
                    if r < rows {
                        let xr = xp.add(r * k + i);
                        a0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, a0[r]);
                        a1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr.add(8)), w1, a1[r]);
                    }
                }
            }
            i += 16;
        }
        for r in 0..rows.min(4) {
            let s = _mm256_add_ps(a0[r], a1[r]);
            let hi = _mm256_extractf128_ps(s, 1);
            let lo = _mm256_castps256_ps128(s);
            let s4 = _mm_add_ps(hi, lo);
            let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
            let mut total = _mm_cvtss_f32(s1);
            for c in k16..k {
                total += xs[r * k + c] * f32::from(q[c]);
            }
            acc[r] = total;
        }
    }
}

/// Scalar float64 references for the tests.
pub mod reference {
    /// `out[m, n] = x · (scale ⊙ q)^T + bias`, accumulated in f64.
    pub fn linear_int8(
        x: &[f32],
        q: &[i8],
        scales: &[f32],
        n: usize,
        k: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let m = x.len() / k;
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f64;
                for c in 0..k {
                    acc += f64::from(x[i * k + c]) * f64::from(q[j * k + c]);
                }
                let b = bias.map_or(0.0, |b| f64::from(b[j]));
                out[i * n + j] = (acc * f64::from(scales[j]) + b) as f32;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn rand_vec(rng: &mut rand::rngs::StdRng, len: usize) -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn max_rel(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    #[test]
    fn quantize_round_trips_within_half_a_step() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (n, k) = (7, 33);
        let w = rand_vec(&mut rng, n * k);
        let (q, s) = quantize_rows(&w, n, k);
        for j in 0..n {
            let amax = w[j * k..(j + 1) * k]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            assert!((s[j] - amax / 127.0).abs() < 1e-7);
            for c in 0..k {
                let back = f32::from(q[j * k + c]) * s[j];
                assert!((back - w[j * k + c]).abs() <= s[j] * 0.5 + 1e-6);
            }
        }
    }

    #[test]
    fn kernel_paths_match_f64_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for &(m, n, k) in &[
            (1, 45, 384),
            (3, 70, 37),
            (5, 64, 100),
            (20, 48, 130),
            (33, 96, 384),
        ] {
            let x = rand_vec(&mut rng, m * k);
            let w = rand_vec(&mut rng, n * k);
            let bias = rand_vec(&mut rng, n);
            let (q, scales) = quantize_rows(&w, n, k);
            let view = Int8View {
                q: &q,
                scales: &scales,
                n,
                k,
            };
            let mut want = vec![0f32; m * n];
            reference::linear_int8(&x, &q, &scales, n, k, Some(&bias), &mut want);
            let mut tiled = vec![0f32; m * n];
            linear_int8_tiled(&x, view, Some(&bias), &mut tiled);
            assert!(max_rel(&tiled, &want) < 1e-5, "tiled m={m} n={n} k={k}");
            let mut panel = vec![0f32; n * k];
            let mut got = vec![0f32; m * n];
            linear_int8(&x, view, Some(&bias), &mut got, &mut panel);
            assert!(max_rel(&got, &want) < 1e-5, "dispatch m={m} n={n} k={k}");
            let mut scalar = [0f32; 4];
            let rows = m.min(4);
            dot_rows_scalar(&x[..rows * k], &q[..k], k, rows, &mut scalar);
            let mut fast = [0f32; 4];
            dot_rows(&x[..rows * k], &q[..k], k, rows, &mut fast);
            assert!(max_rel(&fast[..rows], &scalar[..rows]) < 1e-5);
        }
    }
}
