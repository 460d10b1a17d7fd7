//! The CUDA backend (feature `cuda`): a device context whose memory is accounted in
//! the ledger, NVRTC-compiled kernels cached on disk, and launch wrappers.
//!
//! Key design choice: nothing links against CUDA. `cudarc` loads `libcuda` and
//! `libnvrtc` at run time; before any call into them, [`CudaContext::open`] checks
//! that both libraries can be found and otherwise returns
//! [`CudaError::Unavailable`], so a build with this feature still runs (and the caller
//! falls back to the CPU) on machines with no NVIDIA driver.

mod attention;
mod attn_prefill;
pub mod bench;
mod blas;
mod compile;
mod context;
mod conv1d;
mod conv2d;
mod decode;
mod decode_batch;
mod encoder;
mod gemm;
mod gemm_fold;
mod gemm_tile;
mod gemv;
mod gemv_batch;
mod gemv_chain;
mod gemv_epi;
mod gemv_tile;
mod graph;
mod kernels;
mod launch;
mod mx_gemm;
mod prefill_rows;
mod rel_encoder;
mod rope_store;
mod sample;
pub mod selftest;
mod timing;
mod vits_dp;
mod warm;

pub use attention::{
    ATTN_HEAD_DIM, ATTN_HEAD_DIMS, ATTN_ONEPASS_MIN_CAPACITY, AttentionDecode, AttnKernel, AttnOut,
    KvCache, QkvRope, attn_partials_len,
};
pub use attn_prefill::{AttnPrecision, PrefillOps, PrefillShape, QkNorm};
pub use blas::{BlasLt, BlasOut};
pub use compile::{
    CompiledKernel, Module, WarmReport, cache_dir, compile_cubin, nvrtc_version, warm_cache,
};
pub use context::{CudaContext, DeviceBuffer, MIN_COMPUTE_CAPABILITY};
pub use conv1d::{Conv1dEpilogue, Conv1dOps};
pub use conv2d::{CONV_SPLIT_MAX, ChannelAffine, Conv2dOps, ConvAct};
pub use decode::DecodeOps;
pub use decode_batch::{AttnSeq, RopeSeq, SEQ_MAX};
pub use encoder::{ENC_MAX_HEAD_DIM, ENC_QUERY_TILE, EncAct, EncPool, EncoderOps, attention_tiles};
pub use gemm::{GemmActs, GemmKernel, GemmMx, TileStore};
pub use gemm_tile::{
    GEMM_KB, GEMM_TILE, GemmWeights, GemmWeightsHost, tile_gemm, tile_gemm_swiglu, tile_offset,
};
pub use gemv::{
    GemvKernel, GemvMma, SmemLimits, XPrep, ring_config, ring_stage_bytes, warps_per_block,
};
pub use gemv_batch::GEMV_BATCH_MAX;
pub use gemv_chain::{ChainIo, GemvChain};
pub use gemv_epi::{EpiOut, Epilogue, NormIn};
pub use gemv_tile::{MxTiled, MxTiledHost, tile_mx};
pub use graph::CudaGraph;
pub use kernels::{CudaKernels, GemvDecode, MxDevice, rope_tables};
pub use mx_gemm::{MAX_TERMS, MxGemm, mx_gemm_k};
pub use rel_encoder::RelEncoderOps;
pub use rope_store::RopeStore;
pub use sample::{DeviceSampler, MAX_VOCAB, SAMPLE_OUT_LEN, SampleParams};
pub use timing::{copy_bandwidth_gbps, time_ms};
pub use vits_dp::{SPLINE_MAX_BINS, VitsDpOps};
pub use warm::{KernelSet, warm_kernels};

use crate::ledger::LedgerError;

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The driver or NVRTC library is missing, or no device answers.
    #[error("CUDA is unavailable: {reason}")]
    Unavailable { reason: String },
    /// A driver call failed.
    #[error("CUDA driver call {op} failed: {message}")]
    Driver { op: &'static str, message: String },
    /// NVRTC refused a kernel source.
    #[error("NVRTC could not compile {kernel} for {arch}: {log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
    /// The on-disk kernel cache could not be written (reading failures just recompile).
    #[error("kernel cache {path}: {message}")]
    Cache { path: String, message: String },
    /// The ledger refused the device allocation.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Device buffers of `owner` were still alive at sweep time.
    #[error("owner {owner} still holds {buffers} device buffers ({bytes} bytes) on cuda:{ordinal}")]
    Leaked {
        owner: String,
        ordinal: usize,
        buffers: usize,
        bytes: u64,
    },
    /// Operand sizes do not agree.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
}

pub(crate) fn driver_err(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        op,
        message: format!("{e:?}"),
    }
}
