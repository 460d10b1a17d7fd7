//! The stochastic duration predictor as device-shaped steps (what the CUDA voice runs):
//! `pre` 1×1, DDSConv (per layer: depthwise dilated conv, layer norm, GELU, 1×1, layer
//! norm, GELU added into the residual), `proj`; then per reversed `ConvFlow` a flip
//! (the two noise rows swap roles), `pre(z0) + g` (one convolution with a residual),
//! the DDSConv, `proj` to the spline parameters and the inverse spline of `z1` in
//! place; the last flip and the affine `(z − m)·exp(−logs)` run on the host over the
//! `T` values that come back.
//!
//! Key design choice: the sequence ([`run`]) is generic over a [`DpBackend`], so the
//! float64 host backend of the unit test checks the very step order and buffer use
//! the GPU runs against the CPU [`DurationPredictor::run`] without a GPU.

use crate::error::VitsError;
use crate::model::DurationPredictor;
use crate::model::duration::{BINS, ConvFlow, DdsConv, TAIL};

/// One DDSConv layer's operands: depthwise `D`, dense `C`, vectors `V`.
#[derive(Debug)]
pub(crate) struct DdsLayer<C, D, V> {
    pub(crate) sep: D,
    pub(crate) pw: C,
    pub(crate) gamma1: V,
    pub(crate) beta1: V,
    pub(crate) gamma2: V,
    pub(crate) beta2: V,
}

/// One reversed `ConvFlow`'s operands; `scale` = 1/√filter on the widths and heights.
#[derive(Debug)]
pub(crate) struct DpFlow<C, D, V> {
    pub(crate) pre: C,
    pub(crate) convs: Vec<DdsLayer<C, D, V>>,
    pub(crate) proj: C,
    pub(crate) scale: f32,
}

/// The predictor's operands on a backend.
#[derive(Debug)]
pub(crate) struct DpWeights<C, D, V> {
    pub(crate) filter: usize,
    pub(crate) pre: C,
    pub(crate) convs: Vec<DdsLayer<C, D, V>>,
    pub(crate) proj: C,
    pub(crate) flows: Vec<DpFlow<C, D, V>>,
    pub(crate) m: f32,
    pub(crate) exp_neg_logs: f32,
}

impl<C, D, V> DpWeights<C, D, V> {
    /// `dp`'s weights mapped through the backend's constructors.
    pub(crate) fn build(
        dp: &DurationPredictor,
        conv: &mut impl FnMut(&crate::weights::Conv) -> Result<C, VitsError>,
        dw: &mut impl FnMut(&crate::weights::Conv) -> Result<D, VitsError>,
        vec: &mut impl FnMut(&[f32]) -> Result<V, VitsError>,
    ) -> Result<Self, VitsError> {
        let mut dds = |d: &DdsConv| -> Result<Vec<DdsLayer<C, D, V>>, VitsError> {
            (0..d.sep.len())
                .map(|i| {
                    Ok(DdsLayer {
                        sep: dw(&d.sep[i])?,
                        pw: conv(&d.pw[i])?,
                        gamma1: vec(d.n1[i].gamma())?,
                        beta1: vec(d.n1[i].beta())?,
                        gamma2: vec(d.n2[i].gamma())?,
                        beta2: vec(d.n2[i].beta())?,
                    })
                })
                .collect()
        };
        let convs = dds(&dp.convs)?;
        let mut flows = Vec::new();
        for f in &dp.flows {
            let ConvFlow {
                pre,
                convs,
                proj,
                filter,
            } = f;
            flows.push((dds(convs)?, pre, proj, *filter));
        }
        Ok(DpWeights {
            filter: dp.pre.out_channels(),
            pre: conv(&dp.pre)?,
            convs,
            proj: conv(&dp.proj)?,
            flows: flows
                .into_iter()
                .map(|(convs, pre, proj, filter)| {
                    Ok(DpFlow {
                        pre: conv(pre)?,
                        convs,
                        proj: conv(proj)?,
                        // The CPU's f32 expression, so the scaled parameters agree.
                        scale: 1.0 / (filter as f32).sqrt(),
                    })
                })
                .collect::<Result<_, VitsError>>()?,
            m: dp.m[0],
            exp_neg_logs: dp.exp_neg_logs[0],
        })
    }
}

/// What [`run`] needs of a device.
pub(crate) trait DpBackend {
    /// A `[rows, T]` f32 tensor.
    type Buf;
    /// A dense convolution.
    type Conv;
    /// A depthwise convolution.
    type Dw;
    /// A weight vector (norm parameters).
    type Vec;
    /// A tensor holding `v`.
    fn upload(&self, v: &[f32]) -> Result<Self::Buf, VitsError>;
    /// A tensor of `n` values.
    fn scratch(&self, n: usize) -> Result<Self::Buf, VitsError>;
    /// The first `n` values of `x`.
    fn download(&self, x: &Self::Buf, n: usize) -> Result<Vec<f32>, VitsError>;
    /// `y = conv(x) + bias (+ residual)`, same length; `y` aliases neither.
    fn conv(
        &self,
        c: &Self::Conv,
        x: &Self::Buf,
        len: usize,
        residual: Option<&Self::Buf>,
        y: &mut Self::Buf,
    ) -> Result<(), VitsError>;
    /// `y = depthwise(x) + bias`, same length.
    fn dw(
        &self,
        c: &Self::Dw,
        x: &Self::Buf,
        len: usize,
        y: &mut Self::Buf,
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
    /// `x = gelu(x)` over `n` values.
    fn gelu(&self, x: &mut Self::Buf, n: usize) -> Result<(), VitsError>;
    /// `acc += gelu(y)` over `n` values.
    fn gelu_add(&self, acc: &mut Self::Buf, y: &Self::Buf, n: usize) -> Result<(), VitsError>;
    /// `z = spline⁻¹(z)` with parameters `p [3·bins − 1, len]` (see
    /// `favlo_runtime::cuda::VitsDpOps::spline_inverse`).
    fn spline(
        &self,
        z: &mut Self::Buf,
        p: &Self::Buf,
        len: usize,
        bins: usize,
        scale: f32,
        bound: f32,
    ) -> Result<(), VitsError>;
}

/// The three `[filter, T]` temporaries of a DDSConv.
struct Temps<B> {
    s: B,
    y: B,
    p: B,
}

/// `x ← DDSConv(x)` (as the CPU's `DdsConv::run` after its `+ g`).
fn dds<B: DpBackend>(
    b: &B,
    layers: &[DdsLayer<B::Conv, B::Dw, B::Vec>],
    filter: usize,
    len: usize,
    x: &mut B::Buf,
    tmp: &mut Temps<B::Buf>,
) -> Result<(), VitsError> {
    let n = filter * len;
    for l in layers {
        b.dw(&l.sep, x, len, &mut tmp.s)?;
        b.norm(&tmp.s, filter, len, &l.gamma1, &l.beta1, &mut tmp.y)?;
        b.gelu(&mut tmp.y, n)?;
        b.conv(&l.pw, &tmp.y, len, None, &mut tmp.p)?;
        b.norm(&tmp.p, filter, len, &l.gamma2, &l.beta2, &mut tmp.y)?;
        b.gelu_add(x, &tmp.y, n)?;
    }
    Ok(())
}

/// `logw [T]` for encoder states `x [h, T]` on the backend and noise `[2, T]` already
/// scaled by `noise_w` (as [`DurationPredictor::run`]).
pub(crate) fn run<B: DpBackend>(
    b: &B,
    w: &DpWeights<B::Conv, B::Dw, B::Vec>,
    x: &B::Buf,
    len: usize,
    noise: &[f32],
) -> Result<Vec<f32>, VitsError> {
    if noise.len() != 2 * len || len == 0 {
        return Err(VitsError::Device {
            message: format!(
                "durations on CUDA: {} noise values for {len} phonemes",
                noise.len()
            ),
        });
    }
    let n = w.filter * len;
    let mut h = b.scratch(n)?;
    let mut tmp = Temps {
        s: b.scratch(n)?,
        y: b.scratch(n)?,
        p: b.scratch(n)?,
    };
    b.conv(&w.pre, x, len, None, &mut h)?;
    dds(b, &w.convs, w.filter, len, &mut h, &mut tmp)?;
    let mut g = b.scratch(n)?;
    b.conv(&w.proj, &h, len, None, &mut g)?;
    let mut z = [b.upload(&noise[..len])?, b.upload(&noise[len..])?];
    let mut params = b.scratch((3 * BINS - 1) * len)?;
    for f in &w.flows {
        z.swap(0, 1); // Flip
        b.conv(&f.pre, &z[0], len, Some(&g), &mut h)?;
        dds(b, &f.convs, w.filter, len, &mut h, &mut tmp)?;
        b.conv(&f.proj, &h, len, None, &mut params)?;
        b.spline(&mut z[1], &params, len, BINS, f.scale, TAIL)?;
    }
    // The flip before the affine: the first row after it is the last flow's z[1].
    let v = b.download(&z[1], len)?;
    Ok(v.iter().map(|v| (v - w.m) * w.exp_neg_logs).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use std::sync::Arc;

    use favlo_runtime::cpu::reference;
    use favlo_runtime::device::Device;
    use favlo_runtime::ledger::{Ledger, Owner};

    use super::*;
    use crate::model::{TextEncoder, spline};
    use crate::weights::{Conv, ConvKind, Loader, Workspace};

    /// `n` noise values in (-1.6, 1.6) from a xorshift32 generator in `state` (the
    /// duration predictor's input noise in these tests).
    pub(crate) fn noise(state: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *state ^= *state << 13;
                *state ^= *state >> 17;
                *state ^= *state << 5;
                (*state as f32 / u32::MAX as f32 * 2.0 - 1.0) * 1.6
            })
            .collect()
    }

    /// (max |got − want|, max |want|) in f64.
    pub(crate) fn max_err(got: &[f32], want: &[f32]) -> (f64, f64) {
        let max = want.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
        let err = got
            .iter()
            .zip(want)
            .fold(0f64, |a, (g, w)| a.max((*g as f64 - *w as f64).abs()));
        (err, max)
    }

    /// A convolution in f64: weight, bias, (in, out, kernel, dilation, padding).
    struct HConv {
        w: Vec<f64>,
        b: Vec<f64>,
        dims: [usize; 5],
    }

    fn hconv(c: &Conv) -> Result<HConv, VitsError> {
        let (ConvKind::Dense(g) | ConvKind::Depthwise(g)) = c.kind() else {
            panic!("transposed convolution in the duration predictor");
        };
        Ok(HConv {
            w: c.weight().iter().map(|v| *v as f64).collect(),
            b: c.bias().map_or(vec![0.0; g.out_channels], |b| {
                b.iter().map(|v| *v as f64).collect()
            }),
            dims: [
                g.in_channels,
                g.out_channels,
                g.kernel,
                g.dilation,
                g.padding,
            ],
        })
    }

    /// The float64 host backend: every step from its definition.
    struct Host;

    impl Host {
        fn conv_any(&self, c: &HConv, x: &[f64], len: usize, depthwise: bool) -> Vec<f64> {
            let [cin, cout, k, d, p] = c.dims;
            let mut y = vec![0f64; cout * len];
            for co in 0..cout {
                for t in 0..len {
                    let mut s = c.b[co];
                    let chans = if depthwise { co..co + 1 } else { 0..cin };
                    for ci in chans {
                        for tap in 0..k {
                            let i = t as isize - p as isize + (tap * d) as isize;
                            if (0..len as isize).contains(&i) {
                                let wi = if depthwise {
                                    co * k + tap
                                } else {
                                    (co * cin + ci) * k + tap
                                };
                                s += c.w[wi] * x[ci * len + i as usize];
                            }
                        }
                    }
                    y[co * len + t] = s;
                }
            }
            y
        }
    }

    impl DpBackend for Host {
        type Buf = Vec<f64>;
        type Conv = HConv;
        type Dw = HConv;
        type Vec = Vec<f64>;

        fn upload(&self, v: &[f32]) -> Result<Vec<f64>, VitsError> {
            Ok(v.iter().map(|v| *v as f64).collect())
        }
        fn scratch(&self, n: usize) -> Result<Vec<f64>, VitsError> {
            Ok(vec![f64::NAN; n])
        }
        fn download(&self, x: &Vec<f64>, n: usize) -> Result<Vec<f32>, VitsError> {
            Ok(x[..n].iter().map(|v| *v as f32).collect())
        }
        fn conv(
            &self,
            c: &HConv,
            x: &Vec<f64>,
            len: usize,
            residual: Option<&Vec<f64>>,
            y: &mut Vec<f64>,
        ) -> Result<(), VitsError> {
            let mut out = self.conv_any(c, x, len, false);
            if let Some(r) = residual {
                out.iter_mut().zip(r).for_each(|(o, r)| *o += r);
            }
            y[..out.len()].copy_from_slice(&out);
            Ok(())
        }
        fn dw(
            &self,
            c: &HConv,
            x: &Vec<f64>,
            len: usize,
            y: &mut Vec<f64>,
        ) -> Result<(), VitsError> {
            let out = self.conv_any(c, x, len, true);
            y[..out.len()].copy_from_slice(&out);
            Ok(())
        }
        fn norm(
            &self,
            x: &Vec<f64>,
            channels: usize,
            len: usize,
            gamma: &Vec<f64>,
            beta: &Vec<f64>,
            out: &mut Vec<f64>,
        ) -> Result<(), VitsError> {
            for t in 0..len {
                let col = (0..channels).map(|c| x[c * len + t]);
                let mean = col.clone().sum::<f64>() / channels as f64;
                let var = col.map(|v| (v - mean) * (v - mean)).sum::<f64>() / channels as f64;
                let inv = 1.0 / (var + 1e-5).sqrt();
                for c in 0..channels {
                    out[c * len + t] = (x[c * len + t] - mean) * inv * gamma[c] + beta[c];
                }
            }
            Ok(())
        }
        fn gelu(&self, x: &mut Vec<f64>, n: usize) -> Result<(), VitsError> {
            x[..n].iter_mut().for_each(|v| *v = reference::gelu(*v));
            Ok(())
        }
        fn gelu_add(&self, acc: &mut Vec<f64>, y: &Vec<f64>, n: usize) -> Result<(), VitsError> {
            for (a, v) in acc[..n].iter_mut().zip(y) {
                *a += reference::gelu(*v);
            }
            Ok(())
        }
        fn spline(
            &self,
            z: &mut Vec<f64>,
            p: &Vec<f64>,
            len: usize,
            bins: usize,
            scale: f32,
            bound: f32,
        ) -> Result<(), VitsError> {
            // The CPU's scalar inverse on the f32-rounded parameters: this test checks
            // the sequence's wiring (rows, flips, scales), the kernel has its own test.
            for t in 0..len {
                let at = |r: usize| p[r * len + t] as f32;
                let wv: Vec<f32> = (0..bins).map(|k| at(k) * scale).collect();
                let hv: Vec<f32> = (0..bins).map(|k| at(bins + k) * scale).collect();
                let dv: Vec<f32> = (0..bins - 1).map(|k| at(2 * bins + k)).collect();
                z[t] = spline::inverse(z[t] as f32, &wv, &hv, &dv, bound) as f64;
            }
            Ok(())
        }
    }

    #[test]
    fn dp_sequence_on_f64_host_matches_cpu() {
        let Some(path) = std::env::var_os("FAVLO_TEST_PIPER_ONNX") else {
            eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
            return;
        };
        let ledger: Arc<Ledger> = Ledger::new(Device::Cpu, None);
        let owner = Owner::mint("vits-dp-seq");
        let l = Loader::open(std::path::Path::new(&path), &ledger, &owner).unwrap();
        let enc = TextEncoder::load(&l).unwrap();
        let dp = DurationPredictor::load(&l).unwrap();
        let ws = Workspace::new(&ledger, &owner);
        let w = DpWeights::build(&dp, &mut hconv, &mut hconv, &mut |v: &[f32]| {
            Ok(v.iter().map(|v| *v as f64).collect())
        })
        .unwrap();
        let mut s = 0x2545_F491u32;
        for t in [17usize, 60] {
            let ids: Vec<i64> = (0..t).map(|i| 1 + (i as i64 * 37) % 120).collect();
            let e = enc.run(&ws, &ids).unwrap();
            let noise = noise(&mut s, 2 * t);
            let want = dp.run(&ws, &e.x, t, &noise).unwrap();
            let x: Vec<f64> = e.x.iter().map(|v| *v as f64).collect();
            let got = run(&Host, &w, &x, t, &noise).unwrap();
            let (err, max) = max_err(&got, &want);
            println!(
                "dp sequence (f64 host) vs CPU, {t} phonemes: max |Δlogw| / max |logw| {:.3e} (bound 1e-4)",
                err / max
            );
            assert!(err <= 1e-4 * max, "{t} phonemes: {err:e} vs max {max}");
            let frames = |v: &[f32]| crate::model::Vits::frames_of(v, 1.0);
            assert_eq!(frames(&got), frames(&want), "{t} phonemes: frames");
        }
    }
}
