//! The f32-row producers of a prefill chunk on the FP8 GEMM path: RMSNorm and SwiGLU
//! over `t` rows written as plain f32 rows (`kernels/attn_prefill.cu`), which
//! [`super::GemmMx::quantize`] then rounds to E4M3 for the tensor cores.
//!
//! Key design choice: these rows keep the exact path's arithmetic (the same RMSNorm and
//! SwiGLU expressions in f32 as the x-preparation kernels) and differ only in where they
//! write, so the FP8 path's one approximation is the activation quantization itself.
//! `rms_norm_quantize` / `swiglu_quantize` also write each row's scale while they hold
//! the row, and then quantize without the GEMM's own row-scale pass (one call, so no
//! state says which rows the scales belong to).

use cudarc::driver::PushKernelArg;

use super::attn_prefill::{PrefillOps, int, shape};
use super::context::DeviceBuffer;
use super::gemm::{GemmActs, GemmMx};
use super::{CudaError, driver_err};

/// `t` rows reading `read` values at stride `ldx` from `x_len`, writing `cols` values
/// at stride `ldy` into `y_len`.
fn check_rows(
    op: &'static str,
    (x_len, ldx, read): (usize, usize, usize),
    t: usize,
    (y_len, ldy, cols): (usize, usize, usize),
) -> Result<(), CudaError> {
    if t == 0
        || cols == 0
        || ldx < read
        || ldy < cols
        || x_len < (t - 1) * ldx + read
        || y_len < (t - 1) * ldy + cols
    {
        return Err(shape(
            op,
            format!(
                "{t} rows of {read} (ld {ldx}, {x_len} values) into rows of {cols} (ld {ldy}, {y_len} values)"
            ),
        ));
    }
    Ok(())
}

/// `acts` can hold the row scales of `t` rows.
fn check_scales(acts: &GemmActs, t: usize, op: &'static str) -> Result<(), CudaError> {
    if t > acts.m_cap {
        return Err(shape(
            op,
            format!("{t} rows into activations of {} tokens", acts.m_cap),
        ));
    }
    Ok(())
}

impl PrefillOps {
    /// RMSNorm (`weight`, `eps`) of `t` rows of `x` (stride `ldx`, `weight.len()`
    /// values) into f32 rows of `y` (stride `ldy`).
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_rows(
        &self,
        x: &DeviceBuffer<f32>,
        ldx: usize,
        t: usize,
        weight: &DeviceBuffer<f32>,
        eps: f32,
        y: &mut DeviceBuffer<f32>,
        ldy: usize,
    ) -> Result<(), CudaError> {
        self.rms_f32_launch((x, ldx, t), weight, eps, (y, ldy), None)
    }

    /// [`Self::rms_norm_rows`], then `gemm`'s quantization of the rows into `acts`
    /// ([`GemmMx::quantize`]'s result, bit for bit) with the row scales written by the
    /// norm kernel instead of a pass of their own.
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_quantize(
        &self,
        x: &DeviceBuffer<f32>,
        ldx: usize,
        t: usize,
        weight: &DeviceBuffer<f32>,
        eps: f32,
        y: &mut DeviceBuffer<f32>,
        ldy: usize,
        gemm: &GemmMx,
        acts: &mut GemmActs,
    ) -> Result<(), CudaError> {
        check_scales(acts, t, "rows_rms_norm_f32")?;
        self.rms_f32_launch(
            (x, ldx, t),
            weight,
            eps,
            (y, ldy),
            Some(acts.row_scales_mut()),
        )?;
        gemm.quantize_codes(y, t, weight.len(), ldy, acts)
    }

    fn rms_f32_launch(
        &self,
        (x, ldx, t): (&DeviceBuffer<f32>, usize, usize),
        weight: &DeviceBuffer<f32>,
        eps: f32,
        (y, ldy): (&mut DeviceBuffer<f32>, usize),
        scales: Option<&mut DeviceBuffer<f32>>,
    ) -> Result<(), CudaError> {
        let op = "rows_rms_norm_f32";
        let dim = weight.len();
        check_rows(op, (x.len(), ldx, dim), t, (y.len(), ldy, dim))?;
        let (ldxi, di, ldyi) = (int(ldx, op)?, int(dim, op)?, int(ldy, op)?);
        let cfg = Self::rows_cfg(t, op)?;
        let st = self.ctx().stream();
        let mut b = st.launch_builder(&self.rms_f32);
        b.arg(&x.slice)
            .arg(&ldxi)
            .arg(&weight.slice)
            .arg(&eps)
            .arg(&di)
            .arg(&mut y.slice)
            .arg(&ldyi);
        let null = 0u64;
        match scales {
            Some(r) => b.arg(&mut r.slice),
            None => b.arg(&null),
        };
        // SAFETY: argument order and types match the kernel (the scales a device pointer
        // or null); `check_rows` bounded every row read and written, `check_scales` that
        // the scales hold t rows.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rows_rms_norm_f32)"))?;
        Ok(())
    }

    /// silu(gate)·up over `t` rows of fused gate|up (stride `ldgu`, `n` gate then `n` up
    /// values) into f32 rows of `n` values of `y` (stride `ldy`).
    pub fn swiglu_rows(
        &self,
        gu: &DeviceBuffer<f32>,
        ldgu: usize,
        t: usize,
        n: usize,
        y: &mut DeviceBuffer<f32>,
        ldy: usize,
    ) -> Result<(), CudaError> {
        self.swiglu_f32_launch((gu, ldgu, t), n, (y, ldy), None)
    }

    /// [`Self::swiglu_rows`], then `gemm`'s quantization of the rows into `acts`, the row
    /// scales written by the SwiGLU kernel (as [`Self::rms_norm_quantize`]).
    #[allow(clippy::too_many_arguments)]
    pub fn swiglu_quantize(
        &self,
        gu: &DeviceBuffer<f32>,
        ldgu: usize,
        t: usize,
        n: usize,
        y: &mut DeviceBuffer<f32>,
        ldy: usize,
        gemm: &GemmMx,
        acts: &mut GemmActs,
    ) -> Result<(), CudaError> {
        check_scales(acts, t, "rows_swiglu_f32")?;
        self.swiglu_f32_launch((gu, ldgu, t), n, (y, ldy), Some(acts.row_scales_mut()))?;
        gemm.quantize_codes(y, t, n, ldy, acts)
    }

    fn swiglu_f32_launch(
        &self,
        (gu, ldgu, t): (&DeviceBuffer<f32>, usize, usize),
        n: usize,
        (y, ldy): (&mut DeviceBuffer<f32>, usize),
        scales: Option<&mut DeviceBuffer<f32>>,
    ) -> Result<(), CudaError> {
        let op = "rows_swiglu_f32";
        check_rows(op, (gu.len(), ldgu, 2 * n), t, (y.len(), ldy, n))?;
        let (ldi, ni, ldyi) = (int(ldgu, op)?, int(n, op)?, int(ldy, op)?);
        let cfg = Self::rows_cfg(t, op)?;
        let st = self.ctx().stream();
        let mut b = st.launch_builder(&self.swiglu_f32);
        b.arg(&gu.slice)
            .arg(&ldi)
            .arg(&ni)
            .arg(&mut y.slice)
            .arg(&ldyi);
        let null = 0u64;
        match scales {
            Some(r) => b.arg(&mut r.slice),
            None => b.arg(&null),
        };
        // SAFETY: as in `rms_f32_launch`.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rows_swiglu_f32)"))?;
        Ok(())
    }
}
