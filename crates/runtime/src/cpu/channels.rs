//! Channel-major (`[C, T]`) elementwise kernels for convolutional audio models:
//! layer norm over the channel axis, leaky ReLU and WaveNet's gated activation.
//!
//! Key design choice: the data stays in the convolutions' `[C, T]` layout (no
//! transposes). The channel norm walks rows and accumulates per-column sums in
//! two small `T`-length vectors, so the inner loops are contiguous and
//! vectorize; statistics are accumulated in f64 for short rows' accuracy.

use rayon::prelude::*;

const PAR_MIN: usize = 1 << 15;

/// Layer norm over channels for each time step: `x[C, T]` → `out[C, T]`, with
/// `out[c, t] = (x[c, t] − mean_t) / sqrt(var_t + eps) · gamma[c] + beta[c]`
/// (biased variance, as `torch.nn.functional.layer_norm` over the channel axis).
pub fn layer_norm_channels(
    x: &[f32],
    channels: usize,
    len: usize,
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let n = channels * len;
    let ok = x.len() >= n && out.len() >= n && gamma.len() >= channels && beta.len() >= channels;
    debug_assert!(ok, "layer_norm_channels: short operand");
    if !ok || n == 0 {
        return;
    }
    let mut mean = vec![0f64; len];
    let mut sq = vec![0f64; len];
    for row in x[..n].chunks_exact(len) {
        for ((m, s), v) in mean.iter_mut().zip(sq.iter_mut()).zip(row) {
            let v = *v as f64;
            *m += v;
            *s += v * v;
        }
    }
    let inv_c = 1.0 / channels as f64;
    let mut scale = vec![0f32; len];
    let mut shift = vec![0f32; len];
    for t in 0..len {
        let m = mean[t] * inv_c;
        let var = (sq[t] * inv_c - m * m).max(0.0);
        let r = 1.0 / (var + eps as f64).sqrt();
        scale[t] = r as f32;
        shift[t] = (-m * r) as f32;
    }
    let row = |(c, (o, xs)): (usize, (&mut [f32], &[f32]))| {
        let (g, b) = (gamma[c], beta[c]);
        for t in 0..len {
            o[t] = (xs[t] * scale[t] + shift[t]) * g + b;
        }
    };
    let rows = out[..n]
        .chunks_exact_mut(len)
        .zip(x[..n].chunks_exact(len))
        .enumerate();
    if n >= PAR_MIN {
        rows.par_bridge().for_each(row);
    } else {
        rows.for_each(row);
    }
}

/// `out = x` where `x ≥ 0`, else `slope · x`.
pub fn leaky_relu(x: &[f32], slope: f32, out: &mut [f32]) {
    let n = x.len().min(out.len());
    debug_assert_eq!(x.len(), out.len(), "leaky_relu: length mismatch");
    let f = |(o, v): (&mut f32, &f32)| *o = if *v >= 0.0 { *v } else { slope * v };
    if n >= PAR_MIN {
        out[..n]
            .par_chunks_mut(4096)
            .zip(x[..n].par_chunks(4096))
            .for_each(|(o, v)| o.iter_mut().zip(v).for_each(f));
    } else {
        out[..n].iter_mut().zip(&x[..n]).for_each(f);
    }
}

/// WaveNet's gate: for `a[2C, T]`, `out[c, t] = tanh(a[c, t]) · sigmoid(a[C + c, t])`.
pub fn gated_tanh_sigmoid(a: &[f32], channels: usize, len: usize, out: &mut [f32]) {
    let n = channels * len;
    let ok = a.len() >= 2 * n && out.len() >= n;
    debug_assert!(ok, "gated_tanh_sigmoid: short operand");
    if !ok {
        return;
    }
    let (t, s) = a[..2 * n].split_at(n);
    let f = |((o, x), y): ((&mut f32, &f32), &f32)| *o = x.tanh() / (1.0 + (-y).exp());
    out[..n].iter_mut().zip(t).zip(s).for_each(f);
}
