//! Image-generator steps on the GPU (`kernels/conv2d.cu`): transposed 2-D convolution
//! with an optional fused per-channel affine + activation epilogue, the same epilogue as
//! an in-place pass, and the folding of an inference batch norm into that affine. The
//! geometry is the CPU's [`crate::cpu::ConvTranspose2d`] and the tensors are NCHW f32,
//! so a pipeline can run the CPU's layer sequence here unchanged.
//!
//! Key design choice: the convolution is computed in gather form (each output sums its
//! own taps, a fixed order, no atomics, no column scratch), in exact f32 with FMA
//! accumulation; when the grid alone would not fill the GPU the input channels of one
//! output are split over up to 8 threads whose partials are added in a fixed order. The
//! affine is an unfused multiply then add and the fold uses IEEE division and square
//! root, so the folded scales and the affine round exactly like the CPU's `batch_norm`
//! and only the convolution's summation order differs from the CPU.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::cpu::ConvTranspose2d;

const SRC: &str = include_str!("../../kernels/conv2d.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "conv2d",
    src: SRC,
};
/// Output channels one thread of `conv_t2d` computes (`CONV_CPT`).
const CPT: usize = 4;
const THREADS: u32 = 256;
/// Most threads sharing one output's input channels (`CONV_SPLIT_MAX`).
pub const CONV_SPLIT_MAX: usize = 8;
/// Threads of one image's grid below which [`Conv2dOps::auto_splits`] splits the channels.
const FILL_THREADS: usize = 1 << 17;

/// The activation after a convolution or affine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConvAct {
    None,
    /// `max(v, 0)`.
    Relu,
    /// `v` when positive, else `slope · v`.
    LeakyRelu(f32),
    /// `tanh(v)` (precise `tanhf`).
    Tanh,
}

impl ConvAct {
    fn code(self) -> (i32, f32) {
        match self {
            ConvAct::None => (0, 0.0),
            ConvAct::Relu => (1, 0.0),
            ConvAct::LeakyRelu(s) => (2, s),
            ConvAct::Tanh => (3, 0.0),
        }
    }
}

/// A per-channel `v · scale[c] + shift[c]` (a folded inference batch norm).
#[derive(Clone, Copy, Debug)]
pub struct ChannelAffine<'a> {
    pub scale: &'a DeviceBuffer<f32>,
    pub shift: &'a DeviceBuffer<f32>,
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

fn blocks(n: usize, op: &'static str) -> Result<u32, CudaError> {
    u32::try_from(n.div_ceil(THREADS as usize)).map_err(|_| shape(op, format!("{n} threads")))
}

/// The image-generator kernels of one context.
pub struct Conv2dOps {
    ctx: Arc<CudaContext>,
    conv_t: CudaFunction,
    conv_t_split: CudaFunction,
    affine_act: CudaFunction,
    fold: CudaFunction,
}

impl std::fmt::Debug for Conv2dOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conv2dOps").finish_non_exhaustive()
    }
}

impl Conv2dOps {
    /// Compiles (or reads from the disk cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Conv2dOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(Conv2dOps {
            conv_t: f("conv_t2d")?,
            conv_t_split: f("conv_t2d_split")?,
            affine_act: f("chan_affine_act")?,
            fold: f("bn_fold")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The kernel source (for NVRTC compile checks).
    pub fn source() -> &'static str {
        SRC
    }

    /// How many threads share one output's input channels ([`Self::conv_transpose2d_split`])
    /// when `conv_transpose2d` picks: doubled (up to 8) while one image's grid has fewer
    /// than 2^17 threads (about one full wave on an H100/H200) and every slice keeps at
    /// least 16 input channels. Chosen per image, not per batch, so an image's values
    /// (their summation order) never depend on the batch it is computed in; on the H200
    /// the split also beat the unsplit kernel at batch 8 on every DCGAN layer.
    pub fn auto_splits(geo: ConvTranspose2d) -> usize {
        let threads = geo.out_channels.div_ceil(CPT) * geo.out_h() * geo.out_w();
        let mut s = 1;
        while s < CONV_SPLIT_MAX && threads * s < FILL_THREADS && geo.in_channels >= 32 * s {
            s *= 2;
        }
        s
    }

    /// `out[b, Cout, Ho, Wo] = act(ConvTranspose2d(x[b, Cin, H, W]) · scale + shift)` for
    /// `batch` images, `weight` in PyTorch's `[Cin, Cout, K, K]` layout; the affine only
    /// when `affine` is given. Overwrites the first `batch · out_len` values of `out`.
    /// The input channels are split over [`Self::auto_splits`] threads per output.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose2d(
        &self,
        x: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        geo: ConvTranspose2d,
        batch: usize,
        out: &mut DeviceBuffer<f32>,
        affine: Option<ChannelAffine<'_>>,
        act: ConvAct,
    ) -> Result<(), CudaError> {
        let splits = Self::auto_splits(geo);
        self.conv_transpose2d_split(x, weight, geo, batch, out, affine, act, splits)
    }

    /// [`Self::conv_transpose2d`] with the input channels of each output split over
    /// `splits` threads (1: one thread sums them all; 2..=8: partial sums added in slice
    /// order, so results are reproducible for a given `splits`).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose2d_split(
        &self,
        x: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        geo: ConvTranspose2d,
        batch: usize,
        out: &mut DeviceBuffer<f32>,
        affine: Option<ChannelAffine<'_>>,
        act: ConvAct,
        splits: usize,
    ) -> Result<(), CudaError> {
        let op = "conv_t2d";
        if !(1..=CONV_SPLIT_MAX).contains(&splits) {
            return Err(shape(op, format!("splits {splits} (1..={CONV_SPLIT_MAX})")));
        }
        if !geo.is_valid()
            || x.len() < batch * geo.in_len()
            || weight.len() < geo.weight_len()
            || out.len() < batch * geo.out_len()
            || affine.is_some_and(|a| {
                a.scale.len() < geo.out_channels || a.shift.len() < geo.out_channels
            })
        {
            return Err(shape(
                op,
                format!(
                    "{geo:?} × {batch}: x {}, weight {}, out {}",
                    x.len(),
                    weight.len(),
                    out.len()
                ),
            ));
        }
        if batch == 0 {
            return Ok(());
        }
        let (ho, wo) = (geo.out_h(), geo.out_w());
        let threads = geo.out_channels.div_ceil(CPT) * ho * wo;
        let batch_u = u32::try_from(batch)
            .ok()
            .filter(|&b| b <= 65_535)
            .ok_or_else(|| shape(op, format!("batch {batch} (at most 65535)")))?;
        let ints = [
            geo.in_channels,
            geo.out_channels,
            geo.in_h,
            geo.in_w,
            ho,
            wo,
            geo.kernel,
            geo.stride,
            geo.padding,
        ]
        .map(|n| int(n, op));
        let [cin, cout, h, w, ho, wo, k, s, p] = ints;
        let (cin, cout, h, w, ho, wo, k, s, p) = (cin?, cout?, h?, w?, ho?, wo?, k?, s?, p?);
        let (code, slope) = act.code();
        let has = i32::from(affine.is_some());
        let null = 0u64;
        let (cfg, func) = if splits == 1 {
            let cfg = LaunchConfig {
                grid_dim: (blocks(threads, op)?, batch_u, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            (cfg, &self.conv_t)
        } else {
            let tiles = u32::try_from(threads.div_ceil(32))
                .map_err(|_| shape(op, format!("{threads} threads")))?;
            let cfg = LaunchConfig {
                grid_dim: (tiles, batch_u, 1),
                block_dim: (32, splits as u32, 1),
                shared_mem_bytes: 0,
            };
            (cfg, &self.conv_t_split)
        };
        let mut b = self.ctx.stream().launch_builder(func);
        b.arg(&x.slice).arg(&weight.slice).arg(&mut out.slice);
        match affine {
            Some(a) => b.arg(&a.scale.slice).arg(&a.shift.slice),
            None => b.arg(&null).arg(&null),
        };
        b.arg(&has)
            .arg(&code)
            .arg(&slope)
            .arg(&cin)
            .arg(&cout)
            .arg(&h)
            .arg(&w)
            .arg(&ho)
            .arg(&wo)
            .arg(&k)
            .arg(&s)
            .arg(&p);
        // SAFETY: argument order and types match `conv_t2d` and `conv_t2d_split` (the same
        // parameters; the split kernel's block is (32, splits ≤ 8), its shared array's
        // bound); x, weight and out hold the
        // batch's values (checked); scale/shift are read only when `has` is 1 and then
        // hold cout values (checked); otherwise they are null pointers.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(conv_t2d)"))?;
        Ok(())
    }

    /// `x = act(x · scale[c] + shift[c])` in place over `batch` images of `channels ×
    /// spatial` values (the affine only when given).
    pub fn channel_affine_act(
        &self,
        x: &mut DeviceBuffer<f32>,
        batch: usize,
        channels: usize,
        spatial: usize,
        affine: Option<ChannelAffine<'_>>,
        act: ConvAct,
    ) -> Result<(), CudaError> {
        let op = "chan_affine_act";
        let total = batch * channels * spatial;
        if channels == 0
            || spatial == 0
            || x.len() < total
            || affine.is_some_and(|a| a.scale.len() < channels || a.shift.len() < channels)
        {
            return Err(shape(
                op,
                format!("{batch}×{channels}×{spatial} in x {}", x.len()),
            ));
        }
        if total == 0 {
            return Ok(());
        }
        let (code, slope) = act.code();
        let has = i32::from(affine.is_some());
        let (c, tot, sp) = (int(channels, op)?, total as i64, spatial as i64);
        let null = 0u64;
        let cfg = LaunchConfig {
            grid_dim: (blocks(total, op)?.min(65_536), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.ctx.stream().launch_builder(&self.affine_act);
        b.arg(&mut x.slice);
        match affine {
            Some(a) => b.arg(&a.scale.slice).arg(&a.shift.slice),
            None => b.arg(&null).arg(&null),
        };
        b.arg(&has)
            .arg(&code)
            .arg(&slope)
            .arg(&tot)
            .arg(&c)
            .arg(&sp);
        // SAFETY: argument order and types match `chan_affine_act`; `total` values of x
        // (checked); scale/shift read only when `has` is 1 and then hold `channels`.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(chan_affine_act)"))?;
        Ok(())
    }

    /// Folds an inference batch norm over `c` channels: `scale = weight / √(var + eps)`,
    /// `shift = bias − mean · scale` (IEEE-rounded steps, as the CPU's `batch_norm`).
    #[allow(clippy::too_many_arguments)]
    pub fn fold_batch_norm(
        &self,
        weight: &DeviceBuffer<f32>,
        bias: &DeviceBuffer<f32>,
        mean: &DeviceBuffer<f32>,
        var: &DeviceBuffer<f32>,
        eps: f32,
        scale: &mut DeviceBuffer<f32>,
        shift: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "bn_fold";
        let c = weight.len();
        if [bias.len(), mean.len(), var.len()].iter().any(|&n| n != c)
            || scale.len() < c
            || shift.len() < c
        {
            return Err(shape(op, format!("{c} channels: a buffer disagrees")));
        }
        if c == 0 {
            return Ok(());
        }
        let ci = int(c, op)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks(c, op)?, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.ctx.stream().launch_builder(&self.fold);
        b.arg(&weight.slice)
            .arg(&bias.slice)
            .arg(&mean.slice)
            .arg(&var.slice)
            .arg(&eps)
            .arg(&mut scale.slice)
            .arg(&mut shift.slice)
            .arg(&ci);
        // SAFETY: argument order and types match `bn_fold`; every buffer holds c values.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(bn_fold)"))?;
        Ok(())
    }
}
