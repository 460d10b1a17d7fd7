//! The f32-row producers of a prefill chunk on the FP8 GEMM path: RMSNorm and SwiGLU
//! over `t` rows written as plain f32 rows (`kernels/attn_prefill.cu`), which
//! [`super::GemmMx::quantize`] then rounds to E4M3 for the tensor cores.
//!
//! Key design choice: these rows keep the exact path's arithmetic (the same RMSNorm and
//! SwiGLU expressions in f32 as the x-preparation kernels) and differ only in where they
//! write, so the FP8 path's one approximation is the activation quantization itself.

use cudarc::driver::PushKernelArg;

use super::attn_prefill::{PrefillOps, int, shape};
use super::context::DeviceBuffer;
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
        // SAFETY: argument order and types match the kernel; `check_rows` bounded every
        // row read and written.
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
        // SAFETY: argument order and types match the kernel; `check_rows` bounded every
        // row read and written.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(rows_swiglu_f32)"))?;
        Ok(())
    }
}
