//! [`AttnMode::FusedO`] in the decode bench: a layer's attention and o projection in
//! one launch (`AttentionDecode::decode_qkv_o`), and its check against the two
//! launches it replaces.
//!
//! Key design choice: the check runs one step each way from the same state with
//! everything else alike (`Fused` attention, then the o GEMV), so the logits differ only
//! by the order in which the o GEMV's chunks are summed (f32 rounding).

use super::BenchError;
use super::decode::{AttnMode, Bufs, EPS, Kernels, Layer, Model, NH, NKV, agree, step_logits};
use crate::cuda::{CudaContext, CudaError, Epilogue, OTail, QkvRope};

/// One layer's q|k|v → attention → o (+ residual) in one launch; `fused`: the o
/// epilogue also prepares the MLP's RMSNorm (as `step_fused`'s o GEMV does).
pub(super) fn attention_o(
    k: &Kernels,
    l: &mut Layer,
    b: &mut Bufs,
    cap: usize,
    scale: f32,
    fused: bool,
) -> Result<(), CudaError> {
    let src = QkvRope {
        qkv: &b.qkv,
        bias: None,
        qk_norm: Some((&l.q_norm, &l.k_norm, EPS)),
        cos: &b.cos,
        sin: &b.sin,
        interleaved: false,
    };
    let epi = if fused {
        Epilogue::residual_norm(&l.mlp_norm, &mut b.prep_n, &mut b.ss)
    } else {
        Epilogue::plain(true)
    };
    let tail = OTail {
        w: &l.o,
        y: &mut b.h,
        epi,
        sync: &mut b.osync,
    };
    k.attn.decode_qkv_o(
        &src,
        &mut l.cache,
        cap,
        NH,
        NKV,
        &b.pos,
        scale,
        &mut b.part,
        &mut b.prep,
        tail,
    )
}

/// One step with `Fused` attention and the o GEMV apart, then one with
/// [`AttnMode::FusedO`], from the same h and position: their logits must agree within
/// 1e-4 of max |logit|. Leaves h restored; the caller sets the mode back.
pub(super) fn check_attn_o(
    ctx: &CudaContext,
    k: &mut Kernels,
    m: &mut Model,
    start: i32,
) -> Result<(f32, f32), BenchError> {
    let h0 = ctx.download(&m.b.h)?;
    k.set_mode(AttnMode::Fused);
    let apart = step_logits(ctx, k, m, &h0, start)?;
    k.set_mode(AttnMode::FusedO);
    let one = step_logits(ctx, k, m, &h0, start)?;
    // Twice: the launch must leave its counters at zero.
    let again = step_logits(ctx, k, m, &h0, start)?;
    ctx.write(&mut m.b.h, &h0)?;
    agree(&one, &again, 0.0, "the attention + o step twice")?;
    agree(&apart, &one, 1e-4, "attention + o in one launch vs apart")
}
