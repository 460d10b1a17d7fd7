//! Dense GEMV row kernels (f32 / bf16 / f16 weights): one weight row against M ≤ 4 x rows.
//!
//! Key design choice: the weight element type is a const tag so one kernel body per ISA
//! serves all three types; conversions (bf16 shift, F16C) happen in registers.

use crate::cpu::simd::Isa;
use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// One borrowed weight row.
#[derive(Clone, Copy)]
pub(super) enum Row<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

const T_F32: u8 = 0;
const T_BF16: u8 = 1;
const T_F16: u8 = 2;

/// Dot products of one weight row with M x rows (each at least as long as the row).
pub(super) fn row_dots<const M: usize>(isa: Isa, row: Row<'_>, xs: [&[f32]; M]) -> [f32; M] {
    let (ptr, k, tag) = match row {
        Row::F32(r) => (r.as_ptr() as *const u8, r.len(), T_F32),
        Row::Bf16(r) => (r.as_ptr() as *const u8, r.len(), T_BF16),
        Row::F16(r) => (r.as_ptr() as *const u8, r.len(), T_F16),
    };
    if xs.iter().any(|x| x.len() < k) {
        debug_assert!(false, "row_dots: x row shorter than weight row");
        return [0.0; M];
    }
    let xp: [*const f32; M] = xs.map(|x| x.as_ptr());
    match (isa, tag) {
        // SAFETY: ISA detected at run time; ptr holds k elements of the tagged type and
        // every x row holds at least k floats.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, T_F32) => unsafe { avx512::<T_F32, M>(ptr, k, xp) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, T_BF16) => unsafe { avx512::<T_BF16, M>(ptr, k, xp) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, _) => unsafe { avx512::<T_F16, M>(ptr, k, xp) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, T_F32) => unsafe { avx2::<T_F32, M>(ptr, k, xp) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, T_BF16) => unsafe { avx2::<T_BF16, M>(ptr, k, xp) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => unsafe { avx2::<T_F16, M>(ptr, k, xp) },
        _ => scalar(row, xs),
    }
}

fn scalar<const M: usize>(row: Row<'_>, xs: [&[f32]; M]) -> [f32; M] {
    let mut out = [0f32; M];
    let mut buf = [0f32; 64];
    let k = match row {
        Row::F32(r) => r.len(),
        Row::Bf16(r) => r.len(),
        Row::F16(r) => r.len(),
    };
    let mut acc = [[0f32; 8]; M];
    let mut i = 0;
    while i < k {
        let len = (k - i).min(64);
        let w = &mut buf[..len];
        match row {
            Row::F32(r) => w.copy_from_slice(&r[i..i + len]),
            Row::Bf16(r) => crate::cpu::simd::bf16_to_f32(&r[i..i + len], w),
            Row::F16(r) => {
                for (d, s) in w.iter_mut().zip(&r[i..i + len]) {
                    *d = s.to_f32();
                }
            }
        }
        for j in 0..M {
            let x = &xs[j][i..i + len];
            for (c, (wv, xv)) in w.iter().zip(x).enumerate() {
                acc[j][c & 7] = wv.mul_add(*xv, acc[j][c & 7]);
            }
        }
        i += len;
    }
    for j in 0..M {
        out[j] = acc[j].iter().sum();
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn load16<const T: u8>(p: *const u8, i: usize) -> __m512 {
    // SAFETY: the caller guarantees 16 elements at index i.
    unsafe {
        match T {
            T_F32 => _mm512_loadu_ps((p as *const f32).add(i)),
            T_BF16 => {
                let h = _mm256_loadu_si256((p as *const u16).add(i) as *const __m256i);
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
            _ => _mm512_cvtph_ps(_mm256_loadu_si256(
                (p as *const u16).add(i) as *const __m256i
            )),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn load16_masked<const T: u8>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
    // SAFETY: the caller guarantees the masked-in elements exist.
    unsafe {
        match T {
            T_F32 => _mm512_maskz_loadu_ps(m, (p as *const f32).add(i)),
            T_BF16 => {
                let h = _mm256_maskz_loadu_epi16(m, (p as *const i16).add(i));
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
            _ => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (p as *const i16).add(i))),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn avx512<const T: u8, const M: usize>(
    w: *const u8,
    k: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    let mut i = 0;
    // SAFETY (all loads): i + 32 <= k, or masked to the k - i remaining elements.
    unsafe {
        while i + 32 <= k {
            let w0 = load16::<T>(w, i);
            let w1 = load16::<T>(w, i + 16);
            for j in 0..M {
                acc[j][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[j].add(i)), acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[j].add(i + 16)), acc[j][1]);
            }
            i += 32;
        }
        while i < k {
            let rem = (k - i).min(16);
            let m: __mmask16 = ((1u32 << rem) - 1) as __mmask16;
            let w0 = load16_masked::<T>(w, i, m);
            for j in 0..M {
                acc[j][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, xs[j].add(i)), acc[j][0]);
            }
            i += rem;
        }
    }
    let mut out = [0f32; M];
    for j in 0..M {
        out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]));
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const T: u8>(p: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller guarantees 8 elements at index i.
    unsafe {
        match T {
            T_F32 => _mm256_loadu_ps((p as *const f32).add(i)),
            T_BF16 => {
                let h = _mm_loadu_si128((p as *const u16).add(i) as *const __m128i);
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            }
            _ => _mm256_cvtph_ps(_mm_loadu_si128((p as *const u16).add(i) as *const __m128i)),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2<const T: u8, const M: usize>(
    w: *const u8,
    k: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    let mut i = 0;
    // SAFETY (all loads): i + 16 <= k or i + 8 <= k.
    unsafe {
        while i + 16 <= k {
            let w0 = load8::<T>(w, i);
            let w1 = load8::<T>(w, i + 8);
            for j in 0..M {
                acc[j][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[j].add(i)), acc[j][0]);
                acc[j][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs[j].add(i + 8)), acc[j][1]);
            }
            i += 16;
        }
        while i + 8 <= k {
            let w0 = load8::<T>(w, i);
            for j in 0..M {
                acc[j][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[j].add(i)), acc[j][0]);
            }
            i += 8;
        }
    }
    let mut out = [0f32; M];
    for j in 0..M {
        out[j] = crate::cpu::simd::hsum256(_mm256_add_ps(acc[j][0], acc[j][1]));
    }
    while i < k {
        // SAFETY: i < k.
        let wv = unsafe {
            match T {
                T_F32 => *(w as *const f32).add(i),
                T_BF16 => f32::from_bits((*(w as *const u16).add(i) as u32) << 16),
                _ => f16::from_bits(*(w as *const u16).add(i)).to_f32(),
            }
        };
        for j in 0..M {
            // SAFETY: every x row holds at least k floats.
            out[j] = wv.mul_add(unsafe { *xs[j].add(i) }, out[j]);
        }
        i += 1;
    }
    out
}
