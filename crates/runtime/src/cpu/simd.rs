//! Instruction-set selection and the small vector primitives the kernels share
//! (dot products, axpy, half-precision conversion).
//!
//! Key design choice: the best ISA is detected once; [`set_isa_cap`] can lower it
//! (tests use it to exercise every path on one machine). Every primitive has an
//! AVX-512, an AVX2+FMA(+F16C) and a scalar body with the same contract.

use half::{bf16, f16};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust (auto-vectorized where the compiler can).
    Scalar = 0,
    /// AVX2 + FMA + F16C.
    Avx2 = 1,
    /// AVX-512 F/BW/VL (+ the AVX2 set).
    Avx512 = 2,
}

fn detected() -> Isa {
    static D: OnceLock<Isa> = OnceLock::new();
    *D.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl");
            if avx512 {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

static CAP: AtomicU8 = AtomicU8::new(u8::MAX);

/// The ISA kernels use now: the detected one, lowered by [`set_isa_cap`].
pub fn isa() -> Isa {
    let d = detected();
    match CAP.load(Ordering::Relaxed) {
        0 => Isa::Scalar,
        1 if d > Isa::Avx2 => Isa::Avx2,
        _ => d,
    }
}

/// The best ISA this CPU supports.
pub fn detected_isa() -> Isa {
    detected()
}

/// Cap the ISA used by all kernels (process-wide); `None` removes the cap.
pub fn set_isa_cap(cap: Option<Isa>) {
    CAP.store(cap.map_or(u8::MAX, |c| c as u8), Ordering::Relaxed);
}

/// Every ISA this CPU can run, lowest first (for tests and benchmarks).
pub fn available_isas() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| *i <= detected())
        .collect()
}

/// `sum(a[i] * b[i])` over the common length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    match isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::dot_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_avx2(a, b) },
        _ => dot_scalar(a, b),
    }
}

/// Portable dot product with 8 independent partial sums.
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        s = x.mul_add(*y, s);
    }
    s
}

/// `y[i] += a * x[i]` over the common length.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let (y, x) = (&mut y[..n], &x[..n]);
    match isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::axpy_avx512(y, a, x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::axpy_avx2(y, a, x) },
        _ => {
            for (yi, xi) in y.iter_mut().zip(x) {
                *yi = a.mul_add(*xi, *yi);
            }
        }
    }
}

/// Convert bf16 to f32 (exact) over the common length.
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

/// Convert f16 to f32 (exact) over the common length.
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    match isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 => unsafe { x86::f16_to_f32_f16c(&src[..n], &mut dst[..n]) },
        _ => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = s.to_f32();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(super) unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): indexes stay below n == a.len() == b.len().
        unsafe {
            while i + 64 <= n {
                for (j, ac) in acc.iter_mut().enumerate() {
                    let o = i + 16 * j;
                    *ac = _mm512_fmadd_ps(
                        _mm512_loadu_ps(pa.add(o)),
                        _mm512_loadu_ps(pb.add(o)),
                        *ac,
                    );
                }
                i += 64;
            }
            while i + 16 <= n {
                acc[0] = _mm512_fmadd_ps(
                    _mm512_loadu_ps(pa.add(i)),
                    _mm512_loadu_ps(pb.add(i)),
                    acc[0],
                );
                i += 16;
            }
            if i < n {
                let m: __mmask16 = (1u32 << (n - i)).wrapping_sub(1) as __mmask16;
                let x = _mm512_maskz_loadu_ps(m, pa.add(i));
                let y = _mm512_maskz_loadu_ps(m, pb.add(i));
                acc[1] = _mm512_fmadd_ps(x, y, acc[1]);
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(s)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): indexes stay below n == a.len() == b.len().
        unsafe {
            while i + 32 <= n {
                for (j, ac) in acc.iter_mut().enumerate() {
                    let o = i + 8 * j;
                    *ac = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(o)),
                        _mm256_loadu_ps(pb.add(o)),
                        *ac,
                    );
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i)),
                    _mm256_loadu_ps(pb.add(i)),
                    acc[0],
                );
                i += 8;
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut r = hsum256(s);
        while i < n {
            r = a[i].mul_add(b[i], r);
            i += 1;
        }
        r
    }

    /// Horizontal sum of 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn hsum256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(super) unsafe fn axpy_avx512(y: &mut [f32], a: f32, x: &[f32]) {
        let n = y.len();
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm512_set1_ps(a);
        let mut i = 0;
        // SAFETY (all accesses): indexes stay below n == y.len() == x.len().
        unsafe {
            while i + 16 <= n {
                let v = _mm512_fmadd_ps(va, _mm512_loadu_ps(px.add(i)), _mm512_loadu_ps(py.add(i)));
                _mm512_storeu_ps(py.add(i), v);
                i += 16;
            }
            if i < n {
                let m: __mmask16 = (1u32 << (n - i)).wrapping_sub(1) as __mmask16;
                let v = _mm512_fmadd_ps(
                    va,
                    _mm512_maskz_loadu_ps(m, px.add(i)),
                    _mm512_maskz_loadu_ps(m, py.add(i)),
                );
                _mm512_mask_storeu_ps(py.add(i), m, v);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpy_avx2(y: &mut [f32], a: f32, x: &[f32]) {
        let n = y.len();
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm256_set1_ps(a);
        let mut i = 0;
        // SAFETY (all accesses): indexes stay below n == y.len() == x.len().
        unsafe {
            while i + 8 <= n {
                let v = _mm256_fmadd_ps(va, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
                _mm256_storeu_ps(py.add(i), v);
                i += 8;
            }
        }
        while i < n {
            y[i] = a.mul_add(x[i], y[i]);
            i += 1;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_to_f32_f16c(src: &[f16], dst: &mut [f32]) {
        let n = src.len();
        let mut i = 0;
        // SAFETY (all accesses): indexes stay below n == src.len() == dst.len().
        unsafe {
            while i + 8 <= n {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                i += 8;
            }
        }
        while i < n {
            dst[i] = src[i].to_f32();
            i += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::hsum256;
