//! `linear`: y[m,n] = x[m,k] · W[n,k]^T (+ bias), for f32 / bf16 / f16 / MX weights.
//!
//! Key design choice: two regimes. For few rows (m ≤ [`GEMV_MAX_M`], decode) a GEMV
//! register kernel streams each weight row once and dots it against up to 4 x rows
//! while it is in registers (MX blocks decoded in registers, never materialized).
//! For more rows (prefill) the matrix is converted in small per-thread row tiles and
//! multiplied with the `gemm` crate; f32 weights go to `gemm` directly.

mod dense;
mod gemv;
mod mx;
mod tiled;

pub(crate) use mx::mx_row_to_f32;

use super::weight::WeightRef;

/// Up to this many x rows use the GEMV kernels; more use tiles + gemm.
pub const GEMV_MAX_M: usize = 8;

/// A raw pointer that may be shared between rayon tasks writing disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(pub *mut f32);
// SAFETY: users only write disjoint index sets from different tasks.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// The pointer (a method, so closures capture the whole Sync wrapper).
    #[inline]
    pub(crate) fn ptr(&self) -> *mut f32 {
        self.0
    }
}

/// y[m,n] = x[m,k] · W[n,k]^T (+ bias[n]); `m = x.len() / k`, `out.len() == m * n`.
pub fn linear(x: &[f32], w: WeightRef<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.n(), w.k());
    debug_assert!(w.is_consistent(), "linear: weight storage shorter than n*k");
    if n == 0 || !w.is_consistent() {
        return;
    }
    if k == 0 {
        for row in out.chunks_mut(n) {
            for (j, o) in row.iter_mut().enumerate() {
                *o = bias.and_then(|b| b.get(j)).copied().unwrap_or(0.0);
            }
        }
        return;
    }
    let m = x.len() / k;
    debug_assert_eq!(x.len(), m * k, "linear: x.len() not a multiple of k");
    debug_assert_eq!(out.len(), m * n, "linear: out.len() != m*n");
    let m = m.min(out.len() / n);
    if m == 0 {
        return;
    }
    let (x, out) = (&x[..m * k], &mut out[..m * n]);
    match w {
        WeightRef::F32 { data, .. } if m > GEMV_MAX_M => {
            super::matmul::gemm_nt(x, &data[..n * k], out, m, k, n);
        }
        _ if m > GEMV_MAX_M => tiled::linear_tiled(x, &w, out, m),
        _ => gemv::linear_gemv(x, &w, out, m),
    }
    if let Some(b) = bias {
        debug_assert_eq!(b.len(), n, "linear: bias.len() != n");
        for row in out.chunks_exact_mut(n) {
            for (o, bi) in row.iter_mut().zip(b) {
                *o += *bi;
            }
        }
    }
}
