//! A VITS stochastic duration predictor's own kernels on the GPU (`kernels/vits_dp.cu`):
//! the depthwise dilated convolution of a DDSConv layer, exact-erf GELU (in place, and
//! added into a residual), and the inverse rational-quadratic spline with linear tails
//! of a `ConvFlow`. With [`super::Conv1dOps`] (the 1×1 convolutions) and
//! [`super::RelEncoderOps::layer_norm_channels`] they run the whole predictor.
//!
//! Key design choice: one thread per output element (per time step for the spline),
//! tensors `[channels, time]` f32 of one sequence as on the CPU; the spline repeats
//! favlo-vits' CPU `spline::inverse` operation for operation in f32 with uncontracted
//! products and sums, so device and CPU durations differ only by the math library's
//! exp / log ulps.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::cpu::Conv1d;

const SRC: &str = include_str!("../../kernels/vits_dp.cu");
/// This family's kernel module (for [`super::warm`]'s voice set).
pub(crate) const MODULE: Module = Module {
    name: "vits_dp",
    src: SRC,
};
const THREADS: u32 = 256;
/// The most spline bins the kernel holds per thread (`SPL_MAX_BINS`).
pub const SPLINE_MAX_BINS: usize = 32;

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

/// One thread per element: `ceil(n / THREADS)` blocks.
fn one_per(n: usize, op: &'static str) -> Result<LaunchConfig, CudaError> {
    let blocks = u32::try_from(n.div_ceil(THREADS as usize))
        .map_err(|_| shape(op, format!("{n} threads")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A grid-stride launch over `n` elements.
fn flat(n: usize, op: &'static str) -> Result<LaunchConfig, CudaError> {
    let blocks = u32::try_from(n.div_ceil(THREADS as usize).min(65_536))
        .map_err(|_| shape(op, format!("{n} values")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The duration predictor's kernels of one context.
pub struct VitsDpOps {
    ctx: Arc<CudaContext>,
    dw: CudaFunction,
    gelu: CudaFunction,
    gelu_add: CudaFunction,
    spline: CudaFunction,
}

impl std::fmt::Debug for VitsDpOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VitsDpOps").finish_non_exhaustive()
    }
}

impl VitsDpOps {
    /// Compiles (or reads from the disk cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<VitsDpOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(VitsDpOps {
            dw: f("dw_conv1d")?,
            gelu: f("gelu_f32")?,
            gelu_add: f("gelu_add_f32")?,
            spline: f("rq_spline_inverse")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The kernel source (for NVRTC compile checks).
    pub fn source() -> &'static str {
        SRC
    }

    /// `y[C, Lout] = depthwise_conv(x[C, len])` (+ bias), weight `[C, 1, K]`, `geo` with
    /// `in_channels == out_channels == C`, `Lout = geo.out_len(len)`. `y` must not alias
    /// `x`.
    pub fn dw_conv1d(
        &self,
        x: &DeviceBuffer<f32>,
        len: usize,
        weight: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        geo: Conv1d,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "dw_conv1d";
        let c = geo.out_channels;
        let lout = geo.out_len(len);
        if geo.kernel == 0
            || geo.dilation == 0
            || geo.in_channels != c
            || x.len() < c * len
            || weight.len() < c * geo.kernel
            || bias.is_some_and(|b| b.len() < c)
            || y.len() < c * lout
        {
            return Err(shape(
                op,
                format!(
                    "{geo:?} over {len}: x {}, weight {}, y {}",
                    x.len(),
                    weight.len(),
                    y.len()
                ),
            ));
        }
        if c * lout == 0 {
            return Ok(());
        }
        let cfg = one_per(c * lout, op)?;
        let [cc, lin, lo, k, d, p] =
            [c, len, lout, geo.kernel, geo.dilation, geo.padding].map(|n| int(n, op));
        let (cc, lin, lo, k, d, p) = (cc?, lin?, lo?, k?, d?, p?);
        let has_bias = i32::from(bias.is_some());
        let null = 0u64;
        let mut b = self.ctx.stream().launch_builder(&self.dw);
        b.arg(&x.slice).arg(&weight.slice);
        match bias {
            Some(v) => b.arg(&v.slice),
            None => b.arg(&null),
        };
        b.arg(&mut y.slice)
            .arg(&has_bias)
            .arg(&cc)
            .arg(&lin)
            .arg(&lo)
            .arg(&k)
            .arg(&d)
            .arg(&p);
        // SAFETY: argument order and types match `dw_conv1d`; x holds c·len values,
        // weight c·k, y c·lout (checked); bias is read only when has_bias is 1 and then
        // holds c values, else it is null; y is a distinct buffer (borrowed mutably).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(dw_conv1d)"))?;
        Ok(())
    }

    /// `x[..n] = gelu(x[..n])` in place (exact erf form).
    pub fn gelu(&self, x: &mut DeviceBuffer<f32>, n: usize) -> Result<(), CudaError> {
        let op = "gelu_f32";
        if x.len() < n {
            return Err(shape(op, format!("{n} values in {}", x.len())));
        }
        if n == 0 {
            return Ok(());
        }
        let cfg = flat(n, op)?;
        let nn = n as i64;
        let mut b = self.ctx.stream().launch_builder(&self.gelu);
        b.arg(&mut x.slice).arg(&nn);
        // SAFETY: argument order and types match `gelu_f32`; x holds n values (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gelu_f32)"))?;
        Ok(())
    }

    /// `acc[..n] += gelu(y[..n])`. `acc` must not alias `y`.
    pub fn gelu_add(
        &self,
        acc: &mut DeviceBuffer<f32>,
        y: &DeviceBuffer<f32>,
        n: usize,
    ) -> Result<(), CudaError> {
        let op = "gelu_add_f32";
        if acc.len() < n || y.len() < n {
            return Err(shape(
                op,
                format!("{n} values: acc {}, y {}", acc.len(), y.len()),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let cfg = flat(n, op)?;
        let nn = n as i64;
        let mut b = self.ctx.stream().launch_builder(&self.gelu_add);
        b.arg(&mut acc.slice).arg(&y.slice).arg(&nn);
        // SAFETY: argument order and types match `gelu_add_f32`; acc and y hold n values
        // (checked); acc is a distinct buffer (borrowed mutably).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gelu_add_f32)"))?;
        Ok(())
    }

    /// `z[t] = spline⁻¹(z[t])` for `t < len`: the inverse rational-quadratic spline on
    /// `[-bound, bound]` (values outside pass through: linear tails), with `bins` widths
    /// (rows `0..bins` of `params [3·bins − 1, len]`, times `scale`), `bins` heights (rows
    /// `bins..2·bins`, times `scale`) and `bins − 1` interior derivatives (the remaining
    /// rows), all unnormalized, minimum bin size and derivative 1e-3. `1 ≤ bins ≤`
    /// [`SPLINE_MAX_BINS`].
    pub fn spline_inverse(
        &self,
        z: &mut DeviceBuffer<f32>,
        params: &DeviceBuffer<f32>,
        len: usize,
        bins: usize,
        scale: f32,
        bound: f32,
    ) -> Result<(), CudaError> {
        let op = "rq_spline_inverse";
        if bins == 0
            || bins > SPLINE_MAX_BINS
            || z.len() < len
            || params.len() < (3 * bins - 1) * len
        {
            return Err(shape(
                op,
                format!(
                    "{bins} bins over {len}: z {}, params {}",
                    z.len(),
                    params.len()
                ),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let cfg = one_per(len, op)?;
        let (l, nb) = (int(len, op)?, int(bins, op)?);
        let mut b = self.ctx.stream().launch_builder(&self.spline);
        b.arg(&mut z.slice)
            .arg(&params.slice)
            .arg(&l)
            .arg(&nb)
            .arg(&scale)
            .arg(&bound);
        // SAFETY: argument order and types match `rq_spline_inverse`; z holds len values
        // and params (3·bins − 1)·len (checked); 1 ≤ bins ≤ SPL_MAX_BINS (checked), so
        // the per-thread knot arrays hold bins + 1 values.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rq_spline_inverse)"))?;
        Ok(())
    }
}
