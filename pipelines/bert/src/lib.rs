//! favlo-bert: the encoder embeddings family — BERT (all-MiniLM-L6-v2, Favlo's default) and
//! (XLM-)RoBERTa (bge-m3's architecture) — from HF `config.json` + safetensors, pooled as the
//! sentence-transformers files say, with an int8 weight variant.
//!
//! Key design choices:
//! - Batches are packed (no pad token is computed) and sorted by length; attention runs per
//!   sequence. See [`model`].
//! - Every weight and scratch buffer is a ledger span; kernels come from
//!   `favlo_runtime::cpu` (f32 linears: its row-major `sgemm_nn` on weights packed at load,
//!   [`dense`]), except the int8 linear ([`int8`]) and the fused bias + GELU pass ([`epilogue`]).
//! - Tokenization ignores the padding/truncation a `tokenizer.json` configures and truncates at
//!   the model's own limit, reporting it ([`tokenize`]).
//! - With the `cuda` feature, `OpenOptions::device = Device::Cuda(n)` runs the same packed
//!   forward on an NVIDIA GPU in exact f32 (`cuda`, module present only with the feature).

pub mod attention;
pub mod bench;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod dense;
pub mod epilogue;
pub mod error;
pub mod int8;
pub mod model;
pub mod pipeline;
pub mod pooling;
pub mod quantize;
pub mod residual_norm;
pub mod tokenize;
pub mod weights;

pub use bench::{BenchOptions, BenchReport, BenchRow, bench_embeddings, corpus};
pub use config::{EncoderConfig, Family, Pooling, SentenceConfig};
pub use error::BertError;
pub use favlo_runtime::cpu::amx::Precision;
pub use model::{Encoder, Hidden};
pub use pipeline::{BertEmbeddings, OpenOptions, check_device, open_embeddings};
pub use quantize::{QuantizeReport, quantize_int8, quantize_int8_grouped};
pub use weights::{DEFAULT_AMX, WeightFormat};
