//! Error type of the tokenizer module.
//!
//! Key design choice: errors from the `tokenizers` and `minijinja` crates are boxed
//! trait objects or carry lifetimes, so they are flattened to their message text here,
//! next to structured fields (path, key, name) that say where things went wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot load tokenizer {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("invalid {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("cannot build tokenizer: {message}")]
    Build { message: String },
    #[error("unsupported GGUF tokenizer model '{model}' (supported: gpt2, llama)")]
    UnsupportedModel { model: String },
    #[error("unsupported GGUF pre-tokenizer '{pre}'")]
    UnsupportedPre { pre: String },
    #[error("GGUF tokenizer metadata key {key}: {reason}")]
    Metadata { key: String, reason: String },
    #[error("tokenizer encode failed: {message}")]
    Encode { message: String },
    #[error("tokenizer decode failed: {message}")]
    Decode { message: String },
    #[error("chat template does not compile: {message}")]
    TemplateSyntax { message: String },
    #[error("chat template rendering failed: {message}")]
    TemplateRender { message: String },
}
