//! 1-D convolutions on the GPU (`kernels/conv1d.cu`): dense (dilated, zero-padded,
//! stride 1) with an optional leaky ReLU fused into its input gather, an optional
//! residual and an optional accumulation into the output; transposed (strided) with the
//! same fused input activation; tanh in place; the WaveNet gate tanh(a)·σ(b) and a row
//! copy (optionally reversed) for a VITS flow's halves and channel flips. The geometry is the CPU's
//! [`crate::cpu::Conv1d`] / [`crate::cpu::ConvTranspose1d`] and the tensors are
//! `[channels, time]` f32 of one sequence, so a HiFi-GAN generator can run the CPU's
//! layer sequence here unchanged.
//!
//! Key design choice: gather form (every output sums its own taps in a fixed order, exact
//! f32 with FMA accumulation, no atomics, no column scratch); the epilogue adds bias,
//! residual and the previous output in the CPU's order, so only the convolution's
//! summation order differs from the CPU.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::cpu::{Conv1d, ConvTranspose1d};

const SRC: &str = include_str!("../../kernels/conv1d.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "conv1d",
    src: SRC,
};
/// Output channels one thread computes (`C1D_CPT`).
const CPT: usize = 4;
const THREADS: u32 = 256;

/// What the dense convolution adds after its sum (and bias).
#[derive(Clone, Copy, Debug, Default)]
pub struct Conv1dEpilogue<'a> {
    /// `+ res[co, t]` (same shape as the output).
    pub residual: Option<&'a DeviceBuffer<f32>>,
    /// `y = y_old + …`: accumulate into the output instead of overwriting it.
    pub accumulate: bool,
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

fn grid(cout: usize, lout: usize, op: &'static str) -> Result<LaunchConfig, CudaError> {
    let threads = cout.div_ceil(CPT) * lout;
    let blocks = u32::try_from(threads.div_ceil(THREADS as usize))
        .map_err(|_| shape(op, format!("{threads} threads")))?;
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

/// `(has_act, slope)` of an optional fused leaky ReLU.
fn act(slope: Option<f32>) -> (i32, f32) {
    slope.map_or((0, 0.0), |s| (1, s))
}

/// The 1-D convolution kernels of one context.
pub struct Conv1dOps {
    ctx: Arc<CudaContext>,
    conv: CudaFunction,
    conv_t: CudaFunction,
    tanh: CudaFunction,
    gate: CudaFunction,
    copy_rows: CudaFunction,
}

impl std::fmt::Debug for Conv1dOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conv1dOps").finish_non_exhaustive()
    }
}

impl Conv1dOps {
    /// Compiles (or reads from the disk cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Conv1dOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(Conv1dOps {
            conv: f("conv1d")?,
            conv_t: f("conv_t1d")?,
            tanh: f("tanh_f32")?,
            gate: f("gate_f32")?,
            copy_rows: f("copy_rows_f32")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The kernel source (for NVRTC compile checks).
    pub fn source() -> &'static str {
        SRC
    }

    /// `y[Cout, Lout] = conv(lrelu(x[Cin, len]))` (+ bias) (+ residual) (+ y), weight
    /// `[Cout, Cin, K]`, `Lout = geo.out_len(len)`; the activation only when `slope` is
    /// given. `y` must not alias `x` or the residual.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        &self,
        x: &DeviceBuffer<f32>,
        len: usize,
        weight: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        geo: Conv1d,
        slope: Option<f32>,
        epi: Conv1dEpilogue<'_>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "conv1d";
        let lout = geo.out_len(len);
        let out_n = geo.out_channels * lout;
        if geo.kernel == 0
            || geo.dilation == 0
            || x.len() < geo.in_channels * len
            || weight.len() < geo.weight_len()
            || bias.is_some_and(|b| b.len() < geo.out_channels)
            || epi.residual.is_some_and(|r| r.len() < out_n)
            || y.len() < out_n
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
        if out_n == 0 {
            return Ok(());
        }
        let cfg = grid(geo.out_channels, lout, op)?;
        let [cin, cout, lin, lo, k, d, p] = [
            geo.in_channels,
            geo.out_channels,
            len,
            lout,
            geo.kernel,
            geo.dilation,
            geo.padding,
        ]
        .map(|n| int(n, op));
        let (cin, cout, lin, lo, k, d, p) = (cin?, cout?, lin?, lo?, k?, d?, p?);
        let (has_act, sl) = act(slope);
        let (has_bias, has_res, accum) = (
            i32::from(bias.is_some()),
            i32::from(epi.residual.is_some()),
            i32::from(epi.accumulate),
        );
        let null = 0u64;
        let mut b = self.ctx.stream().launch_builder(&self.conv);
        b.arg(&x.slice).arg(&weight.slice);
        match bias {
            Some(v) => b.arg(&v.slice),
            None => b.arg(&null),
        };
        match epi.residual {
            Some(v) => b.arg(&v.slice),
            None => b.arg(&null),
        };
        b.arg(&mut y.slice)
            .arg(&has_bias)
            .arg(&has_res)
            .arg(&accum)
            .arg(&has_act)
            .arg(&sl)
            .arg(&cin)
            .arg(&cout)
            .arg(&lin)
            .arg(&lo)
            .arg(&k)
            .arg(&d)
            .arg(&p);
        // SAFETY: argument order and types match `conv1d`; x, weight and y hold the
        // values the geometry reads and writes (checked); bias / residual are read only
        // when their flags are 1 and then hold cout / cout·lout values (checked), else
        // they are null pointers. y is a distinct buffer (it is borrowed mutably).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(conv1d)"))?;
        Ok(())
    }

    /// `y[Cout, Lout] = ConvTranspose1d(lrelu(x[Cin, len]))` (+ bias), weight
    /// `[Cin, Cout, K]`, `Lout = geo.out_len(len)`; the activation only when `slope` is
    /// given.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose1d(
        &self,
        x: &DeviceBuffer<f32>,
        len: usize,
        weight: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        geo: ConvTranspose1d,
        slope: Option<f32>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "conv_t1d";
        let lout = geo.out_len(len);
        let out_n = geo.out_channels * lout;
        if geo.kernel == 0
            || geo.stride == 0
            || x.len() < geo.in_channels * len
            || weight.len() < geo.weight_len()
            || bias.is_some_and(|b| b.len() < geo.out_channels)
            || y.len() < out_n
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
        if out_n == 0 {
            return Ok(());
        }
        let cfg = grid(geo.out_channels, lout, op)?;
        let [cin, cout, lin, lo, k, s, p] = [
            geo.in_channels,
            geo.out_channels,
            len,
            lout,
            geo.kernel,
            geo.stride,
            geo.padding,
        ]
        .map(|n| int(n, op));
        let (cin, cout, lin, lo, k, s, p) = (cin?, cout?, lin?, lo?, k?, s?, p?);
        let (has_act, sl) = act(slope);
        let has_bias = i32::from(bias.is_some());
        let null = 0u64;
        let mut b = self.ctx.stream().launch_builder(&self.conv_t);
        b.arg(&x.slice).arg(&weight.slice);
        match bias {
            Some(v) => b.arg(&v.slice),
            None => b.arg(&null),
        };
        b.arg(&mut y.slice)
            .arg(&has_bias)
            .arg(&has_act)
            .arg(&sl)
            .arg(&cin)
            .arg(&cout)
            .arg(&lin)
            .arg(&lo)
            .arg(&k)
            .arg(&s)
            .arg(&p);
        // SAFETY: argument order and types match `conv_t1d`; x, weight and y hold the
        // values the geometry reads and writes (checked); bias is read only when
        // has_bias is 1 and then holds cout values (checked), else it is null.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(conv_t1d)"))?;
        Ok(())
    }

    /// `x[..n] = tanh(x[..n])` in place.
    pub fn tanh(&self, x: &mut DeviceBuffer<f32>, n: usize) -> Result<(), CudaError> {
        let op = "tanh_f32";
        if x.len() < n {
            return Err(shape(op, format!("{n} values in {}", x.len())));
        }
        if n == 0 {
            return Ok(());
        }
        let cfg = flat(n, op)?;
        let nn = n as i64;
        let mut b = self.ctx.stream().launch_builder(&self.tanh);
        b.arg(&mut x.slice).arg(&nn);
        // SAFETY: argument order and types match `tanh_f32`; x holds n values (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(tanh_f32)"))?;
        Ok(())
    }

    /// `out[c, t] = tanh(a[c, t]) · σ(a[channels + c, t])` for `c < channels`,
    /// `t < len`: the gate of a WaveNet layer on its in-layer's `[2·channels, len]`
    /// output. `out` must not alias `a`.
    pub fn gate(
        &self,
        a: &DeviceBuffer<f32>,
        channels: usize,
        len: usize,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "gate_f32";
        let n = channels
            .checked_mul(len)
            .ok_or_else(|| shape(op, format!("{channels} × {len}")))?;
        if a.len() < 2 * n || out.len() < n {
            return Err(shape(
                op,
                format!("[{channels}, {len}]: a {}, out {}", a.len(), out.len()),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let cfg = flat(n, op)?;
        let nn = n as i64;
        let mut b = self.ctx.stream().launch_builder(&self.gate);
        b.arg(&a.slice).arg(&mut out.slice).arg(&nn);
        // SAFETY: argument order and types match `gate_f32`; a holds 2n values and out
        // n (checked); out is a distinct buffer (it is borrowed mutably).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gate_f32)"))?;
        Ok(())
    }

    /// `dst[dst_row + r, t] = src[r', t]` for `r < rows`, `t < len`, where `r' = r`, or
    /// `rows − 1 − r` when `reverse`: copies a `[rows, len]` tensor into rows
    /// `dst_row..dst_row + rows` of a `[_, len]` one, optionally in reversed row order.
    pub fn copy_rows(
        &self,
        src: &DeviceBuffer<f32>,
        rows: usize,
        len: usize,
        reverse: bool,
        dst: &mut DeviceBuffer<f32>,
        dst_row: usize,
    ) -> Result<(), CudaError> {
        let op = "copy_rows_f32";
        let n = rows
            .checked_mul(len)
            .ok_or_else(|| shape(op, format!("{rows} × {len}")))?;
        let end = dst_row
            .checked_add(rows)
            .and_then(|r| r.checked_mul(len))
            .ok_or_else(|| shape(op, format!("rows {dst_row}+{rows} × {len}")))?;
        if src.len() < n || dst.len() < end {
            return Err(shape(
                op,
                format!(
                    "[{rows}, {len}] into row {dst_row}: src {}, dst {}",
                    src.len(),
                    dst.len()
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let cfg = flat(n, op)?;
        let (r, l, r0) = (int(rows, op)?, int(len, op)?, int(dst_row, op)?);
        let rev = i32::from(reverse);
        let mut b = self.ctx.stream().launch_builder(&self.copy_rows);
        b.arg(&src.slice)
            .arg(&mut dst.slice)
            .arg(&r)
            .arg(&l)
            .arg(&r0)
            .arg(&rev);
        // SAFETY: argument order and types match `copy_rows_f32`; src holds rows·len
        // values and dst (dst_row + rows)·len (checked, all below i32::MAX rows and
        // len); dst is a distinct buffer (it is borrowed mutably).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(copy_rows_f32)"))?;
        Ok(())
    }
}
