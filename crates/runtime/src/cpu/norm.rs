//! RMSNorm and LayerNorm over the last dimension.
//!
//! Key design choice: per-row statistics in f32 with 8-way partial sums (LayerNorm
//! uses two passes: mean, then centered variance); rows are spread over rayon tasks
//! when the tensor is large.

use rayon::prelude::*;

const PAR_MIN: usize = 1 << 16;

fn for_rows(x: &[f32], out: &mut [f32], dim: usize, f: impl Fn(&[f32], &mut [f32]) + Sync) {
    if dim == 0 {
        return;
    }
    let rows = (x.len() / dim).min(out.len() / dim);
    debug_assert_eq!(x.len(), out.len(), "norm: x and out lengths differ");
    let (x, out) = (&x[..rows * dim], &mut out[..rows * dim]);
    if rows > 1 && x.len() >= PAR_MIN {
        out.par_chunks_exact_mut(dim)
            .zip(x.par_chunks_exact(dim))
            .for_each(|(o, r)| f(r, o));
    } else {
        out.chunks_exact_mut(dim)
            .zip(x.chunks_exact(dim))
            .for_each(|(o, r)| f(r, o));
    }
}

fn sum8(it: impl Iterator<Item = f32>) -> f32 {
    let mut acc = [0f32; 8];
    for (i, v) in it.enumerate() {
        acc[i & 7] += v;
    }
    acc.iter().sum()
}

/// out = x / sqrt(mean(x²) + eps) · weight, per row of `weight.len()`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for_rows(x, out, dim, |r, o| {
        let ss = crate::cpu::simd::dot(r, r);
        let inv = 1.0 / (ss / dim as f32 + eps).sqrt();
        for ((oi, xi), wi) in o.iter_mut().zip(r).zip(weight) {
            *oi = *xi * inv * *wi;
        }
    });
}

/// out = (x - mean) / sqrt(var + eps) · weight + bias, per row of `weight.len()`.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    debug_assert_eq!(bias.len(), dim, "layer_norm: bias.len() != weight.len()");
    if bias.len() < dim {
        return;
    }
    for_rows(x, out, dim, |r, o| {
        let mean = sum8(r.iter().copied()) / dim as f32;
        let var = sum8(r.iter().map(|v| (v - mean) * (v - mean))) / dim as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for (((oi, xi), wi), bi) in o.iter_mut().zip(r).zip(weight).zip(bias) {
            *oi = (*xi - mean) * inv * *wi + *bi;
        }
    });
}
