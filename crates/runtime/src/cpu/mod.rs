//! CPU kernels: every operation a pipeline runs on the CPU, on plain row-major f32 slices.
//!
//! Key design choices:
//! - Kernels take borrowed slices and never allocate model-sized buffers (a quantized
//!   matrix is dequantized in registers or in small per-thread tiles, never as a whole).
//! - Each kernel picks its instruction set once at run time ([`simd::Isa`]): AVX-512,
//!   AVX2+FMA+F16C, or a portable scalar path; all paths are checked against the f64
//!   scalar [`reference`] in `tests/kernels_*.rs`.
//! - Threads come from rayon and are used only where the work is big enough to pay.
//! - Shapes are the caller's contract: a mismatch trips a debug assertion; in release
//!   builds the kernel writes only the part of `out` that is consistent (it never panics).

mod activation;
pub mod amx;
mod attention;
mod channels;
pub mod conv;
mod conv1d;
mod conv_transpose1d;
mod embedding;
pub mod gguf_dot;
mod linear;
mod matmul;
mod norm;
pub mod reference;
mod rel_attention;
mod rope;
mod sampling;
mod sgemm;
pub mod simd;
mod weight;

pub use activation::{add, erf, gelu, gelu_tanh, silu, softmax, swiglu};
pub use attention::{AttnShape, attention_causal, attention_full};
pub use channels::{gated_tanh_sigmoid, layer_norm_channels, leaky_relu};
pub use conv::{BatchNorm, ConvTranspose2d, batch_norm, conv_transpose2d, relu, tanh};
pub use conv_transpose1d::{ConvTranspose1d, conv_transpose1d};
pub use conv1d::{Conv1d, ConvFuse, conv1d, conv1d_depthwise, conv1d_fused};
pub use embedding::embedding;
pub use gguf_dot::{GgufMatrix, GgufType, gguf_linear, gguf_linear_into};
pub use linear::linear;
pub use matmul::matmul;
pub use norm::{layer_norm, rms_norm};
pub use rel_attention::{RelAttnShape, attention_rel_window};
pub use rope::{Rope, RopeLayout};
pub use sampling::{argmax, top_k};
pub use sgemm::{sgemm_nn, sgemm_nn_par};
pub use weight::WeightRef;
