//! The DCGAN generator on a CUDA GPU (feature `cuda`): the CPU [`Generator`]'s layer
//! sequence on the runtime's image kernels (`favlo_runtime::cuda::Conv2dOps`).
//!
//! Key design choices:
//! - The same stepping contract as the CPU generator (load a state, run one layer,
//!   read the state back), so the image pipeline's per-layer preemption and the video
//!   pipeline's chunks work unchanged and produce the same output: only the current
//!   activation crosses to the host, and only when asked for ([`CudaGenerator::state`]).
//! - Each layer is one launch: the transposed convolution with the batch norm (folded
//!   on the device, bit-identical to the CPU's fold) and ReLU, or tanh, as its
//!   epilogue. Exact f32; only the convolution's summation order differs from the CPU.
//!   That order is fixed per layer (the kernel's channel split is picked for one
//!   image), so as on the CPU an image does not depend on the other images of its batch.
//! - Every device byte is a span of the CUDA context's ledger under the pipeline's
//!   owner: the weights `Resident`, the two batch-8 activations `Scratch`, fitted
//!   before the first upload (a GPU without room is "does not fit", as on the CPU).

use std::path::Path;
use std::sync::Arc;

use favlo_formats::torch::TorchCheckpoint;
use favlo_runtime::cpu::ConvTranspose2d;
use favlo_runtime::cuda::{
    ChannelAffine, Conv2dOps, ConvAct, CudaContext, CudaError, DeviceBuffer,
};
use favlo_runtime::ledger::{self, Owner, SpanKind};

use crate::error::DcganError;
use crate::generator::{BN_EPS, Generator, LAYERS, MAX_BATCH, checked, layer_shape, max_act_len};

/// A CUDA error as the crate's error: a ledger refusal stays a ledger refusal ("does
/// not fit"), anything else is a device error.
pub(crate) fn dev_err(e: CudaError) -> DcganError {
    match e {
        CudaError::Ledger(l) => DcganError::Ledger(l),
        other => DcganError::Device {
            message: other.to_string(),
        },
    }
}

/// Whether cuda:`ordinal` can be opened here: `Ok(())` or why not ("CUDA is
/// unavailable: …").
pub(crate) fn probe(ordinal: usize) -> Result<(), DcganError> {
    let count = CudaContext::probe().map_err(dev_err)?;
    if ordinal >= count {
        return Err(DcganError::Device {
            message: format!(
                "CUDA is unavailable: no device cuda:{ordinal} (the driver reports {count})"
            ),
        });
    }
    Ok(())
}

/// Device bytes of the generator with activations for a batch of `b`: the conv
/// weights, the folded norms (scale + shift), the four norm vectors of one layer while
/// it is folded, two activations.
pub fn device_bytes(b: usize) -> u64 {
    let conv: usize = (0..LAYERS).map(|l| layer_shape(l).weight_len()).sum();
    let norms: usize = (0..LAYERS - 1)
        .map(|l| 2 * layer_shape(l).out_channels)
        .sum();
    let fold = 4 * layer_shape(0).out_channels;
    ((conv + norms + fold + 2 * b * max_act_len()) * 4) as u64
}

struct DevLayer {
    shape: ConvTranspose2d,
    weight: DeviceBuffer<f32>,
    /// The folded batch norm (scale, shift); `None` on the last layer (tanh).
    norm: Option<(DeviceBuffer<f32>, DeviceBuffer<f32>)>,
}

/// The generator resident on one GPU.
pub struct CudaGenerator {
    ctx: Arc<CudaContext>,
    ops: Conv2dOps,
    layers: Vec<DevLayer>,
    /// `act[0]` holds the current activation, `act[1]` receives the next one.
    act: [DeviceBuffer<f32>; 2],
    /// Host copy of the current activation, valid when `host_fresh`.
    host: Vec<f32>,
    host_fresh: bool,
    at: usize,
    batch: usize,
}

impl std::fmt::Debug for CudaGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGenerator")
            .field("device", &self.ctx.name())
            .field("at", &self.at)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl CudaGenerator {
    /// Opens the generator of a `torch.save` checkpoint (`netG_state_dict`) on
    /// cuda:`ordinal`.
    pub fn open(path: &Path, ordinal: usize, owner: &Owner) -> Result<Self, DcganError> {
        let bad = |reason: String| DcganError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        let ck = TorchCheckpoint::open(path).map_err(|e| bad(e.to_string()))?;
        Self::load(ordinal, owner, |name| {
            ck.tensor_f32(&format!("netG_state_dict/{name}"))
                .map_err(|e| bad(e.to_string()))
        })
    }

    /// Builds the generator on cuda:`ordinal` from a tensor source (as
    /// [`Generator::load`]).
    pub fn load(
        ordinal: usize,
        owner: &Owner,
        mut tensor: impl FnMut(&str) -> Result<(Vec<f32>, Vec<usize>), DcganError>,
    ) -> Result<Self, DcganError> {
        let ctx = CudaContext::open(ordinal, None).map_err(dev_err)?;
        ledger::fit(
            ctx.ledger(),
            &format!("the DCGAN generator on cuda:{ordinal} (64x64, batch 8)"),
            MAX_BATCH,
            MAX_BATCH,
            device_bytes,
        )?;
        let ops = Conv2dOps::load(&ctx).map_err(dev_err)?;
        let put = |v: &[f32], kind| ctx.upload(owner, kind, v).map_err(dev_err);
        let mut layers = Vec::with_capacity(LAYERS);
        for l in 0..LAYERS {
            let s = layer_shape(l);
            let idx = 3 * l;
            let w = checked(
                &mut tensor,
                format!("main.{idx}.weight"),
                vec![s.in_channels, s.out_channels, s.kernel, s.kernel],
            )?;
            let weight = put(&w, SpanKind::Resident)?;
            let norm = if l + 1 < LAYERS {
                let c = s.out_channels;
                let bn = idx + 1;
                let mut v = |what: &str| -> Result<DeviceBuffer<f32>, DcganError> {
                    let h = checked(&mut tensor, format!("main.{bn}.{what}"), vec![c])?;
                    put(&h, SpanKind::Scratch)
                };
                let (g, b, m, var) = (
                    v("weight")?,
                    v("bias")?,
                    v("running_mean")?,
                    v("running_var")?,
                );
                let mut scale = ctx
                    .alloc::<f32>(owner, SpanKind::Resident, c)
                    .map_err(dev_err)?;
                let mut shift = ctx
                    .alloc::<f32>(owner, SpanKind::Resident, c)
                    .map_err(dev_err)?;
                ops.fold_batch_norm(&g, &b, &m, &var, BN_EPS, &mut scale, &mut shift)
                    .map_err(dev_err)?;
                // The four vectors are freed once the fold has run.
                ctx.synchronize().map_err(dev_err)?;
                Some((scale, shift))
            } else {
                None
            };
            layers.push(DevLayer {
                shape: s,
                weight,
                norm,
            });
        }
        let act_len = MAX_BATCH * max_act_len();
        let act = [
            ctx.alloc::<f32>(owner, SpanKind::Scratch, act_len)
                .map_err(dev_err)?,
            ctx.alloc::<f32>(owner, SpanKind::Scratch, act_len)
                .map_err(dev_err)?,
        ];
        ctx.synchronize().map_err(dev_err)?;
        Ok(CudaGenerator {
            ctx,
            ops,
            layers,
            act,
            host: Vec::new(),
            host_fresh: false,
            at: 0,
            batch: 0,
        })
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> u32 {
        u32::try_from(self.ctx.ordinal()).unwrap_or(u32::MAX)
    }

    /// The device name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        self.ctx.name()
    }

    /// The CUDA context (its ledger holds this generator's spans).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Loads `batch` images' activations entering layer `at` (as
    /// [`Generator::load_state`]); `Ok(false)` when the sizes disagree.
    pub fn load_state(
        &mut self,
        at: usize,
        batch: usize,
        values: &[f32],
    ) -> Result<bool, DcganError> {
        if at > LAYERS
            || batch == 0
            || batch > MAX_BATCH
            || values.len() != batch * Generator::act_len(at)
        {
            return Ok(false);
        }
        self.ctx.write(&mut self.act[0], values).map_err(dev_err)?;
        self.at = at;
        self.batch = batch;
        self.host_fresh = false;
        Ok(true)
    }

    /// The layer the current activation enters (`LAYERS` once finished).
    pub fn at(&self) -> usize {
        self.at
    }

    /// Queues the next layer over the loaded batch; `Ok(false)` when already finished.
    pub fn step(&mut self) -> Result<bool, DcganError> {
        let Some(layer) = self.layers.get(self.at) else {
            return Ok(false);
        };
        let [src, dst] = &mut self.act;
        let (affine, act) = match &layer.norm {
            Some((scale, shift)) => (Some(ChannelAffine { scale, shift }), ConvAct::Relu),
            None => (None, ConvAct::Tanh),
        };
        // The kernel's channel split is chosen per image (`Conv2dOps::auto_splits`), so an
        // image's values never depend on how many share its batch.
        let (geo, b) = (layer.shape, self.batch);
        self.ops
            .conv_transpose2d(src, &layer.weight, geo, b, dst, affine, act)
            .map_err(dev_err)?;
        self.act.swap(0, 1);
        self.at += 1;
        self.host_fresh = false;
        Ok(true)
    }

    /// The current activation of the loaded batch, copied to the host (waits for the
    /// queued layers; a second call without a step in between copies nothing).
    pub fn state(&mut self) -> Result<&[f32], DcganError> {
        let n = self.batch * Generator::act_len(self.at);
        if !self.host_fresh {
            self.host.resize(n, 0.0);
            let src = self.act[0].slice().slice(0..n);
            self.ctx
                .stream()
                .memcpy_dtoh(&src, &mut self.host[..n])
                .map_err(|e| DcganError::Device {
                    message: format!("CUDA driver call cuMemcpyDtoH(dcgan state) failed: {e:?}"),
                })?;
            self.ctx.synchronize().map_err(dev_err)?;
            self.host_fresh = true;
        }
        Ok(&self.host[..n])
    }

    /// Runs every layer on `z` (`batch·100` values) and returns the images `[batch, 3,
    /// 64, 64]` in [-1, 1]; `Ok(None)` when `z` has the wrong size.
    pub fn forward(&mut self, z: &[f32], batch: usize) -> Result<Option<&[f32]>, DcganError> {
        if !self.load_state(0, batch, z)? {
            return Ok(None);
        }
        while self.step()? {}
        self.state().map(Some)
    }
}
