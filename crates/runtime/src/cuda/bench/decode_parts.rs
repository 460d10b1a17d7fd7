//! Where a decode step's time goes: each GEMV kind and the attention step (q/k norm +
//! RoPE + KV store + attention, in every [`AttnMode`]) timed over all layers with plain
//! launches, and the step's three groups of kernels (GEMVs, the attention step, the
//! small norm/prep/SwiGLU kernels) each captured as a graph of one token's worth.
//!
//! Key design choice: the parts run on the bench's own model and buffers (their
//! outputs are scratch; only the time matters), so the bytes and shapes are exactly
//! those of the step they split.

use favlo_mx::MxLayout;

use super::BenchError;
use super::decode::attention;
use super::decode::{AttnMode, DecodeBenchOptions, EPS, HD, HIDDEN, INTER, Kernels, Model, NKV};
use crate::cuda::{CudaContext, CudaError, CudaGraph, time_ms};

/// One part, over all layers.
#[derive(Clone, Debug)]
pub struct PartRow {
    pub name: String,
    /// Bytes it reads (weights, or K and V).
    pub bytes: f64,
    pub us: f64,
}

/// The split of one decode step.
#[derive(Clone, Debug)]
pub struct DecodeParts {
    /// q|k|v, o, gate|up, down (all layers), lm_head, the attention step in each mode
    /// (all layers).
    pub rows: Vec<PartRow>,
    /// Per token as graphs: all GEMVs, the attention step (the run's mode), the small
    /// kernels (RMSNorm and SwiGLU x preps; ms).
    pub graph_gemv_ms: f64,
    pub graph_attn_ms: f64,
    pub graph_small_ms: f64,
    /// The attention step's graph in every mode (ms per token).
    pub graph_attn_modes: Vec<(AttnMode, f64)>,
}

/// Milliseconds per replay of a graph of what `f` launches (GPU time, no host cost).
fn graph_ms(
    ctx: &CudaContext,
    reps: usize,
    f: impl FnOnce() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let graph = CudaGraph::capture(ctx, f)?;
    time_ms(ctx, 2, reps, || graph.launch())
}

pub(super) fn measure_parts(
    ctx: &CudaContext,
    k: &mut Kernels,
    m: &mut Model,
    shapes: &[MxLayout; 5],
    opts: &DecodeBenchOptions,
) -> Result<DecodeParts, BenchError> {
    let n = opts.layers as f64;
    let scale = 1.0 / (HD as f32).sqrt();
    let cap = m.cap;
    let (layers, b) = (&mut m.layers, &mut m.b);
    let mut rows = Vec::new();
    let mut row = |name: &str, bytes: f64, ms: f64| {
        rows.push(PartRow {
            name: name.into(),
            bytes,
            us: ms * 1e3,
        })
    };
    let t = time_ms(ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.qkv, &b.prep, &mut b.qkv, false))
    })?;
    row("q|k|v GEMV", n * shapes[0].total_bytes() as f64, t);
    let t = time_ms(ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.o, &b.prep, &mut b.attn, false))
    })?;
    row("o GEMV", n * shapes[1].total_bytes() as f64, t);
    let t = time_ms(ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.gate_up, &b.prep, &mut b.gu, false))
    })?;
    row("gate|up GEMV", n * shapes[2].total_bytes() as f64, t);
    k.gemv.prep_x(&b.act, INTER, &mut b.prep)?;
    let t = time_ms(ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.down, &b.prep, &mut b.xn, false))
    })?;
    row("down GEMV", n * shapes[3].total_bytes() as f64, t);
    k.gemv.prep_x(&b.xn, HIDDEN, &mut b.prep)?;
    let t = time_ms(ctx, 1, 5, || {
        k.gemv.gemv(&m.lm_head, &b.prep, &mut b.logits, false)
    })?;
    row("lm_head GEMV", shapes[4].total_bytes() as f64, t);
    let keys = (opts.context + 1) as f64;
    let kv_elem = if opts.f16_kv { 2.0 } else { 4.0 };
    let mode0 = k.mode;
    let mut graph_attn_modes = Vec::new();
    for mode in AttnMode::ALL {
        k.set_mode(mode);
        let kk: &Kernels = k;
        let t = time_ms(ctx, 1, 5, || {
            layers
                .iter_mut()
                .try_for_each(|l| attention(kk, l, b, cap, scale, false))
        })?;
        row(
            &format!(
                "q/k norm + RoPE + store + attention, {mode:?} ({} keys)",
                opts.context + 1
            ),
            n * keys * (2 * NKV * HD) as f64 * kv_elem,
            t,
        );
        let g = graph_ms(ctx, 10, || {
            layers
                .iter_mut()
                .try_for_each(|l| attention(kk, l, b, cap, scale, true))
        })?;
        graph_attn_modes.push((mode, g));
    }
    k.set_mode(mode0);
    let k: &Kernels = k;
    let graph_attn_ms = graph_attn_modes
        .iter()
        .find(|(md, _)| *md == mode0)
        .map_or(f64::NAN, |(_, g)| *g);

    let graph_gemv_ms = graph_ms(ctx, 10, || {
        for l in layers.iter() {
            k.gemv.gemv(&l.qkv, &b.prep, &mut b.qkv, false)?;
            k.gemv.gemv(&l.o, &b.prep, &mut b.attn, false)?;
            k.gemv.gemv(&l.gate_up, &b.prep, &mut b.gu, false)?;
            k.gemv.gemv(&l.down, &b.prep, &mut b.attn, false)?;
        }
        k.gemv.gemv(&m.lm_head, &b.prep, &mut b.logits, false)
    })?;
    let graph_small_ms = graph_ms(ctx, 10, || {
        for l in layers.iter() {
            k.gemv.rms_norm_prep(&b.h, &l.attn_norm, EPS, &mut b.prep)?;
            k.gemv.rms_norm_prep(&b.h, &l.mlp_norm, EPS, &mut b.prep)?;
            k.gemv.swiglu_prep(&b.gu, INTER, &mut b.prep)?;
        }
        k.gemv.rms_norm_prep(&b.h, &b.final_norm, EPS, &mut b.prep)
    })?;
    Ok(DecodeParts {
        rows,
        graph_gemv_ms,
        graph_attn_ms,
        graph_small_ms,
        graph_attn_modes,
    })
}
