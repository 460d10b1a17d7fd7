//! The reverse flow on a CUDA GPU: the host-built [`Plan`] (flips and the coupling's
//! subtraction folded into the weights) uploaded once, run by [`run`] on the runtime's
//! `Conv1dOps` (dense convolutions with accumulation, the WaveNet gate, row copies) of
//! the context it was opened on.
//!
//! Key design choice: the flow's output stays on the device — [`CudaFlow::reverse`]
//! returns `z [C, frames]` as a device buffer that the decoder reads directly, so a
//! sentence uploads `z_p` once and downloads only the waveform. Weights are `Resident`
//! spans under the voice's owner, a sentence's tensors `Scratch` spans freed with it.

use std::sync::Arc;

use favlo_runtime::cuda::{Conv1dEpilogue, Conv1dOps, CudaContext, DeviceBuffer};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use super::flow_plan::{Backend, Dense, Plan, run};
use super::{DevConv, dev_err};
use crate::error::VitsError;
use crate::model::Flow;
use crate::weights::ConvKind;

/// The reverse flow resident on one GPU.
pub struct CudaFlow {
    ctx: Arc<CudaContext>,
    ops: Conv1dOps,
    owner: Owner,
    plan: Plan<DevConv>,
}

impl std::fmt::Debug for CudaFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaFlow")
            .field("device", &self.ctx.name())
            .field("couplings", &self.plan.steps.len())
            .finish_non_exhaustive()
    }
}

/// A sentence's device: the context, the kernels and the owner of its scratch.
struct Dev<'a> {
    ctx: &'a CudaContext,
    ops: &'a Conv1dOps,
    owner: &'a Owner,
}

impl Backend for Dev<'_> {
    type Buf = DeviceBuffer<f32>;
    type Conv = DevConv;

    fn upload(&self, v: &[f32]) -> Result<DeviceBuffer<f32>, VitsError> {
        self.ctx
            .upload(self.owner, SpanKind::Scratch, v)
            .map_err(dev_err)
    }

    fn scratch(&self, n: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        self.ctx
            .alloc(self.owner, SpanKind::Scratch, n.max(1))
            .map_err(dev_err)
    }

    fn conv(
        &self,
        c: &DevConv,
        x: &DeviceBuffer<f32>,
        len: usize,
        accumulate: bool,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        let epi = Conv1dEpilogue {
            residual: None,
            accumulate,
        };
        c.run(self.ops, x, len, None, epi, y)
    }

    fn gate(
        &self,
        a: &DeviceBuffer<f32>,
        channels: usize,
        len: usize,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), VitsError> {
        self.ops.gate(a, channels, len, out).map_err(dev_err)
    }

    fn copy_rows(
        &self,
        src: &DeviceBuffer<f32>,
        rows: usize,
        len: usize,
        reverse: bool,
        dst: &mut DeviceBuffer<f32>,
        dst_row: usize,
    ) -> Result<(), VitsError> {
        self.ops
            .copy_rows(src, rows, len, reverse, dst, dst_row)
            .map_err(dev_err)
    }
}

impl CudaFlow {
    /// Uploads `flow`'s plan to `ctx` under `owner`, after fitting its weights plus the
    /// working set of a `max_frames`-frame sentence in the device ledger.
    pub fn open(
        flow: &Flow,
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        max_frames: usize,
    ) -> Result<Self, VitsError> {
        let host = Plan::of(flow)?;
        let weights = 4 * host.values() as u64;
        let per_frame = 4 * host.scratch_per_frame() as u64;
        ledger::fit(
            ctx.ledger(),
            &format!(
                "the VITS flow on cuda:{} with sentences up to {max_frames} frames",
                ctx.ordinal()
            ),
            max_frames,
            max_frames,
            |f| weights + per_frame * f as u64,
        )?;
        let put = |v: &[f32]| ctx.upload(owner, SpanKind::Resident, v).map_err(dev_err);
        let plan = host.map(|d: &Dense| {
            Ok(DevConv {
                kind: ConvKind::Dense(d.geo),
                weight: put(&d.weight)?,
                bias: d.bias.as_deref().map(put).transpose()?,
            })
        })?;
        Ok(CudaFlow {
            ops: Conv1dOps::load(ctx).map_err(dev_err)?,
            ctx: Arc::clone(ctx),
            owner: owner.clone(),
            plan,
        })
    }

    /// The context the flow's output lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Channels of `z`.
    pub fn channels(&self) -> usize {
        self.plan.channels
    }

    /// `z = flow⁻¹(z_p)` for `z_p [C, frames]` (as [`Flow::reverse`]): uploads `z_p`
    /// and returns `z [C, frames]` on the device (a `Scratch` span).
    pub fn reverse(&self, z_p: &[f32], frames: usize) -> Result<DeviceBuffer<f32>, VitsError> {
        let dev = Dev {
            ctx: &self.ctx,
            ops: &self.ops,
            owner: &self.owner,
        };
        run(&dev, &self.plan, z_p, frames)
    }
}
