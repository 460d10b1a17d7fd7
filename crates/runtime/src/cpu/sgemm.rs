//! Row-major f32 GEMM `C = I + A·B` for the convolution kernels, where row `p`
//! of B is anywhere: `B[p, j] = base[offs[p] + j]`. Register-blocked
//! micro-kernels: AVX-512 (8 rows × 48 columns of C in 24 zmm accumulators),
//! AVX2+FMA (6 × 16 in 12 ymm), and a portable loop.
//!
//! Key design choices:
//! - Row offsets make im2col free: a convolution's `[Cin·K, T]` column matrix is
//!   just "row `(ci, tap)` starts at `ci·Lp + tap·d` of the padded input", so the
//!   kernel reads the input in place and no column tile is ever copied.
//! - The `gemm` crate only reaches AVX2 on stable Rust, and convolution
//!   products are "small M, long contiguous N", which a plain outer-product
//!   kernel (A broadcast, B as contiguous vectors, masked tails, no packing)
//!   runs near peak. Single-threaded: callers split N among their workers;
//!   each column of C is computed the same way whatever the split.

use super::simd::{Isa, isa};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Columns of C per AVX-512 micro-tile (three 16-lane vectors); callers split
/// N on multiples of this.
pub(crate) const NR: usize = 48;

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
    sgemm_nn_par_init(m, n, k, a, lda, b, ldb, c, ldc, None, false);
}

/// [`sgemm_nn`] with the columns of C split over rayon workers when the
/// product is large (blocks of whole micro-tiles; the result does not depend
/// on the thread count).
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
    sgemm_nn_par_init(m, n, k, a, lda, b, ldb, c, ldc, None, true);
}

/// Strided-B GEMM with C started from `init` (same layout as C) when given.
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
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let need = |rows: usize, ld: usize, cols: usize| (rows - 1) * ld + cols;
    let ok = lda >= k
        && ldb >= n
        && ldc >= n
        && (k == 0 || (a.len() >= need(m, lda, k) && b.len() >= need(k, ldb, n)))
        && c.len() >= need(m, ldc, n)
        && init.is_none_or(|i| i.len() >= need(m, ldc, n));
    debug_assert!(ok, "sgemm_nn: short operand");
    if !ok {
        return;
    }
    let offs: Vec<usize> = (0..k).map(|p| p * ldb).collect();
    let ip = init.map_or(std::ptr::null(), <[f32]>::as_ptr);
    // SAFETY: bounds checked above (row p of B is b[p·ldb..p·ldb + n]); C and
    // init are exclusively and shared borrowed for the call.
    unsafe {
        sgemm_rows_par(
            m,
            n,
            k,
            a,
            lda,
            b.as_ptr(),
            &offs,
            c.as_mut_ptr(),
            ldc,
            ip,
            std::ptr::null(),
            parallel,
        );
    }
}

/// A raw pointer that rayon tasks may share (they touch disjoint columns).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: users only touch disjoint columns from different tasks.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}
impl<T> Ptr<T> {
    #[inline]
    fn get(&self) -> *mut T {
        self.0
    }
}

/// [`sgemm_rows_raw`] with the columns split over rayon workers when
/// `parallel` and the product is large.
///
/// # Safety
/// As for [`sgemm_rows_raw`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm_rows_par(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    init: *const f32,
    bias: *const f32,
    parallel: bool,
) {
    let threads = rayon::current_num_threads();
    if !parallel || threads <= 1 || m * n * k < (1 << 18) || n < 2 * NR {
        // SAFETY: the caller's contract.
        unsafe { sgemm_rows_raw(m, n, k, a, lda, b, offs, c, ldc, init, bias) };
        return;
    }
    let block = n.div_ceil(threads * 4).div_ceil(NR) * NR;
    let blocks = n.div_ceil(block);
    let (bp, cp, ip) = (Ptr(b as *mut f32), Ptr(c), Ptr(init as *mut f32));
    let bi_ = Ptr(bias as *mut f32);
    use rayon::prelude::*;
    (0..blocks).into_par_iter().for_each(|bi| {
        let j0 = bi * block;
        let w = block.min(n - j0);
        // SAFETY: the caller's contract; block bi writes only columns
        // j0..j0+w of C, disjoint from every other block.
        unsafe {
            let i = if ip.get().is_null() {
                std::ptr::null()
            } else {
                ip.get().add(j0) as *const f32
            };
            sgemm_rows_raw(
                m,
                w,
                k,
                a,
                lda,
                bp.get().add(j0),
                offs,
                cp.get().add(j0),
                ldc,
                i,
                bi_.get(),
            );
        }
    });
}

/// `c[i·ldc + j] = init[i·ldc + j] (or 0) + bias[i] (or 0) + Σ_p a[i·lda + p] · b[offs[p] + j]`
/// for `i < m`, `j < n`. Single-threaded.
///
/// # Safety
/// `a.len() ≥ (m−1)·lda + k`, `offs.len() ≥ k`; `b` valid for reads at
/// `offs[p] + j`, `c` for writes (and `init`, unless null, for reads) at
/// `i·ldc + j`, for all `p < k`, `i < m`, `j < n`; no other thread may touch
/// those elements of `c` during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm_rows_raw(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    init: *const f32,
    bias: *const f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    match isa() {
        // SAFETY: the ISA was detected at run time; the caller's contract.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::sgemm(m, n, k, a, lda, b, offs, c, ldc, init, bias) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::sgemm(m, n, k, a, lda, b, offs, c, ldc, init, bias) },
        // SAFETY: the caller's contract.
        _ => unsafe { portable(m, n, k, a, lda, b, offs, c, ldc, init, bias) },
    }
}

/// Row-at-a-time loop the compiler vectorizes.
///
/// # Safety
/// As for [`sgemm_rows_raw`].
#[allow(clippy::too_many_arguments)]
unsafe fn portable(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    init: *const f32,
    bias: *const f32,
) {
    // SAFETY: the caller's contract; each row of C is a disjoint slice.
    unsafe {
        for i in 0..m {
            let row = std::slice::from_raw_parts_mut(c.add(i * ldc), n);
            let b0 = if bias.is_null() { 0.0 } else { *bias.add(i) };
            if init.is_null() {
                row.fill(b0);
            } else {
                let src = std::slice::from_raw_parts(init.add(i * ldc), n);
                row.iter_mut().zip(src).for_each(|(x, y)| *x = y + b0);
            }
            for (p, off) in offs.iter().enumerate().take(k) {
                let av = a[i * lda + p];
                let br = std::slice::from_raw_parts(b.add(*off), n);
                row.iter_mut().zip(br).for_each(|(x, y)| *x += av * y);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;

    /// Rows of C per micro-tile.
    const MR: usize = 8;

    /// # Safety
    /// AVX-512F available; [`sgemm_rows_raw`]'s contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn sgemm(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        lda: usize,
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        init: *const f32,
        bias: *const f32,
    ) {
        let ap = a.as_ptr();
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
                // SAFETY: the caller's contract; the last vector of each row is
                // masked to the columns that exist.
                unsafe {
                    let (at, bt, ct) = (ap.add(i0 * lda), b.add(j0), c.add(i0 * ldc + j0));
                    let it = if init.is_null() {
                        init
                    } else {
                        init.add(i0 * ldc + j0)
                    };
                    let bt0 = if bias.is_null() { bias } else { bias.add(i0) };
                    macro_rules! go {
                        ($mr:literal) => {
                            match nv {
                                1 => tile::<$mr, 1>(k, at, lda, bt, offs, ct, ldc, it, bt0, mask),
                                2 => tile::<$mr, 2>(k, at, lda, bt, offs, ct, ldc, it, bt0, mask),
                                _ => tile::<$mr, 3>(k, at, lda, bt, offs, ct, ldc, it, bt0, mask),
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
    /// when not null; the last vector of each row is loaded/stored under `mask`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile<const R: usize, const V: usize>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        init: *const f32,
        bias: *const f32,
        mask: __mmask16,
    ) {
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        // SAFETY: the caller's contract; masked lanes are never touched.
        unsafe {
            let load = |p: *const f32, v: usize| {
                if v + 1 == V {
                    _mm512_maskz_loadu_ps(mask, p.add(16 * v))
                } else {
                    _mm512_loadu_ps(p.add(16 * v))
                }
            };
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let b0 = _mm512_set1_ps(if bias.is_null() { 0.0 } else { *bias.add(i) });
                for (v, x) in acc_i.iter_mut().enumerate() {
                    *x = if init.is_null() {
                        b0
                    } else {
                        _mm512_add_ps(load(init.add(i * ldc), v), b0)
                    };
                }
            }
            for (p, off) in offs.iter().enumerate().take(k) {
                let row = b.add(*off);
                let mut bv = [_mm512_setzero_ps(); V];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = load(row, v);
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    /// Rows of C per micro-tile.
    const MR: usize = 6;
    /// Columns of C per micro-tile (two 8-lane vectors).
    const NR2: usize = 16;

    /// # Safety
    /// AVX2+FMA available; [`sgemm_rows_raw`]'s contract.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sgemm(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        lda: usize,
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        init: *const f32,
        bias: *const f32,
    ) {
        let ap = a.as_ptr();
        let mut j0 = 0;
        while j0 < n {
            let w = (n - j0).min(NR2);
            let nv = w.div_ceil(8);
            let rem = (w - 8 * (nv - 1)) as i32;
            let mask = _mm256_setr_epi32(
                -((rem > 0) as i32),
                -((rem > 1) as i32),
                -((rem > 2) as i32),
                -((rem > 3) as i32),
                -((rem > 4) as i32),
                -((rem > 5) as i32),
                -((rem > 6) as i32),
                -((rem > 7) as i32),
            );
            let mut i0 = 0;
            while i0 < m {
                let h = (m - i0).min(MR);
                // SAFETY: as for the AVX-512 kernel.
                unsafe {
                    let (at, bt, ct) = (ap.add(i0 * lda), b.add(j0), c.add(i0 * ldc + j0));
                    let it = if init.is_null() {
                        init
                    } else {
                        init.add(i0 * ldc + j0)
                    };
                    let bt0 = if bias.is_null() { bias } else { bias.add(i0) };
                    macro_rules! go {
                        ($mr:literal) => {
                            match nv {
                                1 => tile::<$mr, 1>(k, at, lda, bt, offs, ct, ldc, it, bt0, mask),
                                _ => tile::<$mr, 2>(k, at, lda, bt, offs, ct, ldc, it, bt0, mask),
                            }
                        };
                    }
                    match h {
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

    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const V: usize>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        init: *const f32,
        bias: *const f32,
        mask: __m256i,
    ) {
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        // SAFETY: the caller's contract; masked lanes are never touched.
        unsafe {
            let load = |p: *const f32, v: usize| {
                if v + 1 == V {
                    _mm256_maskload_ps(p.add(8 * v), mask)
                } else {
                    _mm256_loadu_ps(p.add(8 * v))
                }
            };
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let b0 = _mm256_set1_ps(if bias.is_null() { 0.0 } else { *bias.add(i) });
                for (v, x) in acc_i.iter_mut().enumerate() {
                    *x = if init.is_null() {
                        b0
                    } else {
                        _mm256_add_ps(load(init.add(i * ldc), v), b0)
                    };
                }
            }
            for (p, off) in offs.iter().enumerate().take(k) {
                let row = b.add(*off);
                let mut bv = [_mm256_setzero_ps(); V];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = load(row, v);
                }
                for (i, acc_i) in acc.iter_mut().enumerate() {
                    let av = _mm256_set1_ps(*a.add(i * lda + p));
                    for (x, bx) in acc_i.iter_mut().zip(&bv) {
                        *x = _mm256_fmadd_ps(av, *bx, *x);
                    }
                }
            }
            for (i, acc_i) in acc.iter().enumerate() {
                let out = c.add(i * ldc);
                for (v, x) in acc_i.iter().enumerate() {
                    if v + 1 == V {
                        _mm256_maskstore_ps(out.add(8 * v), mask, *x);
                    } else {
                        _mm256_storeu_ps(out.add(8 * v), *x);
                    }
                }
            }
        }
    }
}
