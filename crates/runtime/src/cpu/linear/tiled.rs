//! Many-row `linear` (prefill): convert the weight in row tiles into a per-thread f32
//! scratch and multiply each tile with the `gemm` crate.
//!
//! Key design choice: a tile is `TILE_N` weight rows, so the scratch stays small
//! (never a full f32 copy of the matrix) and tiles are spread over rayon tasks.

use super::SyncPtr;
use crate::cpu::weight::WeightRef;
use rayon::prelude::*;
use std::cell::RefCell;

const TILE_N: usize = 64;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn linear_tiled(x: &[f32], w: &WeightRef<'_>, out: &mut [f32], m: usize) {
    let (n, k) = (w.n(), w.k());
    let threads = rayon::current_num_threads().max(1);
    let tile = TILE_N.min(n.div_ceil(threads)).max(1);
    let optr = SyncPtr(out.as_mut_ptr());
    let run = |t: usize| {
        let r0 = t * tile;
        let r1 = (r0 + tile).min(n);
        let tn = r1 - r0;
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < tn * k {
                s.resize(tn * k, 0.0);
            }
            for (i, r) in (r0..r1).enumerate() {
                w.row_to_f32(r, &mut s[i * k..(i + 1) * k]);
            }
            let o = optr;
            // SAFETY: dst covers rows 0..m, columns r0..r1 of out (row stride n), which
            // only this task writes; lhs is x [m,k]; rhs(kk, j) = tile[j*k + kk].
            unsafe {
                gemm::gemm(
                    m,
                    tn,
                    k,
                    o.ptr().add(r0),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    s.as_ptr(),
                    k as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        });
    };
    (0..n.div_ceil(tile)).into_par_iter().for_each(run);
}
