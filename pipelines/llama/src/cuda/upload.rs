//! Uploading a loaded model's weights to the GPU: MX matrices re-tiled for the
//! tensor-core GEMV (and, for the FP8 prefill, a second time as E4M3 GEMM tiles), norms
//! and biases as f32, and each sequence's per-layer KV caches.
//!
//! Key design choice: the host loader ([`crate::weights::load`] with MXFP8 or MXFP4)
//! already decoded every GGUF/safetensors tensor to f32 and packed it in the favlo-mx
//! layout (K padded with zero codes to whole 128-byte chunks), so uploading is a pure
//! re-tiling ([`tile_mx`]) of those bytes: the CPU path with the same format computes
//! with exactly the same weight values.

use favlo_mx::MxView;
use favlo_runtime::buffer::Buffer;
use favlo_runtime::cuda::{
    CudaContext, DeviceBuffer, GemmWeights, KvCache, MxTiled, tile_gemm, tile_gemm_swiglu, tile_mx,
};
use favlo_runtime::ledger::{Owner, SpanKind};

use crate::error::LlamaError;
use crate::weights::{Layer, Matrix};

use super::dev_err;

/// One decoder block on the device.
pub(super) struct DevLayer {
    pub attn_norm: DeviceBuffer<f32>,
    pub qkv: MxTiled,
    pub qkv_bias: Option<DeviceBuffer<f32>>,
    pub q_norm: Option<DeviceBuffer<f32>>,
    pub k_norm: Option<DeviceBuffer<f32>>,
    pub o: MxTiled,
    pub ffn_norm: DeviceBuffer<f32>,
    pub gate_up: MxTiled,
    pub down: MxTiled,
}

/// A block's projections tiled for `GemmMx` (FP8 prefill).
pub(super) struct Fp8Layer {
    pub qkv: GemmWeights,
    pub o: GemmWeights,
    pub gate_up: GemmWeights,
    pub down: GemmWeights,
}

/// The MX view of a matrix; other storage is an error (the CUDA path runs MXFP8 /
/// MXFP4 only).
fn mx_view<'a>(m: &'a Matrix, name: &str) -> Result<MxView<'a>, LlamaError> {
    match m {
        Matrix::Mx { buf, layout } => MxView::new(*layout, buf).map_err(LlamaError::Mx),
        _ => Err(LlamaError::Request {
            message: format!("CUDA runs MXFP8 or MXFP4 weights; {name} is stored otherwise"),
        }),
    }
}

/// An MX matrix re-tiled for the GEMV and uploaded.
pub(super) fn matrix(
    ctx: &CudaContext,
    owner: &Owner,
    m: &Matrix,
    name: &str,
) -> Result<MxTiled, LlamaError> {
    MxTiled::upload(ctx, owner, &tile_mx(mx_view(m, name)?)).map_err(dev_err)
}

/// An MX matrix re-tiled as E4M3 codes for the FP8 GEMM (MXFP4 folded exactly) and
/// uploaded.
fn gemm_matrix(
    ctx: &CudaContext,
    owner: &Owner,
    m: &Matrix,
    name: &str,
) -> Result<GemmWeights, LlamaError> {
    let host = tile_gemm(mx_view(m, name)?).map_err(dev_err)?;
    GemmWeights::upload(ctx, owner, &host).map_err(dev_err)
}

/// The gate | up matrix for the FP8 GEMM: paired for the SwiGLU GEMM
/// (`GemmMx::gemm_swiglu`) when `paired` ([`paired_gate_up`]), else as [`gemm_matrix`].
fn gate_up_matrix(
    ctx: &CudaContext,
    owner: &Owner,
    m: &Matrix,
    name: &str,
    paired: bool,
) -> Result<GemmWeights, LlamaError> {
    let view = mx_view(m, name)?;
    let host = if paired {
        tile_gemm_swiglu(view)
    } else {
        tile_gemm(view)
    }
    .map_err(dev_err)?;
    GemmWeights::upload(ctx, owner, &host).map_err(dev_err)
}

/// Whether the FP8 prefill's gate|up weights of intermediate size `ff` are paired for
/// the SwiGLU GEMM (then the chunk holds no [chunk, 2·ff] gate|up rows): when `ff` is a
/// multiple of 64, unless `FAVLO_CUDA_SWIGLU_GEMM=0` (for comparisons). Decided once
/// per open.
pub(super) fn paired_gate_up(ff: usize) -> bool {
    ff > 0
        && ff.is_multiple_of(64)
        && std::env::var("FAVLO_CUDA_SWIGLU_GEMM").map_or(true, |v| v != "0")
}

/// The FP8 prefill's copies of block `li`'s four projections (gate | up `paired` for
/// the SwiGLU GEMM).
pub(super) fn fp8_layer(
    ctx: &CudaContext,
    owner: &Owner,
    l: &Layer,
    li: usize,
    paired: bool,
) -> Result<Fp8Layer, LlamaError> {
    Ok(Fp8Layer {
        qkv: gemm_matrix(ctx, owner, &l.qkv, &format!("blk.{li}.qkv"))?,
        o: gemm_matrix(ctx, owner, &l.wo, &format!("blk.{li}.attn_output"))?,
        gate_up: gate_up_matrix(
            ctx,
            owner,
            &l.gate_up,
            &format!("blk.{li}.ffn_gate_up"),
            paired,
        )?,
        down: gemm_matrix(ctx, owner, &l.down, &format!("blk.{li}.ffn_down"))?,
    })
}

/// An f32 host buffer copied to the device as resident weights.
pub(super) fn vector(
    ctx: &CudaContext,
    owner: &Owner,
    v: &Buffer<f32>,
) -> Result<DeviceBuffer<f32>, LlamaError> {
    ctx.upload(owner, SpanKind::Resident, v).map_err(dev_err)
}

/// One sequence's zeroed KV caches, one per layer, of `capacity` tokens each.
pub(super) fn kv_caches(
    ctx: &CudaContext,
    owner: &Owner,
    layers: usize,
    (f16, capacity, n_kv_heads, head_dim): (bool, usize, usize, usize),
) -> Result<Vec<KvCache>, LlamaError> {
    (0..layers)
        .map(|_| {
            KvCache::with_head_dim(ctx, owner, f16, capacity, n_kv_heads, head_dim).map_err(dev_err)
        })
        .collect()
}

/// One block: its matrices, norms and bias.
pub(super) fn layer(
    ctx: &CudaContext,
    owner: &Owner,
    l: &Layer,
    li: usize,
) -> Result<DevLayer, LlamaError> {
    let opt = |b: &Option<Buffer<f32>>| b.as_ref().map(|b| vector(ctx, owner, b)).transpose();
    Ok(DevLayer {
        attn_norm: vector(ctx, owner, &l.attn_norm)?,
        qkv: matrix(ctx, owner, &l.qkv, &format!("blk.{li}.qkv"))?,
        qkv_bias: opt(&l.qkv_bias)?,
        q_norm: opt(&l.q_norm)?,
        k_norm: opt(&l.k_norm)?,
        o: matrix(ctx, owner, &l.wo, &format!("blk.{li}.attn_output"))?,
        ffn_norm: vector(ctx, owner, &l.ffn_norm)?,
        gate_up: matrix(ctx, owner, &l.gate_up, &format!("blk.{li}.ffn_gate_up"))?,
        down: matrix(ctx, owner, &l.down, &format!("blk.{li}.ffn_down"))?,
    })
}
