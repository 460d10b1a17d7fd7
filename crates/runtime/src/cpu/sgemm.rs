//! Row-major f32 GEMM `C = A·B` for the convolution kernels, with an AVX-512
//! register-blocked micro-kernel (8 rows × 48 columns of C in 24 zmm
//! accumulators, A broadcast, B streamed as contiguous vectors).
//!
//! Key design choice: the `gemm` crate only reaches AVX2 on stable Rust, which
//! halves the FLOP rate on AVX-512 machines, and convolution products are
//! always "small M, long contiguous N" (`[Cout, Cin·K] · [Cin·K, T]`), the
//! shape a plain outer-product kernel handles at near peak without packing.
//! So: AVX-512 here (masked tails, no packing, single-threaded: callers split
//! N over their own workers); any other ISA falls back to `gemm`.

use super::simd::{Isa, isa};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of C per micro-tile.
const MR: usize = 8;
/// Columns of C per micro-tile (three 16-lane vectors).
const NR: usize = 48;

/// `c[i·ldc + j] = Σ_p a[i·lda + p] · b[p·ldb + j]` for `i < m`, `j < n`
/// (overwrites C). Single-threaded. Shapes are the caller's contract: a short
/// operand trips a debug assertion and returns without writing.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_nn(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let need = |rows: usize, ld: usize, cols: usize| (rows - 1) * ld + cols;
    let ok = lda >= k
        && ldb >= n
        && ldc >= n
        && (k == 0 || (a.len() >= need(m, lda, k) && b.len() >= need(k, ldb, n)))
        && c.len() >= need(m, ldc, n);
    debug_assert!(ok, "sgemm_nn: short operand");
    if !ok {
        return;
    }
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(0.0);
        }
        return;
    }
    // SAFETY: bounds checked above; `c` is borrowed mutably for the call.
    unsafe {
        sgemm_nn_raw(
            m,
            n,
            k,
            a,
            lda,
            b,
            ldb,
            c.as_mut_ptr(),
            ldc,
            std::ptr::null(),
        )
    }
}

/// [`sgemm_nn`] with the columns of C split over rayon workers when the
/// product is large (each worker a contiguous block of whole micro-tiles, so the
/// result does not depend on the thread count).
#[allow(clippy::too_many_arguments)]
pub fn sgemm_nn_par(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    sgemm_nn_par_init(m, n, k, a, lda, b, ldb, c, ldc, None);
}

/// [`sgemm_nn_par`] with C started from `init` (same layout as C) when given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_nn_par_init(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    init: Option<&[f32]>,
) {
    if m == 0 || n == 0 || k == 0 {
        if init.is_none() {
            sgemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
        } else if let Some(i) = init {
            let len = c.len().min(i.len());
            c[..len].copy_from_slice(&i[..len]);
        }
        return;
    }
    let need = |rows: usize, ld: usize, cols: usize| (rows - 1) * ld + cols;
    let ok = lda >= k
        && ldb >= n
        && ldc >= n
        && a.len() >= need(m, lda, k)
        && b.len() >= need(k, ldb, n)
        && c.len() >= need(m, ldc, n)
        && init.is_none_or(|i| i.len() >= need(m, ldc, n));
    debug_assert!(ok, "sgemm_nn_par: short operand");
    if !ok {
        return;
    }
    let threads = rayon::current_num_threads();
    let blocks = if threads <= 1 || m * n * k < (1 << 18) || n < 2 * NR {
        1
    } else {
        threads * 4
    };
    let block = n.div_ceil(blocks).div_ceil(NR) * NR;
    let blocks = n.div_ceil(block);
    let dst = super::linear::SyncPtr(c.as_mut_ptr());
    let ip = init.map_or(std::ptr::null(), <[f32]>::as_ptr);
    let ip = super::linear::SyncPtr(ip as *mut f32);
    let run = |bi: usize| {
        let j0 = bi * block;
        let w = block.min(n - j0);
        // SAFETY: bounds checked above; block bi writes only columns j0..j0+w
        // of C, disjoint from every other block; init is only read.
        unsafe {
            let i = if ip.ptr().is_null() {
                std::ptr::null()
            } else {
                ip.ptr().add(j0) as *const f32
            };
            sgemm_nn_raw(m, w, k, a, lda, &b[j0..], ldb, dst.ptr().add(j0), ldc, i)
        }
    };
    if blocks > 1 {
        use rayon::prelude::*;
        (0..blocks).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// [`sgemm_nn`] writing through a raw pointer, for callers that split one
/// output among threads by columns; when `init` is not null, C starts from
/// `init` (same layout as C, e.g. a residual) instead of zero: `C = I + A·B`.
///
/// # Safety
/// `c` must be valid for writes at `i·ldc + j` for `i < m`, `j < n`, and no
/// other thread may access those elements during the call; `init`, when not
/// null, valid for reads at the same offsets; `a` and `b` must satisfy
/// `sgemm_nn`'s bounds (`lda ≥ k`, `ldb ≥ n`, `k > 0`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm_nn_raw(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    init: *const f32,
) {
    match isa() {
        // SAFETY: AVX-512 detected at run time; the caller's bounds.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::sgemm(m, n, k, a, lda, b, ldb, c, ldc, init) },
        _ => {
            // SAFETY: the caller's bounds; strides describe the row-major operands.
            unsafe {
                if !init.is_null() {
                    for i in 0..m {
                        std::ptr::copy_nonoverlapping(init.add(i * ldc), c.add(i * ldc), n);
                    }
                }
                gemm::gemm(
                    m,
                    n,
                    k,
                    c,
                    1,
                    ldc as isize,
                    !init.is_null(),
                    a.as_ptr(),
                    1,
                    lda as isize,
                    b.as_ptr(),
                    1,
                    ldb as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;

    /// # Safety
    /// AVX-512F must be available; operands satisfy `sgemm_nn_raw`'s contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sgemm(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        cp: *mut f32,
        ldc: usize,
        init: *const f32,
    ) {
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut j0 = 0;
        while j0 < n {
            let w = (n - j0).min(NR);
            let nv = w.div_ceil(16);
            let rem = w - 16 * (nv - 1);
            let mask: __mmask16 = if rem == 16 {
                0xFFFF
            } else {
                ((1u32 << rem) - 1) as __mmask16
            };
            let mut i0 = 0;
            while i0 < m {
                let h = (m - i0).min(MR);
                // SAFETY: tiles stay inside the checked bounds; the last vector
                // of a row is masked to the columns that exist.
                unsafe {
                    let (at, bt, ct) = (ap.add(i0 * lda), bp.add(j0), cp.add(i0 * ldc + j0));
                    let it = if init.is_null() {
                        init
                    } else {
                        init.add(i0 * ldc + j0)
                    };
                    macro_rules! go {
                        ($mr:literal) => {
                            match nv {
                                1 => tile::<$mr, 1>(k, at, lda, bt, ldb, ct, ldc, it, mask),
                                2 => tile::<$mr, 2>(k, at, lda, bt, ldb, ct, ldc, it, mask),
                                _ => tile::<$mr, 3>(k, at, lda, bt, ldb, ct, ldc, it, mask),
                            }
                        };
                    }
                    match h {
                        8 => go!(8),
                        7 => go!(7),
                        6 => go!(6),
                        5 => go!(5),
                        4 => go!(4),
                        3 => go!(3),
                        2 => go!(2),
                        _ => go!(1),
                    }
                }
                i0 += h;
            }
            j0 += w;
        }
    }

    /// One `R × 16·V` tile of C over the whole depth `k`, started from `init`
    /// when not null; the last vector of each row is loaded and stored under `mask`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile<const R: usize, const V: usize>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        init: *const f32,
        mask: __mmask16,
    ) {
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        // SAFETY: the caller's bounds; masked lanes are never touched.
        unsafe {
            if !init.is_null() {
                for (i, acc_i) in acc.iter_mut().enumerate() {
                    let row = init.add(i * ldc);
                    for (v, x) in acc_i.iter_mut().enumerate() {
                        *x = if v + 1 == V {
                            _mm512_maskz_loadu_ps(mask, row.add(16 * v))
                        } else {
                            _mm512_loadu_ps(row.add(16 * v))
                        };
                    }
                }
            }
            for p in 0..k {
                let row = b.add(p * ldb);
                let mut bv = [_mm512_setzero_ps(); V];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = if v + 1 == V {
                        _mm512_maskz_loadu_ps(mask, row.add(16 * v))
                    } else {
                        _mm512_loadu_ps(row.add(16 * v))
                    };
                }
                for (i, acc_i) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.add(i * lda + p));
                    for (x, bx) in acc_i.iter_mut().zip(&bv) {
                        *x = _mm512_fmadd_ps(av, *bx, *x);
                    }
                }
            }
            for (i, acc_i) in acc.iter().enumerate() {
                let out = c.add(i * ldc);
                for (v, x) in acc_i.iter().enumerate() {
                    if v + 1 == V {
                        _mm512_mask_storeu_ps(out.add(16 * v), mask, *x);
                    } else {
                        _mm512_storeu_ps(out.add(16 * v), *x);
                    }
                }
            }
        }
    }
}
