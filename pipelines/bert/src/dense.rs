//! f32 linears on weights packed at load into contiguous column strips.
//!
//! Layout: `W^T` (`[k, n]`) cut into strips of [`STRIP`] = 48 columns (the width of the
//! runtime's AVX-512 `sgemm_nn` micro-tile), each stored as its own row-major `[k, 48]` block
//! (the last strip zero-padded), so one micro-tile's whole right operand is one sequential
//! stream (the hardware prefetcher follows it; a strided `[k, n]` walk reads 3 cache lines per
//! `n·4`-byte row). Key choices: many rows are split into row blocks (each task reads its
//! activation block from L2 and every strip once; outputs are disjoint row ranges); few rows
//! (batch 1, weights streamed from memory) are split over strips instead so every weight is
//! read once, each task writing a local `[m, strips·48]` block copied out afterwards.

use favlo_runtime::cpu::sgemm_nn;
use rayon::prelude::*;

/// Columns per packed strip.
pub const STRIP: usize = 48;

/// Floats of a packed `[n, k]` matrix (n padded up to whole strips).
pub fn packed_len(n: usize, k: usize) -> usize {
    n.div_ceil(STRIP) * STRIP * k
}

/// `W^T` packed as `[n.div_ceil(STRIP)][k][STRIP]`.
pub fn pack(w: &[f32], n: usize, k: usize) -> Vec<f32> {
    let strips = n.div_ceil(STRIP);
    let mut p = vec![0f32; strips * k * STRIP];
    for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
        let (s, jj) = (j / STRIP, j % STRIP);
        let base = s * k * STRIP + jj;
        for (c, &v) in row.iter().enumerate() {
            p[base + c * STRIP] = v;
        }
    }
    p
}

/// `out[m, n] = x[m, k] · W^T` with `packed` from [`pack`]; `m = x.len() / k`.
pub fn gemm_packed(x: &[f32], packed: &[f32], n: usize, k: usize, out: &mut [f32]) {
    if n == 0 || k == 0 {
        return;
    }
    let m = x.len() / k;
    let strips = n.div_ceil(STRIP);
    if packed.len() < strips * k * STRIP || out.len() < m * n || m == 0 {
        debug_assert!(m == 0, "gemm_packed: short operand");
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    let strip = |s: usize| &packed[s * k * STRIP..(s + 1) * k * STRIP];
    let width = |s: usize| STRIP.min(n - s * STRIP);
    if threads == 1 || m >= 64 * threads {
        // Row blocks: at least 4 tasks per thread, 8..=128 rows each.
        let rb = (m.div_ceil(4 * threads).div_ceil(8) * 8).clamp(8, 128);
        out[..m * n]
            .par_chunks_mut(rb * n)
            .zip(x[..m * k].par_chunks(rb * k))
            .for_each(|(o, xb)| {
                let mr = xb.len() / k;
                for s in 0..strips {
                    sgemm_nn(
                        mr,
                        width(s),
                        k,
                        xb,
                        k,
                        strip(s),
                        STRIP,
                        &mut o[s * STRIP..],
                        n,
                    );
                }
            });
        return;
    }
    // Strip groups: every weight read once; local outputs copied into place.
    let per = strips.div_ceil(2 * threads).max(1);
    let groups = strips.div_ceil(per);
    let locals: Vec<(usize, usize, Vec<f32>)> = (0..groups)
        .into_par_iter()
        .map(|g| {
            let (s0, s1) = (g * per, ((g + 1) * per).min(strips));
            let cols: usize = (s0..s1).map(width).sum();
            let mut local = vec![0f32; m * cols];
            let mut c0 = 0;
            for s in s0..s1 {
                sgemm_nn(
                    m,
                    width(s),
                    k,
                    x,
                    k,
                    strip(s),
                    STRIP,
                    &mut local[c0..],
                    cols,
                );
                c0 += width(s);
            }
            (s0 * STRIP, cols, local)
        })
        .collect();
    for (j0, cols, local) in locals {
        for (orow, lrow) in out.chunks_exact_mut(n).zip(local.chunks_exact(cols)) {
            orow[j0..j0 + cols].copy_from_slice(lrow);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn packed_gemm_matches_f64_on_both_splits() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for &(m, k, n) in &[(1, 37, 50), (10, 64, 144), (130, 40, 100), (300, 33, 48)] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let packed = pack(&w, n, k);
            for threads in [1, 2] {
                let mut got = vec![0f32; m * n];
                if threads == 1 {
                    gemm_packed(&x, &packed, n, k, &mut got);
                } else {
                    pool.install(|| gemm_packed(&x, &packed, n, k, &mut got));
                }
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|c| f64::from(x[i * k + c]) * f64::from(w[j * k + c]))
                            .sum();
                        let e = (f64::from(got[i * n + j]) - want).abs();
                        assert!(
                            e <= 1e-5 * (k as f64).sqrt(),
                            "m={m} k={k} n={n} t={threads}"
                        );
                    }
                }
            }
        }
    }
}
