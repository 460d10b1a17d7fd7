//! Elementwise activations, softmax, SwiGLU and add.
//!
//! Key design choice: plain loops the compiler vectorizes, split over rayon tasks for
//! large tensors; GELU's erf is an explicit rational approximation ([`erf`]) with
//! |error| < 1.5e-7, evaluated through erfc for negative inputs so that the tails of
//! GELU keep their relative accuracy.

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

#[inline]
fn gelu1(v: f32) -> f32 {
    let z = v * std::f32::consts::FRAC_1_SQRT_2;
    // 1 + erf(z) = 2 - erfc(z) for z ≥ 0, erfc(-z) for z < 0 (no cancellation).
    let one_plus = if z >= 0.0 {
        2.0 - erfc_pos(z)
    } else {
        erfc_pos(-z)
    };
    0.5 * v * one_plus
}

/// GELU with the exact erf form: 0.5 x (1 + erf(x/√2)), in place.
pub fn gelu(x: &mut [f32]) {
    map_inplace(x, gelu1);
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
