//! The decode step with the RMSNorm and SwiGLU preparations fused into the GEMVs
//! (`Epilogue`), and its check against the step with separate kernels.
//!
//! Per token: `norm_parts_prep` of the first layer's input, then per layer q|k|v GEMV
//! (applies 1/rms) → the attention step → o GEMV (+residual; prepares the MLP norm) →
//! gate|up GEMV (applies 1/rms; prepares SwiGLU) → down GEMV (+residual; prepares the
//! next layer's norm, or the final one), then lm_head (applies 1/rms): 7 launches per
//! layer instead of 10. The check runs one step each way from the same state: the two
//! differ only in where the RMSNorm's scalar is applied (f32 rounding).

use super::BenchError;
use super::decode::{EPS, HD, HIDDEN, Kernels, Model, agree, attention, step_logits};
use crate::cuda::{CudaContext, CudaError, DeviceBuffer, Epilogue, NormIn};

/// The consumer side of the model's RMSNorm over `parts`.
fn norm_in(parts: &DeviceBuffer<f32>) -> NormIn<'_> {
    NormIn {
        parts,
        dim: HIDDEN,
        eps: EPS,
    }
}

/// One fused decode step (all layers + lm_head), then `*pos += 1`.
pub(super) fn step_fused(k: &Kernels, m: &mut Model) -> Result<(), CudaError> {
    let scale = 1.0 / (HD as f32).sqrt();
    let (b, cap) = (&mut m.b, m.cap);
    if let Some(first) = m.layers.first() {
        k.gemv
            .norm_parts_prep(&b.h, &first.attn_norm, &mut b.prep_n, &mut b.ss)?;
    }
    for i in 0..m.layers.len() {
        let (done, rest) = m.layers.split_at_mut(i + 1);
        let Some(l) = done.last_mut() else { break };
        if k.skip & 1 == 0 {
            let qkv = Epilogue::normed(norm_in(&b.ss));
            k.gemv_for(1)
                .gemv_fused(&l.qkv, &b.prep_n, &mut b.qkv, qkv)?;
        }
        if k.skip & 2 == 0 {
            attention(k, l, b, cap, scale, true)?;
        }
        if k.skip & 4 == 0 {
            let o = Epilogue::residual_norm(&l.mlp_norm, &mut b.prep_n, &mut b.ss);
            k.gemv_for(4).gemv_fused(&l.o, &b.prep, &mut b.h, o)?;
        }
        if k.skip & 8 == 0 {
            let gate_up = Epilogue::normed_swiglu(norm_in(&b.ss), &mut b.prep_f, &mut b.pairs);
            k.gemv_for(8)
                .gemv_fused(&l.gate_up, &b.prep_n, &mut b.gu, gate_up)?;
        }
        if k.skip & 16 == 0 {
            let next_norm = rest.first().map_or(&b.final_norm, |n| &n.attn_norm);
            let down = Epilogue::residual_norm(next_norm, &mut b.prep_n, &mut b.ss);
            k.gemv_for(16)
                .gemv_fused(&l.down, &b.prep_f, &mut b.h, down)?;
        }
    }
    if k.skip & 32 == 0 {
        let head = Epilogue::normed(norm_in(&b.ss));
        k.gemv_for(32)
            .gemv_fused(&m.lm_head, &b.prep_n, &mut b.logits, head)?;
    }
    k.ops.advance_pos(&mut b.pos)
}

/// One step with separate norm and SwiGLU kernels, then one fused, from the same h and
/// position: their logits must agree within 1e-4 of max |logit| (the fused step applies
/// each RMSNorm's scalar to the GEMV's rows instead of its input, so they differ by f32
/// rounding carried through the layers). Leaves the steps fused and h restored.
pub(super) fn check_fused(
    ctx: &CudaContext,
    k: &mut Kernels,
    m: &mut Model,
    start: i32,
) -> Result<(f32, f32), BenchError> {
    let h0 = ctx.download(&m.b.h)?;
    k.fused = false;
    let plain = step_logits(ctx, k, m, &h0, start)?;
    k.fused = true;
    let fused = step_logits(ctx, k, m, &h0, start)?;
    // Twice: the SwiGLU pair counters must be back at zero after a step.
    let again = step_logits(ctx, k, m, &h0, start)?;
    ctx.write(&mut m.b.h, &h0)?;
    agree(
        &fused,
        &again,
        0.0,
        "two fused decode steps from the same state",
    )?;
    agree(
        &plain,
        &fused,
        1e-4,
        "one fused decode step vs separate norm and SwiGLU kernels",
    )
}
