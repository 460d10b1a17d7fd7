//! Exact-erf GELU for the duration predictor's DDSConv layers and the
//! WaveNet gate `tanh(a)·sigmoid(b)` of the flow, vectorized.
//!
//! Key design choice: branch-free scalar code (erfc by Abramowitz & Stegun
//! 7.1.26, |error of erf| < 1.5e-7, and `e^x` by a range-reduced degree-6
//! polynomial, relative error < 2e-7) compiled once more with AVX-512/AVX2
//! enabled and picked at run time, so the loop becomes vector code with no
//! libm calls (the generic `cpu::gelu` calls libm's `expf` and, on a baseline
//! x86-64 build, a software `fmaf` per element). Negative inputs go through
//! erfc, so GELU's left tail keeps its relative accuracy.

/// `e^x` without libm: `x = k·ln 2 + r`, `|r| ≤ ln 2 / 2`, Taylor degree 6 for
/// `e^r`, `2^k` through the exponent bits; `x` clamped to [−87, 88].
#[inline(always)]
fn exp_poly(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    p * f32::from_bits(((k as i32 + 127) << 23) as u32)
}

/// `0.5·v·(1 + erf(v/√2))`.
#[inline(always)]
fn gelu1(v: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let z = v.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erfc = poly * exp_poly(-z * z);
    let one_plus = if v >= 0.0 { 2.0 - erfc } else { erfc };
    0.5 * v * one_plus
}

#[inline(always)]
fn gelu_loop(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu1(*v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn gelu_avx512(x: &mut [f32]) {
    gelu_loop(x);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(x: &mut [f32]) {
    gelu_loop(x);
}

/// GELU (exact erf form) in place.
pub fn gelu(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked at run time).
            return unsafe { gelu_avx512(x) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked at run time).
            return unsafe { gelu_avx2(x) };
        }
    }
    gelu_loop(x);
}

/// `tanh(x)·sigmoid(y)` with `tanh(x) = 1 − 2/(e^{2x} + 1)` and
/// `sigmoid(y) = 1/(1 + e^{−y})`.
#[inline(always)]
fn gate_loop(out: &mut [f32], t: &[f32], s: &[f32]) {
    for ((o, x), y) in out.iter_mut().zip(t).zip(s) {
        let th = 1.0 - 2.0 / (exp_poly(2.0 * x) + 1.0);
        let sg = 1.0 / (1.0 + exp_poly(-y));
        *o = th * sg;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn gate_avx512(out: &mut [f32], t: &[f32], s: &[f32]) {
    gate_loop(out, t, s);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gate_avx2(out: &mut [f32], t: &[f32], s: &[f32]) {
    gate_loop(out, t, s);
}

fn gate_part(out: &mut [f32], t: &[f32], s: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked at run time).
            return unsafe { gate_avx512(out, t, s) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked at run time).
            return unsafe { gate_avx2(out, t, s) };
        }
    }
    gate_loop(out, t, s);
}

/// WaveNet's gate on `a[2C, T]`: `out[c, t] = tanh(a[c, t])·sigmoid(a[C + c, t])`,
/// split over rayon workers in blocks of whole elements (each element is
/// computed the same way whatever the split).
pub fn gated_tanh_sigmoid(a: &[f32], channels: usize, len: usize, out: &mut [f32]) {
    use rayon::prelude::*;
    let n = channels * len;
    let (t, s) = a[..2 * n].split_at(n);
    const BLOCK: usize = 4096;
    out[..n]
        .par_chunks_mut(BLOCK)
        .zip(t.par_chunks(BLOCK).zip(s.par_chunks(BLOCK)))
        .for_each(|(o, (t, s))| gate_part(o, t, s));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GELU in f64 with erf from its Maclaurin series (|x| ≤ 3) or the
    /// asymptotic continued fraction of erfc (|x| > 3): an independent reference.
    fn gelu_f64(v: f64) -> f64 {
        let z = v.abs() / std::f64::consts::SQRT_2;
        let erfc = if z <= 3.0 {
            let mut term = z;
            let mut sum = z;
            for n in 1..200 {
                term *= -z * z / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum
        } else {
            // Lentz-free continued fraction, evaluated bottom-up.
            let mut f = 0.0;
            for n in (1..60).rev() {
                f = n as f64 / 2.0 / (z + f);
            }
            (-z * z).exp() / std::f64::consts::PI.sqrt() / (z + f)
        };
        let one_plus = if v >= 0.0 { 2.0 - erfc } else { erfc };
        0.5 * v * one_plus
    }

    #[test]
    fn gate_matches_f64_reference() {
        let (c, t) = (7, 1000);
        let a: Vec<f32> = (0..2 * c * t)
            .map(|i| ((i * 7919 % 2001) as f32 / 100.0) - 10.0)
            .collect();
        let mut out = vec![0f32; c * t];
        gated_tanh_sigmoid(&a, c, t, &mut out);
        for (i, o) in out.iter().enumerate() {
            let (x, y) = (a[i] as f64, a[c * t + i] as f64);
            let want = x.tanh() / (1.0 + (-y).exp());
            assert!(
                (*o as f64 - want).abs() <= 1e-6,
                "gate({x}, {y}): {o} vs {want}"
            );
        }
    }

    #[test]
    fn gelu_matches_f64_reference() {
        // Deterministic pseudo-random inputs over [-10, 10], plus edges.
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut x: Vec<f32> = (0..4099)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
            })
            .collect();
        x.extend([0.0, -0.0, 1e-8, -1e-8, 3.0, -3.0, 50.0, -50.0]);
        let want: Vec<f64> = x.iter().map(|v| gelu_f64(*v as f64)).collect();
        let inputs = x.clone();
        gelu(&mut x);
        for ((got, want), v) in x.iter().zip(&want).zip(&inputs) {
            let err = (*got as f64 - want).abs();
            // f32 rounding (a few ulp) plus the approximation's 1.5e-7
            // absolute error on erf, times 0.5·|v|.
            let tol = 5e-7 * want.abs() + 1e-7 * v.abs() as f64;
            assert!(err <= tol, "gelu({v}): got {got}, want {want}");
        }
    }
}
