//! Scalar f64 definitions of the [`super`] kernels, for tests.
//!
//! Key design choice: the transposed convolution is written as its textbook
//! scatter (every input pixel times every kernel tap, added where it lands, then
//! the padding cropped), not as a GEMM, so the test compares two independent
//! formulations.

use super::ConvTranspose2d;

/// `out[b, co, oy, ox]` in f64, the full (uncropped) output cropped by `padding`.
pub fn conv_transpose2d(
    x: &[f32],
    weight: &[f32],
    shape: ConvTranspose2d,
    batch: usize,
) -> Vec<f64> {
    let (cin, cout, kn, s, p) = (
        shape.in_channels,
        shape.out_channels,
        shape.kernel,
        shape.stride,
        shape.padding,
    );
    let (h, w) = (shape.in_h, shape.in_w);
    let (fh, fw) = ((h - 1) * s + kn, (w - 1) * s + kn);
    let (ho, wo) = (shape.out_h(), shape.out_w());
    let mut out = vec![0f64; batch * cout * ho * wo];
    let mut full = vec![0f64; cout * fh * fw];
    for b in 0..batch {
        full.iter_mut().for_each(|v| *v = 0.0);
        for ci in 0..cin {
            for iy in 0..h {
                for ix in 0..w {
                    let xv = x[((b * cin + ci) * h + iy) * w + ix] as f64;
                    for co in 0..cout {
                        for ky in 0..kn {
                            for kx in 0..kn {
                                let wv = weight[((ci * cout + co) * kn + ky) * kn + kx] as f64;
                                full[(co * fh + iy * s + ky) * fw + ix * s + kx] += xv * wv;
                            }
                        }
                    }
                }
            }
        }
        for co in 0..cout {
            for oy in 0..ho {
                for ox in 0..wo {
                    out[((b * cout + co) * ho + oy) * wo + ox] =
                        full[(co * fh + oy + p) * fw + ox + p];
                }
            }
        }
    }
    out
}

/// Inference batch norm over `x[b, C, spatial]` in f64 (unfolded formula).
pub fn batch_norm(
    x: &[f32],
    spatial: usize,
    weight: &[f32],
    bias: &[f32],
    mean: &[f32],
    var: &[f32],
    eps: f64,
) -> Vec<f64> {
    let c = weight.len();
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let ch = (i / spatial) % c;
            (*v as f64 - mean[ch] as f64) / (var[ch] as f64 + eps).sqrt() * weight[ch] as f64
                + bias[ch] as f64
        })
        .collect()
}

/// ReLU in f64.
pub fn relu(x: f64) -> f64 {
    x.max(0.0)
}

/// tanh in f64.
pub fn tanh(x: f64) -> f64 {
    x.tanh()
}
