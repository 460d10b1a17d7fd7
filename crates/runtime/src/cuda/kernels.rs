//! Launch wrappers for the kernels in `crates/runtime/kernels/*.cu`.
//!
//! Key design choice: the wrappers check every size on the host and return
//! [`CudaError::Shape`] rather than launching a kernel that would read out of bounds;
//! kernels are loaded once per context from the CUBIN cache (see `compile`).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use favlo_mx::{ElementFormat, MxLayout, MxView};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

const GEMV_SRC: &str = concat!(
    include_str!("../../kernels/fp8_sw.cuh"),
    include_str!("../../kernels/gemv_mx.cu")
);
const OPS_SRC: &str = include_str!("../../kernels/ops.cu");
/// The CUDA-core MX GEMV module (see [`super::warm`]).
pub(crate) const GEMV_MODULE: Module = Module {
    name: "gemv_mx",
    src: GEMV_SRC,
};
/// The element-wise ops module.
pub(crate) const OPS_MODULE: Module = Module {
    name: "ops",
    src: OPS_SRC,
};
/// Output rows per GEMV block (`ROWS` in gemv_mx.cu).
const GEMV_ROWS: usize = 4;

/// An MX-packed weight matrix in device memory (the favlo-mx byte layout, unchanged).
pub struct MxDevice {
    pub layout: MxLayout,
    pub bytes: DeviceBuffer<u8>,
}

impl MxDevice {
    /// Uploads a packed matrix.
    pub fn upload(
        ctx: &CudaContext,
        owner: &Owner,
        view: MxView<'_>,
    ) -> Result<MxDevice, CudaError> {
        Ok(MxDevice {
            layout: view.layout,
            bytes: ctx.upload(owner, SpanKind::Resident, view.bytes)?,
        })
    }
}

/// Which in-register decode a GEMV uses (both read memory the same way; see gemv_mx.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemvDecode {
    /// Two elements per 32-bit op through f16x2 bit patterns (the default).
    F16x2,
    /// One element at a time straight to f32 bit patterns (the first version, kept
    /// for comparison in `cuda_bench`).
    F32Bits,
}

/// The loaded kernel set of one context.
pub struct CudaKernels {
    ctx: Arc<CudaContext>,
    gemv_fp8: CudaFunction,
    gemv_fp4: CudaFunction,
    gemv_fp8_bits: CudaFunction,
    gemv_fp4_bits: CudaFunction,
    rms_norm: CudaFunction,
    softmax: CudaFunction,
    silu: CudaFunction,
    swiglu: CudaFunction,
    rope_neox: CudaFunction,
    /// (module, came from the disk cache) for each module loaded.
    pub cache_hits: Vec<(&'static str, bool)>,
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn grid(n: usize, op: &'static str) -> Result<u32, CudaError> {
    u32::try_from(n).map_err(|_| shape(op, format!("grid of {n} blocks")))
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

impl CudaKernels {
    /// Compiles (or reads from the cache) and loads every kernel for `ctx`'s arch.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<CudaKernels, CudaError> {
        let mut cache_hits = Vec::new();
        let mut module = |m: Module| -> Result<_, CudaError> {
            let l = LoadedModule::load(ctx, m)?;
            cache_hits.push((m.name, l.from_cache));
            Ok(l)
        };
        let gemv = module(GEMV_MODULE)?;
        let ops = module(OPS_MODULE)?;
        let f = |m: &LoadedModule, n: &str| m.function(n);
        Ok(CudaKernels {
            gemv_fp8: f(&gemv, "gemv_mxfp8")?,
            gemv_fp4: f(&gemv, "gemv_mxfp4")?,
            gemv_fp8_bits: f(&gemv, "gemv_mxfp8_bits")?,
            gemv_fp4_bits: f(&gemv, "gemv_mxfp4_bits")?,
            rms_norm: f(&ops, "rms_norm")?,
            softmax: f(&ops, "softmax")?,
            silu: f(&ops, "silu")?,
            swiglu: f(&ops, "swiglu")?,
            rope_neox: f(&ops, "rope_neox")?,
            ctx: Arc::clone(ctx),
            cache_hits,
        })
    }

    /// y[n] = Σ_k W[n,k]·x[k] for an MXFP8 (E4M3) or MXFP4 weight. `x` must hold
    /// `padded_cols` values, zero past `cols` (see [`CudaKernels::padded_x`]).
    pub fn gemv_mx(
        &self,
        w: &MxDevice,
        x: &DeviceBuffer<f32>,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        self.gemv_mx_with(w, x, y, GemvDecode::F16x2)
    }

    /// [`Self::gemv_mx`] with an explicit decode variant.
    pub fn gemv_mx_with(
        &self,
        w: &MxDevice,
        x: &DeviceBuffer<f32>,
        y: &mut DeviceBuffer<f32>,
        decode: GemvDecode,
    ) -> Result<(), CudaError> {
        let op = "gemv_mx";
        let l = w.layout;
        let f = match (l.format, decode) {
            (ElementFormat::Fp8E4M3, GemvDecode::F16x2) => &self.gemv_fp8,
            (ElementFormat::Fp4E2M1, GemvDecode::F16x2) => &self.gemv_fp4,
            (ElementFormat::Fp8E4M3, GemvDecode::F32Bits) => &self.gemv_fp8_bits,
            (ElementFormat::Fp4E2M1, GemvDecode::F32Bits) => &self.gemv_fp4_bits,
            (ElementFormat::Fp8E5M2, _) => {
                return Err(shape(op, "E5M2 has no CUDA GEMV yet".into()));
            }
        };
        if w.bytes.len() != l.total_bytes() || x.len() < l.padded_cols() || y.len() < l.rows {
            return Err(shape(
                op,
                format!(
                    "W {} bytes (layout {}), x {} (need {}), y {} (need {})",
                    w.bytes.len(),
                    l.total_bytes(),
                    x.len(),
                    l.padded_cols(),
                    y.len(),
                    l.rows
                ),
            ));
        }
        if l.rows == 0 {
            return Ok(());
        }
        let rows = int(l.rows, op)?;
        let drb = int(l.data_row_bytes(), op)?;
        let soff = l.scale_offset() as i64;
        let srb = int(l.scale_row_bytes(), op)?;
        let cfg = LaunchConfig {
            grid_dim: (grid(l.rows.div_ceil(GEMV_ROWS), op)?, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(f);
        b.arg(&w.bytes.slice)
            .arg(&x.slice)
            .arg(&mut y.slice)
            .arg(&rows)
            .arg(&drb)
            .arg(&soff)
            .arg(&srb);
        // SAFETY: argument types match the kernel signature; sizes checked above.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemv_mx)"))?;
        Ok(())
    }

    /// `x` (`cols` values) zero-padded to the layout's `padded_cols`, ready for [`Self::gemv_mx`].
    pub fn padded_x(layout: MxLayout, x: &[f32]) -> Vec<f32> {
        let mut v = vec![0f32; layout.padded_cols()];
        let n = x.len().min(layout.cols);
        v[..n].copy_from_slice(&x[..n]);
        v
    }

    /// out = x / sqrt(mean(x²) + eps) · weight, per row of `weight.len()`.
    pub fn rms_norm(
        &self,
        x: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        eps: f32,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "rms_norm";
        let dim = weight.len();
        if dim == 0 || !x.len().is_multiple_of(dim) || out.len() != x.len() {
            return Err(shape(
                op,
                format!("x {} out {} dim {dim}", x.len(), out.len()),
            ));
        }
        let rows = x.len() / dim;
        if rows == 0 {
            return Ok(());
        }
        let d = int(dim, op)?;
        let cfg = LaunchConfig {
            grid_dim: (grid(rows, op)?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.rms_norm);
        b.arg(&x.slice)
            .arg(&weight.slice)
            .arg(&mut out.slice)
            .arg(&d)
            .arg(&eps);
        // SAFETY: types match; every row index is < rows·dim = x.len().
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rms_norm)"))?;
        Ok(())
    }

    /// Softmax in place per row of `dim`.
    pub fn softmax(&self, x: &mut DeviceBuffer<f32>, dim: usize) -> Result<(), CudaError> {
        let op = "softmax";
        if dim == 0 || !x.len().is_multiple_of(dim) {
            return Err(shape(op, format!("x {} dim {dim}", x.len())));
        }
        let rows = x.len() / dim;
        if rows == 0 {
            return Ok(());
        }
        let d = int(dim, op)?;
        let cfg = LaunchConfig {
            grid_dim: (grid(rows, op)?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.softmax);
        b.arg(&mut x.slice).arg(&d);
        // SAFETY: types match; rows·dim = x.len().
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(softmax)"))?;
        Ok(())
    }

    fn elementwise_cfg(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(256).clamp(1, 132 * 16) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// x ← x·sigmoid(x).
    pub fn silu(&self, x: &mut DeviceBuffer<f32>) -> Result<(), CudaError> {
        let n = x.len() as i64;
        let cfg = Self::elementwise_cfg(x.len());
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.silu);
        b.arg(&mut x.slice).arg(&n);
        // SAFETY: types match; grid-stride loop bounded by n.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(silu)"))?;
        Ok(())
    }

    /// out = silu(gate)·up.
    pub fn swiglu(
        &self,
        gate: &DeviceBuffer<f32>,
        up: &DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        if gate.len() != up.len() || out.len() != gate.len() {
            return Err(shape(
                "swiglu",
                format!("gate {} up {} out {}", gate.len(), up.len(), out.len()),
            ));
        }
        let n = gate.len() as i64;
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.swiglu);
        b.arg(&gate.slice)
            .arg(&up.slice)
            .arg(&mut out.slice)
            .arg(&n);
        // SAFETY: types match; all three hold n values.
        unsafe { b.launch(Self::elementwise_cfg(gate.len())) }
            .map_err(driver_err("cuLaunchKernel(swiglu)"))?;
        Ok(())
    }

    /// NeoX RoPE in place on x [t, n_heads, head_dim]; `cos`/`sin` are [t, rot/2] from
    /// [`rope_tables`].
    pub fn rope_neox(
        &self,
        x: &mut DeviceBuffer<f32>,
        cos: &DeviceBuffer<f32>,
        sin: &DeviceBuffer<f32>,
        n_heads: usize,
        head_dim: usize,
        rot_dim: usize,
    ) -> Result<(), CudaError> {
        let op = "rope_neox";
        let rot = rot_dim.min(head_dim) & !1;
        let per_tok = n_heads * head_dim;
        if per_tok == 0 || !x.len().is_multiple_of(per_tok) {
            return Err(shape(
                op,
                format!("x {} heads {n_heads} head_dim {head_dim}", x.len()),
            ));
        }
        let t = x.len() / per_tok;
        if cos.len() < t * rot / 2 || sin.len() < t * rot / 2 {
            return Err(shape(
                op,
                format!("tables {} / {} for t {t} rot {rot}", cos.len(), sin.len()),
            ));
        }
        if t == 0 || rot == 0 {
            return Ok(());
        }
        let (nh, hd, r) = (int(n_heads, op)?, int(head_dim, op)?, int(rot, op)?);
        let cfg = LaunchConfig {
            grid_dim: (grid(t * n_heads, op)?, 1, 1),
            block_dim: (((rot / 2).clamp(32, 256)) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx.stream();
        let mut b = s.launch_builder(&self.rope_neox);
        b.arg(&mut x.slice)
            .arg(&cos.slice)
            .arg(&sin.slice)
            .arg(&nh)
            .arg(&hd)
            .arg(&r);
        // SAFETY: types match; indices bounded by the checks above.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rope_neox)"))?;
        Ok(())
    }
}

/// cos/sin tables [positions.len(), rot/2] for RoPE, computed in f64 like the CPU path
/// (`inv_freq_i = theta^(-2i/rot)`, angle = position · inv_freq_i).
pub fn rope_tables(
    positions: &[usize],
    head_dim: usize,
    rot_dim: usize,
    theta: f32,
) -> (Vec<f32>, Vec<f32>) {
    let rot = rot_dim.min(head_dim) & !1;
    let half = rot / 2;
    let mut c = Vec::with_capacity(positions.len() * half);
    let mut s = Vec::with_capacity(positions.len() * half);
    for p in positions {
        for i in 0..half {
            let inv = (theta as f64).powf(-((2 * i) as f64) / rot as f64);
            let a = *p as f64 * inv;
            c.push(a.cos() as f32);
            s.push(a.sin() as f32);
        }
    }
    (c, s)
}
