//! The embeddings seam: texts in, vectors and token counts out.
//!
//! Key design choice: the pipeline returns what the model produces (pooled,
//! normalized or not, as that model's card says) with the token count per
//! input; the server writes the OpenAI list object, `usage`, base64 encoding
//! and any `dimensions` truncation. `&self` methods (`Send + Sync`) so the
//! embeddings worker can share one opening across requests.

use serde::{Deserialize, Serialize};

use crate::error::PipelineError;

/// One input's embedding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// The vector (`dimensions()` long).
    pub vector: Vec<f32>,
    /// Tokens the input counted (special tokens included), after truncation.
    pub tokens: usize,
    /// Whether the input was cut to `max_tokens()`.
    pub truncated: bool,
}

/// A loaded embedding model.
pub trait EmbeddingsPipeline: Send + Sync {
    /// Embed each text (non-empty; the server rejects blank inputs). Inputs
    /// longer than `max_tokens()` are truncated and flagged.
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>, PipelineError>;

    /// Embed pre-tokenized inputs (OpenAI token-array `input`). The default
    /// refuses with a 400: pipelines whose tokenizer ids are stable implement it.
    fn embed_tokens(&self, inputs: &[Vec<u32>]) -> Result<Vec<Embedding>, PipelineError> {
        let _ = inputs;
        Err(PipelineError::invalid(
            "this embedding model does not accept token arrays as input",
            Some("input"),
        ))
    }

    /// Vector length.
    fn dimensions(&self) -> usize;

    /// Most tokens one input may have.
    fn max_tokens(&self) -> usize;

    /// Whether a prefix of the vector is itself a usable embedding (Matryoshka
    /// training), so OpenAI `dimensions` below `dimensions()` is allowed.
    fn supports_truncation(&self) -> bool {
        false
    }
}
