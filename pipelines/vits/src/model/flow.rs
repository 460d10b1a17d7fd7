//! The normalising flow (`flow`) in reverse: residual coupling layers
//! (mean-only, WaveNet-conditioned) interleaved with channel flips.
//!
//! Key design choice: the flip is folded into indexing instead of copying:
//! reversing the channel order of `[C, F]` is a row permutation, so each
//! coupling reads its "first half" and writes its "second half" through a
//! row map, and one final pass restores the physical order.

use favlo_runtime::cpu;

use crate::error::VitsError;
use crate::weights::{Conv, Loader, Workspace};

/// WaveNet stack (`modules.WN`, no global conditioning).
#[derive(Debug)]
pub(crate) struct WaveNet {
    /// Dilated in-layers `hidden → 2·hidden`.
    pub(crate) ins: Vec<Conv>,
    /// 1×1 `hidden → 2·hidden` (residual rows, then skip rows), the last `→ hidden`
    /// (skip only).
    pub(crate) res_skip: Vec<Conv>,
    pub(crate) hidden: usize,
}

impl WaveNet {
    fn load(l: &Loader<'_>, prefix: &str, hidden: usize) -> Result<Self, VitsError> {
        let (mut ins, mut res_skip) = (Vec::new(), Vec::new());
        while l.has_conv(&format!("{prefix}.in_layers.{}", ins.len())) {
            let i = ins.len();
            ins.push(l.conv(&format!("{prefix}.in_layers.{i}"), None)?);
            res_skip.push(l.conv(&format!("{prefix}.res_skip_layers.{i}"), None)?);
        }
        Ok(WaveNet {
            ins,
            res_skip,
            hidden,
        })
    }

    /// Skip sum `[hidden, len]` of the stack on `x` (consumed as scratch).
    fn run(&self, ws: &Workspace, x: &mut [f32], len: usize) -> Result<Vec<f32>, VitsError> {
        let n = self.hidden * len;
        let mut out = vec![0f32; n];
        let mut acts = ws.buf(n)?;
        let last = self.ins.len().saturating_sub(1);
        for (i, (conv_in, conv_rs)) in self.ins.iter().zip(&self.res_skip).enumerate() {
            let a = conv_in.run(ws, x, len)?;
            cpu::gated_tanh_sigmoid(&a, self.hidden, len, &mut acts);
            let rs = conv_rs.run(ws, &acts, len)?;
            if i < last {
                cpu::add(x, &rs[..n]);
                cpu::add(&mut out, &rs[n..2 * n]);
            } else {
                cpu::add(&mut out, &rs[..n]);
            }
        }
        Ok(out)
    }
}

#[derive(Debug)]
pub(crate) struct Coupling {
    pub(crate) pre: Conv,
    pub(crate) enc: WaveNet,
    pub(crate) post: Conv,
}

/// The loaded flow.
#[derive(Debug)]
pub struct Flow {
    /// Reverse order (flows.6, .4, .2, .0), each preceded by a flip.
    layers: Vec<Coupling>,
    channels: usize,
}

impl Flow {
    /// Loads `flow.flows.{0,2,4,...}`.
    pub fn load(l: &Loader<'_>) -> Result<Self, VitsError> {
        let mut layers = Vec::new();
        let mut i = 0;
        while l.has_conv(&format!("flow.flows.{i}.pre")) {
            let p = format!("flow.flows.{i}");
            let pre = l.conv(&format!("{p}.pre"), None)?;
            layers.push(Coupling {
                enc: WaveNet::load(l, &format!("{p}.enc"), pre.out_channels())?,
                post: l.conv(&format!("{p}.post"), None)?,
                pre,
            });
            i += 2;
        }
        let channels = layers.first().map_or(0, |c| 2 * c.pre.in_channels());
        layers.reverse();
        Ok(Flow { layers, channels })
    }

    /// `z = flow⁻¹(z_p)` in place on `[C, len]`.
    pub fn reverse(&self, ws: &Workspace, z: &mut [f32], len: usize) -> Result<(), VitsError> {
        let c = self.channels;
        let half = c / 2;
        // `flipped` tracks whether the logical channel order is reversed.
        let mut flipped = false;
        let row = |logical: usize, flipped: bool| if flipped { c - 1 - logical } else { logical };
        let mut x0 = ws.buf(half * len)?;
        for layer in &self.layers {
            flipped = !flipped;
            for j in 0..half {
                let r = row(j, flipped);
                x0[j * len..(j + 1) * len].copy_from_slice(&z[r * len..(r + 1) * len]);
            }
            let mut h = layer.pre.run(ws, &x0, len)?;
            let skip = layer.enc.run(ws, &mut h, len)?;
            let m = layer.post.run(ws, &skip, len)?;
            for j in 0..half {
                let r = row(half + j, flipped);
                let dst = &mut z[r * len..(r + 1) * len];
                dst.iter_mut()
                    .zip(&m[j * len..(j + 1) * len])
                    .for_each(|(d, v)| *d -= v);
            }
        }
        if flipped {
            for j in 0..half {
                let (a, b) = z.split_at_mut((c - 1 - j) * len);
                a[j * len..(j + 1) * len].swap_with_slice(&mut b[..len]);
            }
        }
        Ok(())
    }

    /// Channels of `z`.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The couplings in run order (each preceded by a flip).
    #[cfg(feature = "cuda")]
    pub(crate) fn couplings(&self) -> &[Coupling] {
        &self.layers
    }
}
