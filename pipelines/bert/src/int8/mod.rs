//! Group-wise symmetric int8 weights and their linear kernels.
//!
//! Layout: `q[n, k]` int8 (row-major, PyTorch `nn.Linear` order) and one f32 scale per output row
//! and group of `group` input columns, `scales[n, G]` with `G = ceil(k / group)` (the last group
//! is shorter when `group` does not divide `k`):
//! `w[j, c] ≈ scales[j, c / group] * q[j, c]`, `scales[j, g] = max |w[j, g·group ..]| / 127`.
//! The old per-output-row format is the special case `group = k` (`G = 1`).
//!
//! Key choices: activations stay f32 (weight-only quantization, no calibration). Per-row scales
//! leave the worst MiniLM sentence at cosine 0.9956 to f32; groups of [`GROUP`] = 64 columns
//! bring every one of the 64 test sentences above 0.999 for 1/16 more scale bytes. Few rows
//! (GEMV, batch 1) run a register-tiled AVX2/FMA kernel ([`tiled`]) that sums each group in f32
//! registers and folds it into the total with one FMA by its scale; many rows widen the matrix
//! into an f32 panel in the f32 linears' packed-strip layout once per call (group scales
//! applied while widening) and run the same packed GEMM ([`crate::dense`]; the widening costs
//! `n*k` against the GEMM's `m*n*k`).

mod tiled;

use rayon::prelude::*;

pub use tiled::linear_int8_tiled;

/// Rows of `x` at or above which [`linear_int8`] widens the weights and uses the f32 GEMM.
pub const GEMM_MIN_ROWS: usize = 16;

/// Input columns per scale that Favlo writes and quantizes to at load.
pub const GROUP: usize = 64;

/// Quantize row-major `w[n, k]` with one scale per output row and group of `group` columns.
/// Returns `(q[n*k], scales[n*G])`, `G = ceil(k / group)`; `group` 0 or ≥ `k` is per row.
pub fn quantize_groups(w: &[f32], n: usize, k: usize, group: usize) -> (Vec<i8>, Vec<f32>) {
    let group = effective_group(k, group);
    let groups = k.div_ceil(group);
    let mut q = vec![0i8; n * k];
    let mut scales = vec![0f32; n * groups];
    if k == 0 {
        return (q, scales);
    }
    for ((row, qrow), srow) in w
        .chunks_exact(k)
        .zip(q.chunks_exact_mut(k))
        .zip(scales.chunks_exact_mut(groups))
        .take(n)
    {
        for ((part, qpart), s) in row.chunks(group).zip(qrow.chunks_mut(group)).zip(srow) {
            let amax = part.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
            *s = scale;
            let inv = 1.0 / scale;
            for (d, &v) in qpart.iter_mut().zip(part) {
                *d = (v * inv).round().clamp(-127.0, 127.0) as i8;
            }
        }
    }
    (q, scales)
}

/// The old format: one scale per output row (`quantize_groups` with `group = k`).
pub fn quantize_rows(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    quantize_groups(w, n, k, k)
}

/// `group` clamped to `1..=k` (0 means one group per row).
pub fn effective_group(k: usize, group: usize) -> usize {
    if group == 0 || group >= k {
        k.max(1)
    } else {
        group
    }
}

/// Borrowed view of one int8 matrix.
#[derive(Clone, Copy, Debug)]
pub struct Int8View<'a> {
    /// `q[n, k]`.
    pub q: &'a [i8],
    /// `scales[n, groups()]`.
    pub scales: &'a [f32],
    pub n: usize,
    pub k: usize,
    /// Input columns per scale (`k` for the per-row format).
    pub group: usize,
}

impl Int8View<'_> {
    /// Scales per output row.
    pub fn groups(&self) -> usize {
        self.k.div_ceil(self.group.max(1))
    }

    /// Whether the slice lengths agree with `n`, `k` and `group`.
    pub fn is_consistent(&self) -> bool {
        self.group >= 1
            && self.q.len() == self.n * self.k
            && self.scales.len() == self.n * self.groups()
    }
}

/// Widen `view` to f32 in the packed-strip layout of [`crate::dense::pack`]
/// (`out[s][c][jj] = scale[j, c/group] * q[j, c]`, `j = 48s + jj`; `out` at least
/// [`crate::dense::packed_len`] long; padding columns are zeroed), in parallel over strips.
pub fn dequantize_packed_into(view: Int8View<'_>, out: &mut [f32]) {
    use crate::dense::STRIP;
    let (n, k, g, groups) = (view.n, view.k, view.group.max(1), view.groups());
    out.par_chunks_mut(k * STRIP)
        .take(n.div_ceil(STRIP))
        .enumerate()
        .for_each(|(s, o)| {
            o.fill(0.0);
            for jj in 0..STRIP.min(n - s * STRIP) {
                let j = s * STRIP + jj;
                let qrow = &view.q[j * k..(j + 1) * k];
                let srow = &view.scales[j * groups..(j + 1) * groups];
                for (c, &v) in qrow.iter().enumerate() {
                    o[c * STRIP + jj] = f32::from(v) * srow[c / g];
                }
            }
        });
}

/// Widen `view` to f32 (`scale[j, c/group] * q[j, c]`) into `out[n*k]`, in parallel over rows.
pub fn dequantize_into(view: Int8View<'_>, out: &mut [f32]) {
    let (k, g, groups) = (view.k, view.group.max(1), view.groups());
    const ROWS: usize = 16;
    out.par_chunks_mut(k * ROWS)
        .zip(view.q.par_chunks(k * ROWS))
        .zip(view.scales.par_chunks(groups * ROWS))
        .for_each(|((o, q), s)| {
            for ((orow, qrow), srow) in o
                .chunks_exact_mut(k)
                .zip(q.chunks_exact(k))
                .zip(s.chunks_exact(groups))
            {
                for ((opart, qpart), &scale) in orow.chunks_mut(g).zip(qrow.chunks(g)).zip(srow) {
                    for (d, &v) in opart.iter_mut().zip(qpart) {
                        *d = f32::from(v) * scale;
                    }
                }
            }
        });
}

/// `out[m, n] = x[m, k] · W[n, k]^T + bias[n]` with `W` dequantized from `w`, `m = x.len() / k`.
///
/// `panel` is scratch for the many-rows path (at least [`crate::dense::packed_len`]`(n, k)`
/// long when `m >= GEMM_MIN_ROWS`);
/// a shorter panel makes the call use the tiled kernel for every `m`. An inconsistent view
/// (lengths that disagree with its shape) leaves `out` untouched.
pub fn linear_int8(
    x: &[f32],
    w: Int8View<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    panel: &mut [f32],
) {
    let (n, k) = (w.n, w.k);
    if k == 0 || n == 0 || !w.is_consistent() {
        return;
    }
    let m = x.len() / k;
    debug_assert_eq!(out.len(), m * n);
    let plen = crate::dense::packed_len(n, k);
    if m >= GEMM_MIN_ROWS && panel.len() >= plen {
        let panel = &mut panel[..plen];
        dequantize_packed_into(w, panel);
        crate::dense::gemm_packed(&x[..m * k], panel, n, k, &mut out[..m * n]);
        if let Some(bias) = bias {
            for row in out.chunks_exact_mut(n) {
                for (o, b) in row.iter_mut().zip(bias) {
                    *o += *b;
                }
            }
        }
        return;
    }
    linear_int8_tiled(x, w, bias, out);
}

/// Scalar float64 references for the tests.
pub mod reference {
    use super::Int8View;

    /// `out[m, n] = x · W^T + bias`, `W[j, c] = scales[j, c/group] · q[j, c]`, each group's dot
    /// product and the sum over groups accumulated in f64.
    pub fn linear_int8(x: &[f32], w: Int8View<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
        let (n, k, g) = (w.n, w.k, w.group.max(1));
        let groups = w.groups();
        let m = x.len() / k;
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f64;
                for gi in 0..groups {
                    let mut part = 0f64;
                    for c in gi * g..((gi + 1) * g).min(k) {
                        part += f64::from(x[i * k + c]) * f64::from(w.q[j * k + c]);
                    }
                    acc += part * f64::from(w.scales[j * groups + gi]);
                }
                let b = bias.map_or(0.0, |b| f64::from(b[j]));
                out[i * n + j] = (acc + b) as f32;
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
    fn group_quantization_round_trips_within_half_a_step() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for &(n, k, group) in &[(7, 33, 33), (5, 150, 64), (3, 128, 64), (4, 40, 16)] {
            // Columns of very different magnitude so that group scales differ from row scales.
            let mut w = rand_vec(&mut rng, n * k);
            for (c, v) in w.iter_mut().enumerate() {
                *v *= 1.0 + (c % k) as f32 * 0.1;
            }
            let (q, s) = quantize_groups(&w, n, k, group);
            let groups = k.div_ceil(group);
            assert_eq!(s.len(), n * groups);
            for j in 0..n {
                for g in 0..groups {
                    let cols = g * group..((g + 1) * group).min(k);
                    let amax = w[j * k + cols.start..j * k + cols.end]
                        .iter()
                        .fold(0f32, |m, v| m.max(v.abs()));
                    let scale = s[j * groups + g];
                    assert!((scale - amax / 127.0).abs() <= 1e-7 * amax.max(1.0));
                    for c in cols {
                        let back = f32::from(q[j * k + c]) * scale;
                        assert!((back - w[j * k + c]).abs() <= scale * 0.5 + 1e-6);
                    }
                }
            }
        }
        // Per-row is the single-group case.
        let w = rand_vec(&mut rng, 3 * 20);
        assert_eq!(quantize_rows(&w, 3, 20), quantize_groups(&w, 3, 20, 0));
    }

    #[test]
    fn kernel_paths_match_f64_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for &(m, n, k, group) in &[
            (1, 45, 384, 64),
            (1, 45, 384, 384),
            (3, 70, 37, 64),
            (2, 33, 100, 64),
            (5, 64, 100, 32),
            (4, 17, 150, 64),
            (20, 48, 130, 64),
            (20, 48, 130, 130),
            (33, 96, 384, 64),
            (17, 40, 1536, 64),
        ] {
            let x = rand_vec(&mut rng, m * k);
            let mut w = rand_vec(&mut rng, n * k);
            for (c, v) in w.iter_mut().enumerate() {
                *v *= 0.2 + ((c % k) / 16) as f32;
            }
            let bias = rand_vec(&mut rng, n);
            let (q, scales) = quantize_groups(&w, n, k, group);
            let view = Int8View {
                q: &q,
                scales: &scales,
                n,
                k,
                group: effective_group(k, group),
            };
            assert!(view.is_consistent());
            let mut want = vec![0f32; m * n];
            reference::linear_int8(&x, view, Some(&bias), &mut want);
            let mut tiled = vec![0f32; m * n];
            linear_int8_tiled(&x, view, Some(&bias), &mut tiled);
            let e = max_rel(&tiled, &want);
            assert!(e < 1e-5, "tiled m={m} n={n} k={k} g={group}: {e}");
            let mut panel = vec![0f32; crate::dense::packed_len(n, k)];
            let mut got = vec![0f32; m * n];
            linear_int8(&x, view, Some(&bias), &mut got, &mut panel);
            let e = max_rel(&got, &want);
            assert!(e < 1e-5, "dispatch m={m} n={n} k={k} g={group}: {e}");
            // The widened panels are exactly scale * q.
            let mut wide = vec![0f32; n * k];
            dequantize_into(view, &mut wide);
            let mut packed = vec![f32::NAN; crate::dense::packed_len(n, k)];
            dequantize_packed_into(view, &mut packed);
            assert_eq!(packed, crate::dense::pack(&wide, n, k));
            let g = view.group;
            for j in 0..n {
                for c in 0..k {
                    let s = scales[j * view.groups() + c / g];
                    assert_eq!(wide[j * k + c], f32::from(q[j * k + c]) * s);
                }
            }
            tiled::check_scalar_matches_simd(&x, view, m);
        }
    }

    #[test]
    fn groups_beat_rows_on_outlier_columns() {
        // A weight with one large column: per-row scales flatten the rest, groups do not.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (n, k) = (8, 256);
        let mut w = rand_vec(&mut rng, n * k);
        for j in 0..n {
            w[j * k + 5] = 40.0;
        }
        let err = |group: usize| {
            let (q, s) = quantize_groups(&w, n, k, group);
            let groups = k.div_ceil(effective_group(k, group));
            let g = effective_group(k, group);
            let mut e = 0f64;
            for j in 0..n {
                for c in 0..k {
                    let back = f32::from(q[j * k + c]) * s[j * groups + c / g];
                    e += f64::from(back - w[j * k + c]).powi(2);
                }
            }
            e
        };
        // Three of the four groups lose the outlier: their error all but vanishes.
        assert!(err(64) * 3.0 < err(0), "{} vs {}", err(64), err(0));
    }
}
