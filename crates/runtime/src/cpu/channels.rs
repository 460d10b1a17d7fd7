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

/// `e^x` for `x` in f32 without a libm call, so loops over it vectorize:
/// `x = k·ln 2 + r` with `k` rounded by the 1.5·2²³ trick, a degree-6 Taylor
/// polynomial for `e^r` on |r| ≤ ln2/2 (relative error < 2e-7), then `2^k`
/// through the exponent bits. Inputs are clamped to [−87, 88].
#[inline(always)]
pub(crate) fn exp_poly(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let x = x.clamp(-87.0, 88.0);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    p * f32::from_bits(((k as i32 + 127) << 23) as u32)
}

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

/// WaveNet's gate: for `a[2C, T]`, `out[c, t] = tanh(a[c, t]) · sigmoid(a[C + c, t])`,
/// with `tanh(x) = 1 − 2/(e^{2x} + 1)` and `sigmoid(y) = 1/(1 + e^{−y})` on a
/// polynomial `exp` the compiler vectorizes (AVX-512 or AVX2 when present). Large
/// tensors are split over rayon tasks in blocks of whole elements (each element is
/// computed the same way whatever the split).
pub fn gated_tanh_sigmoid(a: &[f32], channels: usize, len: usize, out: &mut [f32]) {
    let n = channels * len;
    let ok = a.len() >= 2 * n && out.len() >= n;
    debug_assert!(ok, "gated_tanh_sigmoid: short operand");
    if !ok {
        return;
    }
    let (t, s) = a[..2 * n].split_at(n);
    let out = &mut out[..n];
    const BLOCK: usize = 4096;
    if n >= PAR_MIN {
        out.par_chunks_mut(BLOCK)
            .zip(t.par_chunks(BLOCK).zip(s.par_chunks(BLOCK)))
            .for_each(|(o, (t, s))| gate_part(o, t, s));
    } else {
        gate_part(out, t, s);
    }
}

fn gate_part(out: &mut [f32], t: &[f32], s: &[f32]) {
    match super::simd::isa() {
        // SAFETY: the ISA was detected at run time.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx512 => unsafe { gate_avx512(out, t, s) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        super::simd::Isa::Avx2 => unsafe { gate_avx2(out, t, s) },
        _ => gate_loop(out, t, s),
    }
}

#[cfg(test)]
mod tests {
    use super::gated_tanh_sigmoid;

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
}
