//! Scalar reference implementations of every kernel, for tests and debugging.
//!
//! Key design choice: straightforward loops with f64 accumulation and f64 math
//! (including an independent f64 erf), taking the weights through the storage
//! crates' own decoders (`half`, `favlo_mx::MxView::dequantize_row`) rather than the
//! kernels' decode paths, so a test compares two independent computations.

use super::attention::AttnShape;
use super::rope::RopeLayout;
use super::weight::WeightRef;

/// Weight matrix as f64 [n, k], decoded by the storage crates.
pub fn weight_f64(w: &WeightRef<'_>) -> Vec<f64> {
    let (n, k) = (w.n(), w.k());
    match w {
        WeightRef::F32 { data, .. } => data[..n * k].iter().map(|v| *v as f64).collect(),
        WeightRef::Bf16 { data, .. } => data[..n * k].iter().map(|v| v.to_f64()).collect(),
        WeightRef::F16 { data, .. } => data[..n * k].iter().map(|v| v.to_f64()).collect(),
        WeightRef::Mx(v) => {
            let mut row = vec![0f32; k];
            let mut out = Vec::with_capacity(n * k);
            for r in 0..n {
                v.dequantize_row(r, &mut row);
                out.extend(row.iter().map(|x| *x as f64));
            }
            out
        }
    }
}

/// y[m,n] = x[m,k] · W^T + bias.
pub fn linear(x: &[f32], w: &WeightRef<'_>, bias: Option<&[f32]>) -> Vec<f64> {
    let (n, k) = (w.n(), w.k());
    let wf = weight_f64(w);
    let m = x.len() / k.max(1);
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = bias.map_or(0.0, |b| b[j] as f64);
            for c in 0..k {
                s += x[i * k + c] as f64 * wf[j * k + c];
            }
            out[i * n + j] = s;
        }
    }
    out
}

/// out[m,n] = a[m,k] · b[k,n].
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for c in 0..k {
            let av = a[i * k + c] as f64;
            for j in 0..n {
                out[i * n + j] += av * b[c * n + j] as f64;
            }
        }
    }
    out
}

/// RMSNorm per row of weight.len().
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f64> {
    let d = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks_exact(d) {
        let ms = r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        out.extend(
            r.iter()
                .zip(weight)
                .map(|(v, w)| *v as f64 * inv * *w as f64),
        );
    }
    out
}

/// LayerNorm per row of weight.len().
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32) -> Vec<f64> {
    let d = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks_exact(d) {
        let mean = r.iter().map(|v| *v as f64).sum::<f64>() / d as f64;
        let var = r.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for ((v, w), b) in r.iter().zip(weight).zip(bias) {
            out.push((*v as f64 - mean) * inv * *w as f64 + *b as f64);
        }
    }
    out
}

/// RoPE on x [t, n_heads, head_dim] (f64 angles).
pub fn rope(
    x: &[f32],
    positions: &[usize],
    n_heads: usize,
    head_dim: usize,
    rot_dim: usize,
    theta: f32,
    layout: RopeLayout,
) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let rot = rot_dim.min(head_dim) & !1;
    let half = rot / 2;
    for (ti, p) in positions.iter().enumerate() {
        for h in 0..n_heads {
            let base = (ti * n_heads + h) * head_dim;
            for i in 0..half {
                let freq = (theta as f64).powf(-2.0 * i as f64 / rot as f64);
                let ang = *p as f64 * freq;
                let (a, b) = match layout {
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                    RopeLayout::NeoX => (i, i + half),
                };
                let (x0, x1) = (x[base + a] as f64, x[base + b] as f64);
                out[base + a] = x0 * ang.cos() - x1 * ang.sin();
                out[base + b] = x0 * ang.sin() + x1 * ang.cos();
            }
        }
    }
    out
}

/// Softmax per row of `dim`.
pub fn softmax(x: &[f32], dim: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks_exact(dim) {
        let max = r
            .iter()
            .map(|v| *v as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = r.iter().map(|v| (*v as f64 - max).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// x · sigmoid(x).
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// erf in f64: Maclaurin series for |x| < 2.5, continued fraction for erfc beyond.
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -a * a / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        1.0 - erfc_cf(a)
    };
    if x < 0.0 { -r } else { r }
}

/// erfc(a) for a ≥ 2.5 by the Laplace continued fraction, evaluated backwards.
fn erfc_cf(a: f64) -> f64 {
    let mut k = a;
    for n in (1..=80).rev() {
        k = a + (n as f64 / 2.0) / k;
    }
    (-a * a).exp() / std::f64::consts::PI.sqrt() / k
}

/// GELU (erf form), computed via erfc on the negative side.
pub fn gelu(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    let one_plus = if z < -2.5 { erfc_cf(-z) } else { 1.0 + erf(z) };
    0.5 * x * one_plus
}

/// GELU, tanh approximation.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// Embedding rows.
pub fn embedding(table: &WeightRef<'_>, ids: &[u32]) -> Vec<f64> {
    let k = table.k();
    let wf = weight_f64(table);
    ids.iter()
        .flat_map(|&i| wf[i as usize * k..(i as usize + 1) * k].to_vec())
        .collect()
}

/// Attention of query i over keys 0..visible(i) with optional mask.
#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: AttnShape,
    t: usize,
    visible: impl Fn(usize) -> usize,
    mask: Option<&[bool]>,
    scale: f32,
) -> Vec<f64> {
    let AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    } = shape;
    let group = nh / nkv;
    let mut out = vec![0f64; t * nh * hd];
    for i in 0..t {
        for h in 0..nh {
            let g = h / group;
            let qv = &q[(i * nh + h) * hd..][..hd];
            let keys: Vec<usize> = (0..visible(i))
                .filter(|j| mask.is_none_or(|m| m[*j]))
                .collect();
            if keys.is_empty() {
                continue;
            }
            let s: Vec<f64> = keys
                .iter()
                .map(|j| {
                    let kr = &k[(j * nkv + g) * hd..][..hd];
                    scale as f64
                        * qv.iter()
                            .zip(kr)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                })
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (p, j) in e.iter().zip(&keys) {
                let vr = &v[(j * nkv + g) * hd..][..hd];
                for d in 0..hd {
                    out[(i * nh + h) * hd + d] += p / sum * vr[d] as f64;
                }
            }
        }
    }
    out
}

/// Causal attention (same contract as the kernel).
#[allow(clippy::too_many_arguments)]
pub fn attention_causal(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    shape: AttnShape,
    n_past: usize,
    t: usize,
    scale: f32,
) -> Vec<f64> {
    attend(
        q,
        k_cache,
        v_cache,
        shape,
        t,
        |i| n_past + i + 1,
        None,
        scale,
    )
}

/// Bidirectional attention (same contract as the kernel).
#[allow(clippy::too_many_arguments)]
pub fn attention_full(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: AttnShape,
    s: usize,
    key_mask: Option<&[bool]>,
    scale: f32,
) -> Vec<f64> {
    attend(q, k, v, shape, s, |_| s, key_mask, scale)
}

/// Index of the first maximum.
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best
}

/// Full sort, descending by value then ascending by index, first k.
pub fn top_k(x: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = x.iter().copied().enumerate().collect();
    v.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.0.cmp(&b.0))
    });
    v.truncate(k);
    v
}

/// max |got − want| / max |want|: the error measure of a dot-product kernel (GEMV,
/// GEMM) against its f64 reference. Equal lengths are the caller's to check.
pub fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    let max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (g, w)| a.max((f64::from(*g) - w).abs()));
    err / max.max(1e-30)
}

/// max |got − want| / (1 + |want|): the error measure of element-wise f32 kernels
/// (norms, attention) against their f64 reference.
pub fn max_abs_scaled_err(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).fold(0f64, |a, (g, w)| {
        a.max((f64::from(*g) - w).abs() / (1.0 + w.abs()))
    })
}
