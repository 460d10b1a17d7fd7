//! The text encoder's layer sequence as device-shaped steps (what the CUDA encoder
//! runs): 1×1 q/k/v, windowed relative attention, `o(att) + x` (one convolution with a
//! residual), channel layer norm, `ffn2(relu(ffn1(x))) + x` (the ReLU fused into ffn2's
//! input), layer norm, then the projection.
//!
//! Key design choice: the sequence ([`run`]) is generic over an [`EncBackend`], so the
//! float64 host backend of the unit test checks the very step order and buffer use the
//! GPU runs against the CPU [`crate::model::TextEncoder`], without a GPU.

use favlo_runtime::cpu::RelAttnShape;

use crate::error::VitsError;

/// One layer's operands on a backend: convolutions `C`, vectors `V`.
#[derive(Debug)]
pub(crate) struct EncLayer<C, V> {
    pub(crate) q: C,
    pub(crate) k: C,
    pub(crate) v: C,
    pub(crate) o: C,
    pub(crate) emb_k: V,
    pub(crate) emb_v: V,
    pub(crate) gamma1: V,
    pub(crate) beta1: V,
    pub(crate) ffn1: C,
    pub(crate) ffn2: C,
    pub(crate) gamma2: V,
    pub(crate) beta2: V,
}

/// What [`run`] needs of a device.
pub(crate) trait EncBackend {
    /// A `[rows, T]` f32 tensor.
    type Buf;
    /// A convolution.
    type Conv;
    /// A weight vector (relative embeddings, norm parameters).
    type Vec;
    /// A tensor holding `v`.
    fn upload(&self, v: &[f32]) -> Result<Self::Buf, VitsError>;
    /// A tensor of `n` values.
    fn scratch(&self, n: usize) -> Result<Self::Buf, VitsError>;
    /// `y = conv(relu?(x)) + bias (+ residual)`, same length; `y` aliases neither.
    fn conv(
        &self,
        c: &Self::Conv,
        x: &Self::Buf,
        len: usize,
        relu: bool,
        residual: Option<&Self::Buf>,
        y: &mut Self::Buf,
    ) -> Result<(), VitsError>;
    /// `out = attention(q, k, v)` with windowed relative keys / values.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Buf,
        k: &Self::Buf,
        v: &Self::Buf,
        emb_k: &Self::Vec,
        emb_v: &Self::Vec,
        shape: RelAttnShape,
        scores: &mut Self::Buf,
        out: &mut Self::Buf,
    ) -> Result<(), VitsError>;
    /// `out = LN(x[channels, len])` over channels.
    fn norm(
        &self,
        x: &Self::Buf,
        channels: usize,
        len: usize,
        gamma: &Self::Vec,
        beta: &Self::Vec,
        out: &mut Self::Buf,
    ) -> Result<(), VitsError>;
}

/// Sizes of the encoder: hidden and FFN channels, projection rows, attention shape
/// (its `len` ignored).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EncDims {
    pub(crate) hidden: usize,
    pub(crate) ffn: usize,
    pub(crate) proj_out: usize,
    pub(crate) shape: RelAttnShape,
}

/// Hidden states `[hidden, T]` and `[m; logs]` `[proj_out, T]` of the embedded ids
/// `x_host [hidden, T]` (as [`crate::model::TextEncoder::run`]).
pub(crate) fn run<B: EncBackend>(
    b: &B,
    layers: &[EncLayer<B::Conv, B::Vec>],
    proj: &B::Conv,
    dims: EncDims,
    x_host: &[f32],
    t: usize,
) -> Result<(B::Buf, B::Buf), VitsError> {
    let h = dims.hidden;
    if x_host.len() != h * t || t == 0 {
        return Err(VitsError::Device {
            message: format!(
                "text encoder on CUDA: {} values for [{h}, {t}]",
                x_host.len()
            ),
        });
    }
    let shape = RelAttnShape {
        len: t,
        ..dims.shape
    };
    let mut x = b.upload(x_host)?;
    let [mut q, mut k, mut v, mut att, mut y] = [
        b.scratch(h * t)?,
        b.scratch(h * t)?,
        b.scratch(h * t)?,
        b.scratch(h * t)?,
        b.scratch(h * t)?,
    ];
    let mut scores = b.scratch(shape.scratch_len())?;
    let mut f = b.scratch(dims.ffn * t)?;
    for l in layers {
        b.conv(&l.q, &x, t, false, None, &mut q)?;
        b.conv(&l.k, &x, t, false, None, &mut k)?;
        b.conv(&l.v, &x, t, false, None, &mut v)?;
        b.attention(&q, &k, &v, &l.emb_k, &l.emb_v, shape, &mut scores, &mut att)?;
        b.conv(&l.o, &att, t, false, Some(&x), &mut y)?;
        b.norm(&y, h, t, &l.gamma1, &l.beta1, &mut x)?;
        b.conv(&l.ffn1, &x, t, false, None, &mut f)?;
        b.conv(&l.ffn2, &f, t, true, Some(&x), &mut y)?;
        b.norm(&y, h, t, &l.gamma2, &l.beta2, &mut x)?;
    }
    drop((q, k, v, att, y, scores, f));
    let mut stats = b.scratch(dims.proj_out * t)?;
    b.conv(proj, &x, t, false, None, &mut stats)?;
    Ok((x, stats))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The sequence on a float64 host backend against the CPU encoder on the real
    //! voice (`FAVLO_TEST_PIPER_ONNX`), on the fixture-like ids of two sentences.

    use super::*;
    use crate::cuda::flow_plan::Dense;
    use crate::model::TextEncoder;
    use crate::model::encoder::LN_EPS;
    use crate::weights::{Loader, Workspace};
    use favlo_runtime::device::Device;
    use favlo_runtime::ledger::{Ledger, Owner};

    /// Each step in f64 from the f32 operands, rounded to f32 once.
    struct Host;

    impl EncBackend for Host {
        type Buf = Vec<f32>;
        type Conv = Dense;
        type Vec = Vec<f32>;
        fn upload(&self, v: &[f32]) -> Result<Vec<f32>, VitsError> {
            Ok(v.to_vec())
        }
        fn scratch(&self, n: usize) -> Result<Vec<f32>, VitsError> {
            Ok(vec![f32::NAN; n])
        }
        fn conv(
            &self,
            c: &Dense,
            x: &Vec<f32>,
            len: usize,
            relu: bool,
            residual: Option<&Vec<f32>>,
            y: &mut Vec<f32>,
        ) -> Result<(), VitsError> {
            let g = c.geo;
            for co in 0..g.out_channels {
                for t in 0..len {
                    let mut acc = c.bias.as_ref().map_or(0.0, |b| b[co] as f64);
                    for ci in 0..g.in_channels {
                        for k in 0..g.kernel {
                            let ti = t as isize - g.padding as isize + (k * g.dilation) as isize;
                            if ti >= 0 && (ti as usize) < len {
                                let xv = x[ci * len + ti as usize] as f64;
                                let xv = if relu { xv.max(0.0) } else { xv };
                                acc +=
                                    c.weight[(co * g.in_channels + ci) * g.kernel + k] as f64 * xv;
                            }
                        }
                    }
                    if let Some(r) = residual {
                        acc += r[co * len + t] as f64;
                    }
                    y[co * len + t] = acc as f32;
                }
            }
            Ok(())
        }
        fn attention(
            &self,
            q: &Vec<f32>,
            k: &Vec<f32>,
            v: &Vec<f32>,
            ek: &Vec<f32>,
            ev: &Vec<f32>,
            s: RelAttnShape,
            _scores: &mut Vec<f32>,
            out: &mut Vec<f32>,
        ) -> Result<(), VitsError> {
            let (d, t, w) = (s.head_dim, s.len, s.window as isize);
            for h in 0..s.heads {
                let at = |m: &[f32], c: usize, j: usize| m[(h * d + c) * t + j] as f64;
                for i in 0..t {
                    let rel = |j: usize| {
                        let r = j as isize - i as isize + w;
                        (0..=2 * w).contains(&r).then_some(r as usize)
                    };
                    let logits: Vec<f64> = (0..t)
                        .map(|j| {
                            (0..d)
                                .map(|c| {
                                    let kk =
                                        at(k, c, j) + rel(j).map_or(0.0, |r| ek[r * d + c] as f64);
                                    at(q, c, i) * kk
                                })
                                .sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        let acc: f64 = (0..t)
                            .map(|j| {
                                let vv = at(v, c, j) + rel(j).map_or(0.0, |r| ev[r * d + c] as f64);
                                e[j] / sum * vv
                            })
                            .sum();
                        out[(h * d + c) * t + i] = acc as f32;
                    }
                }
            }
            Ok(())
        }
        fn norm(
            &self,
            x: &Vec<f32>,
            c: usize,
            t: usize,
            g: &Vec<f32>,
            b: &Vec<f32>,
            out: &mut Vec<f32>,
        ) -> Result<(), VitsError> {
            for col in 0..t {
                let vals: Vec<f64> = (0..c).map(|r| x[r * t + col] as f64).collect();
                let mean = vals.iter().sum::<f64>() / c as f64;
                let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
                for r in 0..c {
                    let n = (vals[r] - mean) / (var + LN_EPS as f64).sqrt();
                    out[r * t + col] = (n * g[r] as f64 + b[r] as f64) as f32;
                }
            }
            Ok(())
        }
    }

    fn rel(got: &[f32], want: &[f32]) -> f64 {
        assert_eq!(got.len(), want.len());
        let peak = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        let err = got
            .iter()
            .zip(want)
            .fold(0f64, |m, (g, w)| m.max((*g as f64 - *w as f64).abs()));
        err / peak
    }

    #[test]
    fn sequence_matches_cpu_encoder() {
        let Some(path) = std::env::var_os("FAVLO_TEST_PIPER_ONNX") else {
            eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX");
            return;
        };
        let ledger = Ledger::new(Device::Cpu, None);
        let owner = Owner::mint("encoder-seq-test");
        let l = Loader::open(std::path::Path::new(&path), &ledger, &owner).unwrap();
        let enc = TextEncoder::load(&l).unwrap();
        let ws = Workspace::new(&ledger, &owner);
        let h = enc.hidden();
        let dense = |c: &crate::weights::Conv| {
            Dense::of(c, "test", c.in_channels(), c.out_channels()).unwrap()
        };
        let layers: Vec<EncLayer<Dense, Vec<f32>>> = enc
            .layers()
            .iter()
            .map(|l| EncLayer {
                q: dense(&l.q),
                k: dense(&l.k),
                v: dense(&l.v),
                o: dense(&l.o),
                emb_k: l.emb_k.to_vec(),
                emb_v: l.emb_v.to_vec(),
                gamma1: l.norm1.gamma().to_vec(),
                beta1: l.norm1.beta().to_vec(),
                ffn1: dense(&l.ffn1),
                ffn2: dense(&l.ffn2),
                gamma2: l.norm2.gamma().to_vec(),
                beta2: l.norm2.beta().to_vec(),
            })
            .collect();
        let dims = EncDims {
            hidden: h,
            ffn: enc.layers()[0].ffn1.out_channels(),
            proj_out: enc.proj().out_channels(),
            shape: enc.attn_shape(0),
        };
        let proj = dense(enc.proj());
        // Phoneme ids of a short and a longer sentence (any ids inside the vocabulary).
        for ids in [
            vec![1i64, 0, 20, 0, 59, 0, 120, 0, 3, 0, 2],
            (0..40)
                .map(|i| [1i64, 0, 25, 0, 88, 121, 0, 14, 0, 3][i % 10])
                .collect(),
        ] {
            let t = ids.len();
            let cpu = enc.run(&ws, &ids).unwrap();
            let x0 = enc.embed(&ws, &ids).unwrap();
            let (x, stats) = run(&Host, &layers, &proj, dims, &x0, t).unwrap();
            let c = cpu.m.len() / t;
            let (ex, em, el) = (
                rel(&x, &cpu.x),
                rel(&stats[..c * t], &cpu.m),
                rel(&stats[c * t..], &cpu.logs),
            );
            println!(
                "encoder sequence, {t} ids: rel err x {ex:.2e}, m {em:.2e}, logs {el:.2e} (bound 1e-4)"
            );
            assert!(ex <= 1e-4 && em <= 1e-4 && el <= 1e-4, "{t} ids");
        }
    }
}
