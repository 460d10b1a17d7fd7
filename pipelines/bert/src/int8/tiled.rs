//! The few-rows int8 kernel: register-tiled, parallel over blocks of output columns.
//!
//! Key choice: each weight row is read once per 4 activation rows; int8 is widened to f32 in
//! registers, every group of columns is summed in its own f32 accumulators and folded into the
//! row total with one FMA by the group's scale, so the group scales cost one FMA per 64 columns.

use rayon::prelude::*;

use super::Int8View;

/// `out[m, n] = x[m, k] · W[n, k]^T + bias[n]` for any `m` (the GEMV path of [`super::linear_int8`]).
pub fn linear_int8_tiled(x: &[f32], w: Int8View<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.n, w.k);
    if n == 0 || k == 0 || !w.is_consistent() {
        return;
    }
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
    let (k, groups) = (w.k, w.groups());
    let jb = j1 - j0;
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(4);
        let xs = &x[i * k..(i + rows) * k];
        for j in j0..j1 {
            let q = &w.q[j * k..(j + 1) * k];
            let s = &w.scales[j * groups..(j + 1) * groups];
            let mut acc = [0f32; 4];
            dot_rows(xs, q, s, k, w.group, rows, &mut acc);
            for (r, a) in acc.iter().enumerate().take(rows) {
                local[(i + r) * jb + (j - j0)] = *a;
            }
        }
        i += rows;
    }
}

/// `acc[r] = Σ_g s[g] · Σ_{c in group g} xs[r*k + c] · q[c]` for `rows ≤ 4` rows.
fn dot_rows(
    xs: &[f32],
    q: &[i8],
    s: &[f32],
    k: usize,
    group: usize,
    rows: usize,
    acc: &mut [f32; 4],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected just above; the kernel checks the slice
            // lengths against `rows`, `k` and `group` before reading.
            unsafe { avx2::dot_rows(xs, q, s, k, group, rows, acc) };
            return;
        }
    }
    dot_rows_scalar(xs, q, s, k, group, rows, acc);
}

fn dot_rows_scalar(
    xs: &[f32],
    q: &[i8],
    s: &[f32],
    k: usize,
    group: usize,
    rows: usize,
    acc: &mut [f32; 4],
) {
    let g = group.max(1);
    for (r, a) in acc.iter_mut().enumerate().take(rows) {
        let xr = &xs[r * k..(r + 1) * k];
        *a = xr
            .chunks(g)
            .zip(q.chunks(g))
            .zip(s)
            .map(|((xp, qp), &scale)| {
                scale
                    * xp.iter()
                        .zip(qp)
                        .map(|(&a, &b)| a * f32::from(b))
                        .sum::<f32>()
            })
            .sum();
    }
}

/// Test hook: the SIMD and scalar dot products agree on the first rows of `x`.
#[cfg(test)]
pub(super) fn check_scalar_matches_simd(x: &[f32], w: Int8View<'_>, m: usize) {
    let (k, groups) = (w.k, w.groups());
    let rows = m.min(4);
    for j in [0, w.n - 1] {
        let q = &w.q[j * k..(j + 1) * k];
        let s = &w.scales[j * groups..(j + 1) * groups];
        let mut scalar = [0f32; 4];
        dot_rows_scalar(&x[..rows * k], q, s, k, w.group, rows, &mut scalar);
        let mut fast = [0f32; 4];
        dot_rows(&x[..rows * k], q, s, k, w.group, rows, &mut fast);
        for r in 0..rows {
            let tol = 1e-5 * scalar[r].abs().max(1.0);
            assert!(
                (fast[r] - scalar[r]).abs() <= tol,
                "row {r}: {} vs {}",
                fast[r],
                scalar[r]
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(v, 1);
        let lo = _mm256_castps256_ps128(v);
        let s4 = _mm_add_ps(hi, lo);
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        _mm_cvtss_f32(s1)
    }

    /// AVX2+FMA body of [`super::dot_rows`]: one weight vector widened per 8 columns and
    /// reused by up to 4 activation rows, two accumulators per row and group to hide FMA
    /// latency, one FMA per row to add the scaled group sum to the row's total.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(
        xs: &[f32],
        q: &[i8],
        s: &[f32],
        k: usize,
        group: usize,
        rows: usize,
        acc: &mut [f32; 4],
    ) {
        let g = group.max(1);
        let rows = rows.min(4);
        if xs.len() < rows * k || q.len() < k || s.len() < k.div_ceil(g) {
            return;
        }
        let mut total = [_mm256_setzero_ps(); 4];
        let mut tail = [0f32; 4];
        let qp = q.as_ptr();
        let xp = xs.as_ptr();
        for (gi, &scale) in s.iter().enumerate().take(k.div_ceil(g)) {
            let c0 = gi * g;
            let c1 = (c0 + g).min(k);
            let v1 = c0 + (c1 - c0) / 16 * 16;
            let mut a0 = [_mm256_setzero_ps(); 4];
            let mut a1 = [_mm256_setzero_ps(); 4];
            let mut i = c0;
            while i < v1 {
                // SAFETY: i + 16 <= c1 <= k <= q.len(); row r reads xs[r*k + i .. r*k + i + 16],
                // inside xs because r < rows and xs.len() >= rows*k.
                unsafe {
                    let w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        qp.add(i) as *const __m128i
                    )));
                    let w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        qp.add(i + 8) as *const __m128i,
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
            let sv = _mm256_set1_ps(scale);
            for r in 0..rows {
                total[r] = _mm256_fmadd_ps(_mm256_add_ps(a0[r], a1[r]), sv, total[r]);
                let mut part = 0f32;
                for c in v1..c1 {
                    part += xs[r * k + c] * f32::from(q[c]);
                }
                tail[r] += part * scale;
            }
        }
        for r in 0..rows {
            acc[r] = hsum(total[r]) + tail[r];
        }
    }
}
