//! Elementwise activations, softmax, SwiGLU and add.
//!
//! Key design choice: plain loops the compiler vectorizes, split over rayon tasks for
//! large tensors; GELU's erf is an explicit rational approximation ([`erf`]) with
//! |error| < 1.5e-7, evaluated through erfc for negative inputs so that the tails of
//! GELU keep their relative accuracy. GELU's loop has no libm call (its `e^x` is the
//! channel kernels' polynomial) and is compiled again with AVX-512/AVX2 enabled, picked
//! at run time, so it becomes vector code.

use rayon::prelude::*;

const PAR_MIN: usize = 1 << 15;

fn map_inplace(x: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    if x.len() >= PAR_MIN {
        x.par_chunks_mut(4096)
            .for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
    } else {
        x.iter_mut().for_each(|v| *v = f(*v));
    }
}

/// Softmax in place over each row of `dim` elements (max-subtracted).
pub fn softmax(x: &mut [f32], dim: usize) {
    if dim == 0 {
        return;
    }
    debug_assert_eq!(x.len() % dim, 0, "softmax: len not a multiple of dim");
    let rows = x.len() / dim;
    let x = &mut x[..rows * dim];
    let f = |r: &mut [f32]| softmax_row(r);
    if x.len() >= PAR_MIN && rows > 1 {
        x.par_chunks_exact_mut(dim).for_each(f);
    } else {
        x.chunks_exact_mut(dim).for_each(f);
    }
}

pub(crate) fn softmax_row(r: &mut [f32]) {
    let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        let u = 1.0 / r.len() as f32;
        r.iter_mut().for_each(|v| *v = u);
        return;
    }
    let mut sum = 0f32;
    for v in r.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    r.iter_mut().for_each(|v| *v *= inv);
}

#[inline]
fn silu1(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

/// x · sigmoid(x), in place.
pub fn silu(x: &mut [f32]) {
    map_inplace(x, silu1);
}

/// erfc(z) for z ≥ 0: (a1 t + … + a5 t⁵) e^{-z²}, t = 1/(1 + p z)
/// (Abramowitz & Stegun 7.1.26; |error of erf| < 1.5e-7).
#[inline]
fn erfc_pos(z: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let t = 1.0 / P.mul_add(z, 1.0);
    let poly = t * A[4]
        .mul_add(t, A[3])
        .mul_add(t, A[2])
        .mul_add(t, A[1])
        .mul_add(t, A[0]);
    poly * (-z * z).exp()
}

/// The error function (|error| < 1.5e-7 + f32 rounding).
pub fn erf(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 - erfc_pos(x)
    } else {
        erfc_pos(-x) - 1.0
    }
}

/// `0.5·v·(1 + erf(v/√2))` with erfc as in [`erfc_pos`] but `e^x` from the polynomial
/// and no `mul_add` (a libm call on a baseline x86-64 build), so loops over it vectorize.
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
    let erfc = poly * super::channels::exp_poly(-z * z);
    // 1 + erf(z) = 2 - erfc(z) for z ≥ 0, erfc(-z) for z < 0 (no cancellation).
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

fn gelu_part(x: &mut [f32]) {
    match super::simd::isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx512 => unsafe { gelu_avx512(x) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx2 => unsafe { gelu_avx2(x) },
        _ => gelu_loop(x),
    }
}

/// GELU with the exact erf form: 0.5 x (1 + erf(x/√2)), in place.
pub fn gelu(x: &mut [f32]) {
    if x.len() >= PAR_MIN {
        x.par_chunks_mut(4096).for_each(gelu_part);
    } else {
        gelu_part(x);
    }
}

/// GELU, tanh approximation: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))), in place.
pub fn gelu_tanh(x: &mut [f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    map_inplace(x, |v| {
        0.5 * v * (1.0 + (C * (v + 0.044_715 * v * v * v)).tanh())
    });
}

/// out = silu(gate) · up.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    debug_assert!(
        gate.len() == up.len() && up.len() == out.len(),
        "swiglu: length mismatch"
    );
    let n = gate.len().min(up.len()).min(out.len());
    let (gate, up, out) = (&gate[..n], &up[..n], &mut out[..n]);
    let f = |(o, (g, u)): (&mut f32, (&f32, &f32))| *o = silu1(*g) * *u;
    if n >= PAR_MIN {
        out.par_iter_mut()
            .zip(gate.par_iter().zip(up.par_iter()))
            .for_each(f);
    } else {
        out.iter_mut().zip(gate.iter().zip(up)).for_each(f);
    }
}

/// acc += x (elementwise).
pub fn add(acc: &mut [f32], x: &[f32]) {
    debug_assert_eq!(acc.len(), x.len(), "add: length mismatch");
    for (a, b) in acc.iter_mut().zip(x) {
        *a += *b;
    }
}

#[cfg(test)]
mod tests {
    use super::gelu;

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
            // Continued fraction, evaluated bottom-up.
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
