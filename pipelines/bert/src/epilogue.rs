//! What runs on a linear's output after the matrix product: bias, then the activation, fused
//! into one pass over the rows (`out[i, j] = act(out[i, j] + bias[j])`).
//!
//! Key choice: the exact (erf) GELU of BERT is evaluated in AVX2/FMA registers, with the
//! Abramowitz–Stegun 7.1.26 erfc (|error of erf| < 1.5e-7, the same formula as the runtime's
//! scalar `cpu::gelu`) and a vector `exp` (Cody–Waite reduction, degree-6 Taylor polynomial,
//! ≈ 1 ulp). The scalar libm `exp` per element made GELU a third of the f32 forward at batch 32;
//! the fused vector pass removes that and one extra sweep over the `[tokens, 4h]` activations.

use rayon::prelude::*;

use crate::config::Activation;

/// The post-GEMM step of one linear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// `out += bias`.
    Bias,
    /// `out = act(out + bias)`.
    BiasAct(Activation),
}

/// Elements per rayon task (keeps tiny outputs on the calling thread).
const CHUNK: usize = 16 * 1024;

/// Apply `ep` to `out[m, n]` with `bias[n]` (rows in parallel).
pub fn apply(out: &mut [f32], bias: &[f32], ep: Epilogue) {
    let n = bias.len();
    if n == 0 || !out.len().is_multiple_of(n) {
        debug_assert!(n == 0, "epilogue: out.len() not a multiple of bias.len()");
        return;
    }
    let rows_per = (CHUNK / n).max(1);
    let run = |chunk: &mut [f32]| {
        for row in chunk.chunks_exact_mut(n) {
            apply_row(row, bias, ep);
        }
    };
    if out.len() > CHUNK {
        out.par_chunks_mut(rows_per * n).for_each(run);
    } else {
        run(out);
    }
}

fn apply_row(row: &mut [f32], bias: &[f32], ep: Epilogue) {
    match ep {
        Epilogue::Bias => {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += *b;
            }
        }
        Epilogue::BiasAct(Activation::Gelu) => bias_gelu(row, bias),
        Epilogue::BiasAct(act) => {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += *b;
            }
            match act {
                Activation::GeluTanh => favlo_runtime::cpu::gelu_tanh(row),
                Activation::Relu => row.iter_mut().for_each(|u| *u = u.max(0.0)),
                Activation::Gelu => favlo_runtime::cpu::gelu(row),
            }
        }
    }
}

/// `row[j] = gelu(row[j])` (exact erf form), for rows whose bias is already in.
pub fn gelu_in_place(row: &mut [f32]) {
    const ZEROS: [f32; 64] = [0.0; 64];
    for chunk in row.chunks_mut(ZEROS.len()) {
        let n = chunk.len();
        bias_gelu(chunk, &ZEROS[..n]);
    }
}

/// `row[j] = gelu(row[j] + bias[j])` (exact erf form).
pub fn bias_gelu(row: &mut [f32], bias: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected just above.
            unsafe { avx512::bias_gelu(row, bias) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected just above.
            unsafe { avx2::bias_gelu(row, bias) };
            return;
        }
    }
    bias_gelu_scalar(row, bias);
}

/// `row = softmax(scale · row)` for every row of `n` in `x` (the attention scores' epilogue).
pub fn softmax_rows(x: &mut [f32], n: usize, scale: f32) {
    if n == 0 {
        return;
    }
    for row in x.chunks_exact_mut(n) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the features were detected just above.
                unsafe { avx2::softmax_row(row, scale) };
                continue;
            }
        }
        softmax_row_scalar(row, scale);
    }
}

fn softmax_row_scalar(row: &mut [f32], scale: f32) {
    let max = row.iter().fold(f32::MIN, |m, &v| m.max(v));
    let mut sum = 0f32;
    for v in row.iter_mut() {
        *v = ((*v - max) * scale).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

/// erfc(z) for z ≥ 0 (Abramowitz & Stegun 7.1.26).
const ERFC_P: f32 = 0.327_591_1;
const ERFC_A: [f32; 5] = [
    0.254_829_6,
    -0.284_496_74,
    1.421_413_8,
    -1.453_152_1,
    1.061_405_4,
];

fn bias_gelu_scalar(row: &mut [f32], bias: &[f32]) {
    for (o, b) in row.iter_mut().zip(bias) {
        let v = *o + *b;
        let z = v * std::f32::consts::FRAC_1_SQRT_2;
        let a = z.abs();
        let t = 1.0 / ERFC_P.mul_add(a, 1.0);
        let poly = t * ERFC_A[4]
            .mul_add(t, ERFC_A[3])
            .mul_add(t, ERFC_A[2])
            .mul_add(t, ERFC_A[1])
            .mul_add(t, ERFC_A[0]);
        let e = poly * (-a * a).exp();
        let one_plus = if z >= 0.0 { 2.0 - e } else { e };
        *o = 0.5 * v * one_plus;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{ERFC_A, ERFC_P};

    /// `exp(x)` for x ≤ 0 (inputs below -87 give 0 or a denormal-free tiny value).
    #[target_feature(enable = "avx2,fma")]
    fn exp_neg(x: __m256) -> __m256 {
        let x = _mm256_max_ps(x, _mm256_set1_ps(-87.0));
        let n = _mm256_round_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        // Cody–Waite: ln 2 = HI + LO, HI exact in few bits so n·HI is exact.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 120.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 24.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0 / 6.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0));
        // 2^n by building the exponent field; n ≥ -126 because x ≥ -87.
        let bits = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
            23,
        );
        _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
    }

    #[target_feature(enable = "avx2,fma")]
    fn gelu8(v: __m256) -> __m256 {
        let z = _mm256_mul_ps(v, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), z);
        let one = _mm256_set1_ps(1.0);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(ERFC_P), a, one));
        let mut poly = _mm256_set1_ps(ERFC_A[4]);
        poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(ERFC_A[3]));
        poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(ERFC_A[2]));
        poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(ERFC_A[1]));
        poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(ERFC_A[0]));
        poly = _mm256_mul_ps(poly, t);
        let e = _mm256_mul_ps(
            poly,
            exp_neg(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)),
        );
        // 1 + erf(z) = 2 - erfc(z) for z ≥ 0, erfc(-z) for z < 0.
        let pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ);
        let one_plus = _mm256_blendv_ps(e, _mm256_sub_ps(_mm256_set1_ps(2.0), e), pos);
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), v), one_plus)
    }

    #[target_feature(enable = "avx2,fma")]
    fn hmax(v: __m256) -> f32 {
        let m4 = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m1 = _mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1));
        _mm_cvtss_f32(m1)
    }

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        _mm_cvtss_f32(s1)
    }

    /// `row = softmax(scale · row)`, scale > 0.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_row(row: &mut [f32], scale: f32) {
        let n = row.len();
        let n8 = n / 8 * 8;
        let p = row.as_mut_ptr();
        let mut mv = _mm256_set1_ps(f32::MIN);
        let mut j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n.
            mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(p.add(j)) });
            j += 8;
        }
        let max = row[n8..].iter().fold(hmax(mv), |m, &v| m.max(v));
        let (maxv, sv) = (_mm256_set1_ps(max), _mm256_set1_ps(scale));
        let mut acc = _mm256_setzero_ps();
        j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n.
            unsafe {
                let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p.add(j)), maxv), sv);
                let e = exp_neg(v);
                acc = _mm256_add_ps(acc, e);
                _mm256_storeu_ps(p.add(j), e);
            }
            j += 8;
        }
        let mut sum = hsum(acc);
        for v in row[n8..].iter_mut() {
            *v = ((*v - max) * scale).exp();
            sum += *v;
        }
        let inv = _mm256_set1_ps(1.0 / sum);
        j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n.
            unsafe { _mm256_storeu_ps(p.add(j), _mm256_mul_ps(_mm256_loadu_ps(p.add(j)), inv)) };
            j += 8;
        }
        let inv = 1.0 / sum;
        row[n8..].iter_mut().for_each(|v| *v *= inv);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn bias_gelu(row: &mut [f32], bias: &[f32]) {
        let n = row.len().min(bias.len());
        let n8 = n / 8 * 8;
        let (rp, bp) = (row.as_mut_ptr(), bias.as_ptr());
        let mut j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n <= row.len(), bias.len().
            unsafe {
                let v = _mm256_add_ps(_mm256_loadu_ps(rp.add(j)), _mm256_loadu_ps(bp.add(j)));
                _mm256_storeu_ps(rp.add(j), gelu8(v));
            }
            j += 8;
        }
        super::bias_gelu_scalar(&mut row[n8..n], &bias[n8..n]);
    }
}

/// The same erf GELU as [`avx2`], 16 lanes wide (the FFN's GELU is the largest elementwise
/// pass of the forward: `tokens × intermediate` per layer).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{ERFC_A, ERFC_P};

    /// `exp(x)` for x ≤ 0 (clamped at -87), the [`super::avx2`] algorithm on 16 lanes.
    #[target_feature(enable = "avx512f")]
    fn exp_neg(x: __m512) -> __m512 {
        let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(1.0 / 720.0);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 120.0));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 24.0));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 6.0));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
        // p · 2^n (n ≥ -126 because x ≥ -87).
        _mm512_scalef_ps(p, n)
    }

    #[target_feature(enable = "avx512f")]
    fn gelu16(v: __m512) -> __m512 {
        let z = _mm512_mul_ps(v, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let a = _mm512_abs_ps(z);
        let one = _mm512_set1_ps(1.0);
        // 1 / (1 + p·a) by the 14-bit reciprocal estimate and one Newton step (≈ 2⁻²⁸
        // relative; a divide is the slowest instruction of this function).
        let d = _mm512_fmadd_ps(_mm512_set1_ps(ERFC_P), a, one);
        let r = _mm512_rcp14_ps(d);
        let t = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0)));
        let mut poly = _mm512_set1_ps(ERFC_A[4]);
        poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(ERFC_A[3]));
        poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(ERFC_A[2]));
        poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(ERFC_A[1]));
        poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(ERFC_A[0]));
        poly = _mm512_mul_ps(poly, t);
        let e = _mm512_mul_ps(
            poly,
            exp_neg(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a)),
        );
        // 1 + erf(z) = 2 - erfc(z) for z ≥ 0, erfc(-z) for z < 0.
        let pos = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(z, _mm512_setzero_ps());
        let one_plus = _mm512_mask_sub_ps(e, pos, _mm512_set1_ps(2.0), e);
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5), v), one_plus)
    }

    /// # Safety
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn bias_gelu(row: &mut [f32], bias: &[f32]) {
        let n = row.len().min(bias.len());
        let (rp, bp) = (row.as_mut_ptr(), bias.as_ptr());
        let mut j = 0;
        while j < n {
            let m: __mmask16 = if n - j >= 16 {
                0xFFFF
            } else {
                (1u16 << (n - j)) - 1
            };
            // SAFETY: lanes under the mask are below n <= row.len(), bias.len().
            unsafe {
                let v = _mm512_add_ps(
                    _mm512_maskz_loadu_ps(m, rp.add(j)),
                    _mm512_maskz_loadu_ps(m, bp.add(j)),
                );
                _mm512_mask_storeu_ps(rp.add(j), m, gelu16(v));
            }
            j += 16;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// erf in f64: Maclaurin series (|x| ≤ 4, enough terms for 1e-12).
    fn erf64(x: f64) -> f64 {
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    fn gelu64(v: f64) -> f64 {
        let z = v / std::f64::consts::SQRT_2;
        if z.abs() > 4.0 {
            // erf is ±1 within 1.6e-8 here.
            return if z > 0.0 { v } else { 0.0 };
        }
        0.5 * v * (1.0 + erf64(z))
    }

    #[test]
    fn bias_gelu_matches_f64_erf_gelu() {
        // v from -12 to 12 in fine steps, through both the SIMD body and the scalar tail.
        let n = 8 * 301 + 5;
        let bias: Vec<f32> = (0..n).map(|j| ((j % 7) as f32 - 3.0) * 0.25).collect();
        let base: Vec<f32> = (0..n).map(|j| -12.0 + 24.0 * j as f32 / n as f32).collect();
        let mut got = base.clone();
        bias_gelu(&mut got, &bias);
        let mut scalar = base.clone();
        bias_gelu_scalar(&mut scalar, &bias);
        // Each SIMD body on its own (the dispatcher picks only the widest).
        let mut paths = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                let mut v = base.clone();
                // SAFETY: detected just above.
                unsafe { avx2::bias_gelu(&mut v, &bias) };
                paths.push(("avx2", v));
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                let mut v = base.clone();
                // SAFETY: detected just above.
                unsafe { avx512::bias_gelu(&mut v, &bias) };
                paths.push(("avx512", v));
            }
        }
        for j in 0..n {
            let v = f64::from(base[j]) + f64::from(bias[j]);
            let want = gelu64(v);
            let tol = 1e-6 * v.abs().max(1.0);
            assert!(
                (f64::from(got[j]) - want).abs() <= tol,
                "v={v}: {} vs {want}",
                got[j]
            );
            assert!((f64::from(scalar[j]) - want).abs() <= tol, "scalar v={v}");
            for (name, p) in &paths {
                assert!((f64::from(p[j]) - want).abs() <= tol, "{name} v={v}");
            }
        }
    }

    #[test]
    fn softmax_rows_match_f64() {
        for n in [1, 5, 8, 29, 64] {
            let m = 3;
            let x: Vec<f32> = (0..m * n)
                .map(|i| ((i * 53) % 97) as f32 / 4.0 - 12.0)
                .collect();
            let mut got = x.clone();
            softmax_rows(&mut got, n, 0.37);
            let mut scalar = x.clone();
            for row in scalar.chunks_exact_mut(n) {
                softmax_row_scalar(row, 0.37);
            }
            for (r, row) in x.chunks_exact(n).enumerate() {
                let max = row.iter().fold(f64::MIN, |a, &b| a.max(f64::from(b)));
                let e: Vec<f64> = row
                    .iter()
                    .map(|&v| ((f64::from(v) - max) * 0.37).exp())
                    .collect();
                let sum: f64 = e.iter().sum();
                for c in 0..n {
                    let want = e[c] / sum;
                    assert!((f64::from(got[r * n + c]) - want).abs() <= 1e-6, "n={n}");
                    assert!((f64::from(scalar[r * n + c]) - want).abs() <= 1e-6);
                }
            }
        }
    }

    #[test]
    fn epilogues_over_rows() {
        let (m, n) = (700, 40);
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.1 - 2.0).collect();
        let x: Vec<f32> = (0..m * n)
            .map(|i| ((i * 37) % 101) as f32 / 20.0 - 2.5)
            .collect();
        for ep in [
            Epilogue::Bias,
            Epilogue::BiasAct(Activation::Gelu),
            Epilogue::BiasAct(Activation::Relu),
            Epilogue::BiasAct(Activation::GeluTanh),
        ] {
            let mut got = x.clone();
            apply(&mut got, &bias, ep);
            for i in 0..m * n {
                let v = f64::from(x[i]) + f64::from(bias[i % n]);
                let want = match ep {
                    Epilogue::Bias => v,
                    Epilogue::BiasAct(Activation::Gelu) => gelu64(v),
                    Epilogue::BiasAct(Activation::Relu) => v.max(0.0),
                    Epilogue::BiasAct(Activation::GeluTanh) => {
                        let c = (2.0 / std::f64::consts::PI).sqrt();
                        0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
                    }
                };
                assert!(
                    (f64::from(got[i]) - want).abs() <= 1e-6 * v.abs().max(1.0),
                    "{ep:?} at {i}: {} vs {want}",
                    got[i]
                );
            }
        }
    }
}
