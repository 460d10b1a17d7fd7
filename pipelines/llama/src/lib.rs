//! favlo-llama: the Llama / Qwen2 / Qwen3 dense decoder family on the CPU.
//!
//! Key design choices:
//! - Checkpoints are GGUF (any block type formats can dequantize) or Hugging Face
//!   safetensors. GGUF matrices keep their blocks by default (native kernels with
//!   llama.cpp's activation rounding); otherwise every tensor is decoded once at load
//!   and re-stored as f16, MXFP8, MXFP4 or f32 in ledger buffers.
//! - The context length is the one memory knob: the KV cache is sized to what
//!   the ledger's room allows (see [`runtime::open`]).
//! - Feature `cuda`: the same model on a CUDA GPU (`OpenOptions::device`), MXFP8 or
//!   MXFP4 weights, KV cache on the device, one token step replayed as a CUDA graph;
//!   the sampler and everything above the forward pass are shared (see `cuda/`).
//! - Generation is id-level ([`LlamaRuntime::generate`]); the `LanguagePipeline`
//!   seam, streaming and logprobs are thin layers over it.

mod attention;
mod bench;
mod checkpoint;
pub mod config;
#[cfg(feature = "cuda")]
mod cuda;
mod dump;
mod error;
mod generate;
mod generate_batch;
mod model;
// Used by the CUDA open only; its tests run on every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod prefill_chunk;
mod rotary;
mod runtime;
pub mod sampler;
mod weights;

pub use bench::{BenchOptions, BenchReport, bench};
pub use config::{Arch, LlamaConfig, RopeScaling};
pub use error::LlamaError;
pub use generate::{GenerateParams, Generated, Step, TokenScore};
pub use model::{CHUNK, DeviceChoice, LlamaModel};
pub use runtime::{LlamaRuntime, OpenOptions, PrefillMode, check_device, open};
pub use weights::WeightFormat;
