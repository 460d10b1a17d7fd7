//! The GEMV driver: splits output rows over rayon tasks and, inside a task, walks small
//! row tiles so that a tile read once from memory serves every group of ≤ 4 x rows.
//!
//! Key design choice: the per-row kernels (dense / MX) return up to 4 dot products at
//! once; this file only schedules them.

use super::SyncPtr;
use super::{dense, mx};
use crate::cpu::simd::{Isa, isa};
use crate::cpu::weight::WeightRef;
use rayon::prelude::*;

/// Rows per inner tile: small enough that the tile stays in L2 between x-row groups.
const TILE_ROWS: usize = 8;

/// What one weight row is dotted with: per x row, the prepared x slice.
pub(super) enum Prepared {
    Dense,
    Mx(mx::MxPrep),
}

pub(super) fn linear_gemv(x: &[f32], w: &WeightRef<'_>, out: &mut [f32], m: usize) {
    let (n, k) = (w.n(), w.k());
    let isa = isa();
    let prep = match w {
        WeightRef::Mx(v) => Prepared::Mx(mx::MxPrep::new(x, m, v, isa)),
        _ => Prepared::Dense,
    };
    let xs: Vec<&[f32]> = match &prep {
        Prepared::Dense => x.chunks_exact(k).collect(),
        Prepared::Mx(p) => p.rows().collect(),
    };
    let threads = rayon::current_num_threads().max(1);
    let work = n * k * m.max(1);
    let chunk = if work < (1 << 17) || threads == 1 {
        n
    } else {
        n.div_ceil(threads * 8).max(TILE_ROWS)
    };
    let optr = SyncPtr(out.as_mut_ptr());
    let run = |r0: usize| {
        let r1 = (r0 + chunk).min(n);
        let mut t0 = r0;
        while t0 < r1 {
            let t1 = (t0 + TILE_ROWS).min(r1);
            for (g, group) in xs.chunks(4).enumerate() {
                let mut buf = [0f32; 4 * TILE_ROWS];
                tile_dots(isa, w, t0, t1, group, &mut buf);
                let gl = group.len();
                for (i, r) in (t0..t1).enumerate() {
                    for j in 0..gl {
                        let idx = (g * 4 + j) * n + r;
                        // SAFETY: idx < m*n == out.len(); row r belongs to this task only.
                        unsafe { *optr.ptr().add(idx) = buf[i * gl + j] };
                    }
                }
            }
            t0 = t1;
        }
    };
    if chunk >= n {
        run(0);
    } else {
        (0..n.div_ceil(chunk))
            .into_par_iter()
            .for_each(|c| run(c * chunk));
    }
}

/// Dot products of weight rows t0..t1 with the x rows of `xs` (≤ 4):
/// `buf[(r - t0) * xs.len() + j]`.
fn tile_dots(isa: Isa, w: &WeightRef<'_>, t0: usize, t1: usize, xs: &[&[f32]], buf: &mut [f32]) {
    if let WeightRef::Mx(v) = w {
        match xs.len() {
            1 => mx::rows_dots::<1>(isa, v, t0, t1, [xs[0]], buf),
            2 => mx::rows_dots::<2>(isa, v, t0, t1, [xs[0], xs[1]], buf),
            3 => mx::rows_dots::<3>(isa, v, t0, t1, [xs[0], xs[1], xs[2]], buf),
            _ => mx::rows_dots::<4>(isa, v, t0, t1, [xs[0], xs[1], xs[2], xs[3]], buf),
        }
        return;
    }
    let gl = xs.len();
    for (i, r) in (t0..t1).enumerate() {
        let sums = dense_row(isa, w, r, xs);
        buf[i * gl..(i + 1) * gl].copy_from_slice(&sums[..gl]);
    }
}

fn dense_row(isa: Isa, w: &WeightRef<'_>, r: usize, xs: &[&[f32]]) -> [f32; 4] {
    macro_rules! by_m {
        ($row:expr) => {
            match xs.len() {
                1 => pad(dense::row_dots::<1>(isa, $row, [xs[0]])),
                2 => pad(dense::row_dots::<2>(isa, $row, [xs[0], xs[1]])),
                3 => pad(dense::row_dots::<3>(isa, $row, [xs[0], xs[1], xs[2]])),
                _ => dense::row_dots::<4>(isa, $row, [xs[0], xs[1], xs[2], xs[3]]),
            }
        };
    }
    let k = w.k();
    match w {
        WeightRef::F32 { data, .. } => by_m!(dense::Row::F32(&data[r * k..(r + 1) * k])),
        WeightRef::Bf16 { data, .. } => by_m!(dense::Row::Bf16(&data[r * k..(r + 1) * k])),
        WeightRef::F16 { data, .. } => by_m!(dense::Row::F16(&data[r * k..(r + 1) * k])),
        WeightRef::Mx(_) => [0.0; 4],
    }
}

fn pad<const M: usize>(s: [f32; M]) -> [f32; 4] {
    let mut o = [0f32; 4];
    o[..M].copy_from_slice(&s);
    o
}
