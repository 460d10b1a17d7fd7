//! Checkpoint readers and tokenizers: everything that turns files people already
//! have into validated tensors and token ids.
//!
//! Key design choice: every reader memory-maps its file and validates each length,
//! offset, dtype and shape before a single element is read, so a corrupt or
//! truncated file is an error that names the file and the field, never a panic.

pub mod gguf;
pub mod mx_checkpoint;
pub mod onnx;
pub mod safetensors;
pub mod tokenizer;
pub mod torch;
