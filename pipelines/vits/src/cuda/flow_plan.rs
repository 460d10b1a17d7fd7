//! The reverse flow as a fixed sequence of device-shaped steps (what the CUDA flow
//! runs), built on the host from the CPU [`Flow`]'s weights.
//!
//! Key design choice: the channel flips and the coupling's `x1 −= m` are folded into
//! the weights at plan time, so a device runs only dense convolutions (overwrite or
//! accumulate), the WaveNet gate and two row copies. `z` is held as its two physical
//! halves (rows `0..C/2` and `C/2..C`, as the CPU holds them before its final un-flip):
//! a flipped coupling reads the upper half through a `pre` whose input channels are
//! reversed and writes the lower half through a `post` whose output rows are reversed;
//! `post` is negated, so "accumulate into the half" is `x1 − m` exactly (negation is
//! exact in f32); each WaveNet 1×1 res/skip layer is split into its residual rows
//! (accumulated into `h`) and its skip rows (accumulated into the skip sum, the first
//! layer overwriting it). The sequence ([`run`]) is generic over a [`Backend`], so the
//! host reference backend in the tests checks the very step sequence the GPU runs.

use std::ops::Range;

use favlo_runtime::cpu::Conv1d;

use crate::error::VitsError;
use crate::model::Flow;
use crate::weights::{Conv, ConvKind};

fn unsupported(what: String) -> VitsError {
    VitsError::Device {
        message: format!("flow on CUDA: {what}"),
    }
}

/// A dense, length-preserving convolution's host weights.
#[derive(Clone, Debug)]
pub(crate) struct Dense {
    pub(crate) geo: Conv1d,
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Option<Vec<f32>>,
}

impl Dense {
    /// `c`, which must be dense with `out_len(L) == L` and `cin → cout` channels.
    pub(crate) fn of(c: &Conv, name: &str, cin: usize, cout: usize) -> Result<Self, VitsError> {
        let ConvKind::Dense(geo) = c.kind() else {
            return Err(unsupported(format!("{name} is not a dense convolution")));
        };
        let same = 2 * geo.padding == geo.dilation * geo.kernel.saturating_sub(1);
        if !same || geo.kernel == 0 || geo.in_channels != cin || geo.out_channels != cout {
            return Err(unsupported(format!(
                "{name}: {geo:?}, expected {cin} → {cout} channels, length-preserving"
            )));
        }
        if c.weight().len() != geo.weight_len() || c.bias().is_some_and(|b| b.len() != cout) {
            return Err(unsupported(format!("{name}: weight/bias sizes")));
        }
        Ok(Dense {
            geo,
            weight: c.weight().to_vec(),
            bias: c.bias().map(<[f32]>::to_vec),
        })
    }

    /// Values per output row of the weight.
    fn row(&self) -> usize {
        self.geo.in_channels * self.geo.kernel
    }

    /// Output rows `r` only.
    fn rows(&self, r: Range<usize>) -> Dense {
        let w = self.row();
        Dense {
            geo: Conv1d {
                out_channels: r.len(),
                ..self.geo
            },
            weight: self.weight[r.start * w..r.end * w].to_vec(),
            bias: self.bias.as_ref().map(|b| b[r].to_vec()),
        }
    }

    /// Input channel `i` becomes `Cin − 1 − i`.
    fn reverse_inputs(&self) -> Dense {
        let (cin, k) = (self.geo.in_channels, self.geo.kernel);
        let mut weight = self.weight.clone();
        for (dst, src) in weight
            .chunks_exact_mut(cin * k)
            .zip(self.weight.chunks_exact(cin * k))
        {
            for i in 0..cin {
                let j = cin - 1 - i;
                dst[i * k..(i + 1) * k].copy_from_slice(&src[j * k..(j + 1) * k]);
            }
        }
        Dense {
            weight,
            ..self.clone()
        }
    }

    /// `−conv`, with output row `o` becoming `Cout − 1 − o` when `reverse`.
    fn negated(&self, reverse: bool) -> Dense {
        let (cout, w) = (self.geo.out_channels, self.row());
        let src = |o: usize| if reverse { cout - 1 - o } else { o };
        let weight = (0..cout)
            .flat_map(|o| self.weight[src(o) * w..(src(o) + 1) * w].iter().map(|v| -v))
            .collect();
        let bias = self
            .bias
            .as_ref()
            .map(|b| (0..cout).map(|o| -b[src(o)]).collect());
        Dense {
            geo: self.geo,
            weight,
            bias,
        }
    }
}

/// One WaveNet layer: `a = conv_in(h)`, `acts = gate(a)`, `h += res(acts)` (all but
/// the last layer), `skip (+)= skip(acts)`.
#[derive(Debug)]
pub(crate) struct Layer<C> {
    pub(crate) conv_in: C,
    pub(crate) res: Option<C>,
    pub(crate) skip: C,
}

/// One coupling: `h = pre(x0)`, the WaveNet, `x1 += post(skip)` (`post` negated).
#[derive(Debug)]
pub(crate) struct Step<C> {
    /// Reads the upper half and writes the lower one (else the other way round).
    pub(crate) flipped: bool,
    pub(crate) pre: C,
    pub(crate) layers: Vec<Layer<C>>,
    pub(crate) post: C,
}

/// The whole reverse flow.
#[derive(Debug)]
pub(crate) struct Plan<C> {
    pub(crate) channels: usize,
    pub(crate) hidden: usize,
    pub(crate) steps: Vec<Step<C>>,
    /// Whether the logical channel order ends reversed (an odd number of couplings).
    pub(crate) final_flip: bool,
}

impl Plan<Dense> {
    /// The plan of `flow` (its couplings in run order, each preceded by a flip).
    pub(crate) fn of(flow: &Flow) -> Result<Self, VitsError> {
        let c = flow.channels();
        let half = c / 2;
        let hidden = flow
            .couplings()
            .first()
            .map_or(0, |cp| cp.pre.out_channels());
        let mut flipped = false;
        let mut steps = Vec::new();
        for (s, cp) in flow.couplings().iter().enumerate() {
            flipped = !flipped;
            let pre = Dense::of(&cp.pre, &format!("coupling {s} pre"), half, hidden)?;
            let wn = &cp.enc;
            if wn.hidden != hidden || wn.ins.len() != wn.res_skip.len() {
                return Err(unsupported(format!("coupling {s}: WaveNet shape")));
            }
            let n = wn.ins.len();
            let mut layers = Vec::with_capacity(n);
            for (i, (ci, rs)) in wn.ins.iter().zip(&wn.res_skip).enumerate() {
                let conv_in = Dense::of(ci, &format!("coupling {s} in {i}"), hidden, 2 * hidden)?;
                let name = format!("coupling {s} res_skip {i}");
                layers.push(if i + 1 < n {
                    let rs = Dense::of(rs, &name, hidden, 2 * hidden)?;
                    Layer {
                        conv_in,
                        res: Some(rs.rows(0..hidden)),
                        skip: rs.rows(hidden..2 * hidden),
                    }
                } else {
                    Layer {
                        conv_in,
                        res: None,
                        skip: Dense::of(rs, &name, hidden, hidden)?,
                    }
                });
            }
            let post = Dense::of(&cp.post, &format!("coupling {s} post"), hidden, half)?;
            steps.push(Step {
                flipped,
                pre: if flipped { pre.reverse_inputs() } else { pre },
                layers,
                post: post.negated(flipped),
            });
        }
        Ok(Plan {
            channels: c,
            hidden,
            steps,
            final_flip: flipped,
        })
    }

    /// The same plan with every convolution turned into `f(conv)` (e.g. uploaded).
    pub(crate) fn map<D>(
        &self,
        mut f: impl FnMut(&Dense) -> Result<D, VitsError>,
    ) -> Result<Plan<D>, VitsError> {
        let mut steps = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let mut layers = Vec::with_capacity(s.layers.len());
            for l in &s.layers {
                layers.push(Layer {
                    conv_in: f(&l.conv_in)?,
                    res: l.res.as_ref().map(&mut f).transpose()?,
                    skip: f(&l.skip)?,
                });
            }
            steps.push(Step {
                flipped: s.flipped,
                pre: f(&s.pre)?,
                layers,
                post: f(&s.post)?,
            });
        }
        Ok(Plan {
            channels: self.channels,
            hidden: self.hidden,
            steps,
            final_flip: self.final_flip,
        })
    }

    /// Weight and bias values of the whole plan.
    pub(crate) fn values(&self) -> usize {
        let n = |d: &Dense| d.weight.len() + d.bias.as_ref().map_or(0, Vec::len);
        self.steps
            .iter()
            .map(|s| {
                n(&s.pre)
                    + n(&s.post)
                    + s.layers
                        .iter()
                        .map(|l| n(&l.conv_in) + l.res.as_ref().map_or(0, n) + n(&l.skip))
                        .sum::<usize>()
            })
            .sum()
    }
}

impl<C> Plan<C> {
    /// f32 values of a `frames`-frame sentence's working set at its peak (two halves,
    /// `h`, `a`, the gate's output, the skip sum, then the joined `z`).
    pub(crate) fn scratch_per_frame(&self) -> usize {
        2 * self.channels + 5 * self.hidden
    }
}

/// What [`run`] needs of a device.
pub(crate) trait Backend {
    /// A `[rows, len]` f32 tensor.
    type Buf;
    /// A convolution of the plan.
    type Conv;
    /// A tensor holding `v`.
    fn upload(&self, v: &[f32]) -> Result<Self::Buf, VitsError>;
    /// A zeroed tensor of `n` values.
    fn scratch(&self, n: usize) -> Result<Self::Buf, VitsError>;
    /// `y = conv(x) + bias` (`+ y` before, when `accumulate`), `x` and `y` of length
    /// `len`; `y` does not alias `x`.
    fn conv(
        &self,
        c: &Self::Conv,
        x: &Self::Buf,
        len: usize,
        accumulate: bool,
        y: &mut Self::Buf,
    ) -> Result<(), VitsError>;
    /// `out[c, t] = tanh(a[c, t]) · σ(a[channels + c, t])`.
    fn gate(
        &self,
        a: &Self::Buf,
        channels: usize,
        len: usize,
        out: &mut Self::Buf,
    ) -> Result<(), VitsError>;
    /// Rows `dst_row..dst_row + rows` of `dst` = `src` (row order reversed when
    /// `reverse`).
    fn copy_rows(
        &self,
        src: &Self::Buf,
        rows: usize,
        len: usize,
        reverse: bool,
        dst: &mut Self::Buf,
        dst_row: usize,
    ) -> Result<(), VitsError>;
}

/// `z = flow⁻¹(z_p)` `[C, len]` on `b` (as [`Flow::reverse`]).
pub(crate) fn run<B: Backend>(
    b: &B,
    plan: &Plan<B::Conv>,
    z_p: &[f32],
    len: usize,
) -> Result<B::Buf, VitsError> {
    let (c, hid) = (plan.channels, plan.hidden);
    let half = c / 2;
    if z_p.len() != c * len || len == 0 {
        return Err(VitsError::Noise {
            name: "z_p",
            expected: c * len.max(1),
            found: z_p.len(),
        });
    }
    let (lo, hi) = z_p.split_at(half * len);
    let mut halves = [b.upload(lo)?, b.upload(hi)?];
    let mut h = b.scratch(hid * len)?;
    let mut a = b.scratch(2 * hid * len)?;
    let mut acts = b.scratch(hid * len)?;
    let mut skip = b.scratch(hid * len)?;
    for step in &plan.steps {
        let (src, dst) = if step.flipped { (1, 0) } else { (0, 1) };
        b.conv(&step.pre, &halves[src], len, false, &mut h)?;
        for (i, l) in step.layers.iter().enumerate() {
            b.conv(&l.conv_in, &h, len, false, &mut a)?;
            b.gate(&a, hid, len, &mut acts)?;
            if let Some(res) = &l.res {
                b.conv(res, &acts, len, true, &mut h)?;
            }
            b.conv(&l.skip, &acts, len, i > 0, &mut skip)?;
        }
        b.conv(&step.post, &skip, len, true, &mut halves[dst])?;
    }
    drop((h, a, acts, skip));
    let mut z = b.scratch(c * len)?;
    let [lo, hi] = &halves;
    // Un-flipping reverses all rows: z = [rev(hi); rev(lo)].
    let (first, second) = if plan.final_flip { (hi, lo) } else { (lo, hi) };
    b.copy_rows(first, half, len, plan.final_flip, &mut z, 0)?;
    b.copy_rows(second, half, len, plan.final_flip, &mut z, half)?;
    Ok(z)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The plan's step sequence on a float64 host backend against the CPU flow on the
    //! real voice (`FAVLO_TEST_PIPER_ONNX`), on seeded prior samples.

    use super::*;
    use crate::noise::Normals;
    use crate::weights::{Loader, Workspace};
    use favlo_runtime::device::Device;
    use favlo_runtime::ledger::{Ledger, Owner};

    /// Each step in f64 from the f32 operands, rounded to f32 once (as a device does).
    struct Host;

    impl Backend for Host {
        type Buf = Vec<f32>;
        type Conv = Dense;
        fn upload(&self, v: &[f32]) -> Result<Vec<f32>, VitsError> {
            Ok(v.to_vec())
        }
        fn scratch(&self, n: usize) -> Result<Vec<f32>, VitsError> {
            Ok(vec![0.0; n])
        }
        fn conv(
            &self,
            c: &Dense,
            x: &Vec<f32>,
            len: usize,
            accumulate: bool,
            y: &mut Vec<f32>,
        ) -> Result<(), VitsError> {
            let g = c.geo;
            assert!(x.len() >= g.in_channels * len && y.len() >= g.out_channels * len);
            for co in 0..g.out_channels {
                for t in 0..len {
                    let mut acc = c.bias.as_ref().map_or(0.0, |b| b[co] as f64);
                    for ci in 0..g.in_channels {
                        for k in 0..g.kernel {
                            let ti = t as isize - g.padding as isize + (k * g.dilation) as isize;
                            if ti >= 0 && (ti as usize) < len {
                                acc += c.weight[(co * g.in_channels + ci) * g.kernel + k] as f64
                                    * x[ci * len + ti as usize] as f64;
                            }
                        }
                    }
                    let o = &mut y[co * len + t];
                    *o = if accumulate {
                        *o + acc as f32
                    } else {
                        acc as f32
                    };
                }
            }
            Ok(())
        }
        fn gate(
            &self,
            a: &Vec<f32>,
            channels: usize,
            len: usize,
            out: &mut Vec<f32>,
        ) -> Result<(), VitsError> {
            let n = channels * len;
            for i in 0..n {
                let (t, s) = (a[i] as f64, a[n + i] as f64);
                out[i] = (t.tanh() / (1.0 + (-s).exp())) as f32;
            }
            Ok(())
        }
        fn copy_rows(
            &self,
            src: &Vec<f32>,
            rows: usize,
            len: usize,
            reverse: bool,
            dst: &mut Vec<f32>,
            dst_row: usize,
        ) -> Result<(), VitsError> {
            for r in 0..rows {
                let s = if reverse { rows - 1 - r } else { r };
                dst[(dst_row + r) * len..(dst_row + r + 1) * len]
                    .copy_from_slice(&src[s * len..(s + 1) * len]);
            }
            Ok(())
        }
    }

    #[test]
    fn plan_matches_cpu_flow() {
        let Some(path) = std::env::var_os("FAVLO_TEST_PIPER_ONNX") else {
            eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX");
            return;
        };
        let ledger = Ledger::new(Device::Cpu, None);
        let owner = Owner::mint("flow-plan-test");
        let l = Loader::open(std::path::Path::new(&path), &ledger, &owner).unwrap();
        let flow = Flow::load(&l).unwrap();
        let ws = Workspace::new(&ledger, &owner);
        let plan = Plan::of(&flow).unwrap();
        assert_eq!(plan.steps.len(), 4);
        assert!(!plan.final_flip);
        let c = flow.channels();
        for (len, seed) in [(37usize, 1u64), (200, 2)] {
            let z_p = Normals::for_sentence(seed, 0).take(c * len);
            let mut want = z_p.clone();
            flow.reverse(&ws, &mut want, len).unwrap();
            let got = run(&Host, &plan, &z_p, len).unwrap();
            let peak = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let err = got
                .iter()
                .zip(want.iter())
                .fold(0f64, |m, (g, w)| m.max((*g as f64 - *w as f64).abs()));
            println!(
                "flow plan, {len} frames: max |Δ| {err:.3e}, peak {peak:.3} (bound 1e-4 · peak)"
            );
            assert!(err <= 1e-4 * peak, "{len}: {err:e} vs peak {peak}");
        }
    }

    #[test]
    fn reversals_are_the_index_maps() {
        let geo = Conv1d {
            in_channels: 3,
            out_channels: 2,
            kernel: 2,
            dilation: 1,
            padding: 0,
        };
        let d = Dense {
            geo,
            weight: (0..12).map(|v| v as f32 + 1.0).collect(),
            bias: Some(vec![0.5, -2.0]),
        };
        // [o][i][k]: o0 = [1 2 | 3 4 | 5 6], o1 = [7 8 | 9 10 | 11 12]
        assert_eq!(
            d.reverse_inputs().weight,
            [5., 6., 3., 4., 1., 2., 11., 12., 9., 10., 7., 8.]
        );
        let n = d.negated(true);
        assert_eq!(
            n.weight,
            [
                -7., -8., -9., -10., -11., -12., -1., -2., -3., -4., -5., -6.
            ]
        );
        assert_eq!(n.bias, Some(vec![2.0, -0.5]));
        let r = d.rows(1..2);
        assert_eq!(r.geo.out_channels, 1);
        assert_eq!(r.weight, [7., 8., 9., 10., 11., 12.]);
        assert_eq!(r.bias, Some(vec![-2.0]));
    }
}
