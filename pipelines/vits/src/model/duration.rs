//! The stochastic duration predictor (`dp`) run in reverse: conditioning
//! `pre → DDSConv → proj` on the encoder states, then noise `[2, T]` (scaled by
//! `noise_w`) through the reversed flows — channel flips, `ConvFlow`s (a
//! DDSConv-conditioned inverse rational-quadratic spline on the second
//! channel) and the element-wise affine — to `logw`.
//!
//! Key design choice: the flow order follows VITS's reverse path exactly:
//! `reversed(flows)` without its second-to-last entry (the first `ConvFlow`,
//! "a useless vflow"); the ONNX graph carries no weights for it either. The
//! affine's `exp(-logs)` is read as the graph's folded constant.

use favlo_runtime::cpu;

use crate::error::VitsError;
use crate::model::encoder::Norm;
use crate::model::spline;
use crate::weights::{Conv, Loader, Workspace};

/// Spline bins of VITS's `ConvFlow`.
pub(crate) const BINS: usize = 10;
/// Spline tail bound.
pub(crate) const TAIL: f32 = 5.0;

/// Dilated depth-separable conv stack (`modules.DDSConv`).
#[derive(Debug)]
pub(crate) struct DdsConv {
    pub(crate) sep: Vec<Conv>,
    pub(crate) pw: Vec<Conv>,
    pub(crate) n1: Vec<Norm>,
    pub(crate) n2: Vec<Norm>,
}

impl DdsConv {
    fn load(l: &Loader<'_>, prefix: &str, channels: usize) -> Result<Self, VitsError> {
        let mut d = DdsConv {
            sep: Vec::new(),
            pw: Vec::new(),
            n1: Vec::new(),
            n2: Vec::new(),
        };
        let mut i = 0;
        while l.has_conv(&format!("{prefix}.convs_sep.{i}")) {
            d.sep
                .push(l.conv(&format!("{prefix}.convs_sep.{i}"), None)?);
            d.pw.push(l.conv(&format!("{prefix}.convs_1x1.{i}"), None)?);
            d.n1.push(Norm::load(l, &format!("{prefix}.norms_1.{i}"), channels)?);
            d.n2.push(Norm::load(l, &format!("{prefix}.norms_2.{i}"), channels)?);
            i += 1;
        }
        Ok(d)
    }

    /// `x ← DDSConv(x + g)` in place.
    fn run(
        &self,
        ws: &Workspace,
        x: &mut [f32],
        g: Option<&[f32]>,
        len: usize,
    ) -> Result<(), VitsError> {
        if let Some(g) = g {
            cpu::add(x, g);
        }
        let mut y = ws.buf(x.len())?;
        for i in 0..self.sep.len() {
            let s = self.sep[i].run(ws, x, len)?;
            self.n1[i].run(&s, len, &mut y);
            cpu::gelu(&mut y);
            let p = self.pw[i].run(ws, &y, len)?;
            self.n2[i].run(&p, len, &mut y);
            cpu::gelu(&mut y);
            cpu::add(x, &y);
        }
        Ok(())
    }
}

/// A `ConvFlow`: `pre` (1 → filter), a DDSConv conditioned on the predictor's `g`,
/// `proj` (filter → 3·BINS − 1 spline parameters).
#[derive(Debug)]
pub(crate) struct ConvFlow {
    pub(crate) pre: Conv,
    pub(crate) convs: DdsConv,
    pub(crate) proj: Conv,
    pub(crate) filter: usize,
}

/// The loaded duration predictor.
#[derive(Debug)]
pub struct DurationPredictor {
    pub(crate) pre: Conv,
    pub(crate) convs: DdsConv,
    pub(crate) proj: Conv,
    /// Reverse order: flows 7, 5, 3 (each after a flip).
    pub(crate) flows: Vec<ConvFlow>,
    pub(crate) m: [f32; 2],
    pub(crate) exp_neg_logs: [f32; 2],
}

impl DurationPredictor {
    /// Loads `dp.*`.
    pub fn load(l: &Loader<'_>) -> Result<Self, VitsError> {
        let pre = l.conv("dp.pre", None)?;
        let filter = pre.out_channels();
        let mut flows = Vec::new();
        let mut i = 3;
        while l.has_conv(&format!("dp.flows.{i}.pre")) {
            let p = format!("dp.flows.{i}");
            let proj = l.conv(&format!("{p}.proj"), None)?;
            if proj.out_channels() != 3 * BINS - 1 {
                return Err(VitsError::Graph {
                    path: Default::default(),
                    what: format!("{p}.proj"),
                    reason: format!("{} outputs, expected {}", proj.out_channels(), 3 * BINS - 1),
                });
            }
            let pre = l.conv(&format!("{p}.pre"), None)?;
            flows.push(ConvFlow {
                filter: pre.out_channels(),
                convs: DdsConv::load(l, &format!("{p}.convs"), pre.out_channels())?,
                pre,
                proj,
            });
            i += 2;
        }
        flows.reverse();
        let (m, _) = l.values("dp.flows.0.m", Some(&[2, 1]))?;
        let (e, _) = l.values("/dp/flows.0/Exp_output_0", Some(&[2, 1]))?;
        Ok(DurationPredictor {
            convs: DdsConv::load(l, "dp.convs", filter)?,
            proj: l.conv("dp.proj", None)?,
            pre,
            flows,
            m: [m[0], m[1]],
            exp_neg_logs: [e[0], e[1]],
        })
    }

    /// `logw [T]` for encoder states `x [h, T]` and noise `[2, T]` already scaled
    /// by `noise_w`.
    pub fn run(
        &self,
        ws: &Workspace,
        x: &[f32],
        len: usize,
        noise: &[f32],
    ) -> Result<Vec<f32>, VitsError> {
        let mut h = self.pre.run(ws, x, len)?;
        self.convs.run(ws, &mut h, None, len)?;
        let g = self.proj.run(ws, &h, len)?;
        let mut z: [Vec<f32>; 2] = [noise[..len].to_vec(), noise[len..2 * len].to_vec()];
        for flow in &self.flows {
            z.swap(0, 1); // Flip
            let mut hh = flow.pre.run(ws, &z[0], len)?;
            flow.convs.run(ws, &mut hh, Some(&g), len)?;
            let p = flow.proj.run(ws, &hh, len)?;
            let s = 1.0 / (flow.filter as f32).sqrt();
            let mut wv = [0f32; BINS];
            let mut hv = [0f32; BINS];
            let mut dv = [0f32; BINS - 1];
            for t in 0..len {
                let at = |k: usize| p[k * len + t];
                (0..BINS).for_each(|k| wv[k] = at(k) * s);
                (0..BINS).for_each(|k| hv[k] = at(BINS + k) * s);
                (0..BINS - 1).for_each(|k| dv[k] = at(2 * BINS + k));
                z[1][t] = spline::inverse(z[1][t], &wv, &hv, &dv, TAIL);
            }
        }
        z.swap(0, 1); // the flip before the affine
        let logw = z[0]
            .iter()
            .map(|v| (v - self.m[0]) * self.exp_neg_logs[0])
            .collect();
        Ok(logw)
    }
}
