//! `BertEmbeddings`: the [`EmbeddingsPipeline`] over an [`Encoder`], its tokenizer and its
//! sentence-transformers pooling.
//!
//! Key choices: inputs are tokenized, truncated at the model's limit (the smaller of the
//! position table and `sentence_bert_config.json`'s `max_seq_length`) and sorted by length;
//! consecutive inputs then form batches of at most `max_batch_tokens` tokens (sized against the
//! ledger's room at open time) and `FORWARD_TOKENS` (cache-sized) so similar lengths run
//! together. Vectors come back in input order.

use std::path::Path;
use std::sync::Arc;

use favlo_pipeline::{Embedding, EmbeddingsPipeline, ModelSpec, PipelineError};
use favlo_runtime::ledger::{Ledger, Owner, fit};

use crate::config::SentenceConfig;
use crate::error::BertError;
use crate::model::Encoder;
use crate::pooling::{l2_normalize, pool};
use crate::tokenize::{Encoded, EncoderTokenizer};
use crate::weights::WeightFormat;

/// Most inputs one forward pass takes, whatever their length.
const MAX_BATCH_SEQS: usize = 64;
/// Preferred tokens per forward pass (more only helps GEMM efficiency marginally).
const PREFERRED_BATCH_TOKENS: usize = 8192;
/// Tokens one forward pass aims at: a request of 32 MiniLM inputs (~1,200 tokens) runs as
/// ~3 forwards, so each layer's activations (≈ 20 KB per token) stay near the caches between
/// the AMX GEMMs instead of streaming from memory (measured on the shared 2-core machine,
/// batch 32: +20% sentences per CPU-second against one 1,200-token forward). Packing has no
/// padding, so splitting costs no compute; one sequence longer than this still runs alone.
const FORWARD_TOKENS: usize = 512;

/// Options for [`BertEmbeddings::open`].
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    /// Weight storage (f32 as stored, or int8 quantized at load).
    pub format: WeightFormat,
}

/// A loaded sentence-embedding model.
pub struct BertEmbeddings {
    tokenizer: EncoderTokenizer,
    encoder: Encoder,
    sentence: SentenceConfig,
    max_tokens: usize,
    max_batch_tokens: usize,
}

impl BertEmbeddings {
    /// Open the model in `dir` (config.json, model.safetensors, tokenizer.json and the optional
    /// sentence-transformers files).
    pub fn open(
        dir: &Path,
        ledger: Arc<Ledger>,
        owner: Owner,
        options: OpenOptions,
    ) -> Result<Self, BertError> {
        let sentence = SentenceConfig::load(dir)?;
        let tokenizer = EncoderTokenizer::from_file(&dir.join("tokenizer.json"))?;
        let encoder = Encoder::open(dir, Arc::clone(&ledger), owner, options.format)?;
        let mut max_tokens = encoder.config().max_positions();
        if let Some(limit) = sentence.max_seq_length {
            max_tokens = max_tokens.min(limit.max(2));
        }
        let request = format!("{} embeddings at {max_tokens} tokens", dir.display());
        let max_batch_tokens = fit(
            &ledger,
            &request,
            max_tokens,
            PREFERRED_BATCH_TOKENS.max(max_tokens),
            |t| encoder.scratch_bytes(t),
        )
        .map_err(|e| BertError::ledger(request.clone(), e))?;
        Ok(BertEmbeddings {
            tokenizer,
            encoder,
            sentence,
            max_tokens,
            max_batch_tokens,
        })
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Pooling mode and whether vectors are normalized.
    pub fn sentence_config(&self) -> SentenceConfig {
        self.sentence
    }

    /// Tokenize and truncate one text.
    pub fn tokenize(&self, text: &str) -> Result<Encoded, BertError> {
        self.tokenizer.encode(text, self.max_tokens)
    }

    /// Embed already tokenized inputs, with at most `batch` inputs per forward pass
    /// (`None`: as many as the token budget allows).
    pub fn embed_encoded(
        &self,
        inputs: &[Encoded],
        batch: Option<usize>,
    ) -> Result<Vec<Embedding>, BertError> {
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| inputs[i].ids.len());
        let max_seqs = batch.unwrap_or(MAX_BATCH_SEQS).max(1);
        let mut out: Vec<Option<Embedding>> = vec![None; inputs.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < order.len() && end - start < max_seqs {
                let len = inputs[order[end]].ids.len();
                if end > start && tokens + len > self.max_batch_tokens.min(FORWARD_TOKENS) {
                    break;
                }
                tokens += len;
                end += 1;
            }
            let seqs: Vec<&[u32]> = order[start..end]
                .iter()
                .map(|&i| inputs[i].ids.as_slice())
                .collect();
            let hidden = self.encoder.forward(&seqs)?;
            for (slot, &i) in order[start..end].iter().enumerate() {
                let mut vector = pool(
                    hidden.sequence(slot),
                    hidden.hidden_size,
                    self.sentence.pooling,
                );
                if self.sentence.normalize {
                    l2_normalize(&mut vector);
                }
                out[i] = Some(Embedding {
                    vector,
                    tokens: inputs[i].ids.len(),
                    truncated: inputs[i].truncated,
                });
            }
            start = end;
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Embed texts with at most `batch` inputs per forward pass.
    pub fn embed_texts(
        &self,
        texts: &[&str],
        batch: Option<usize>,
    ) -> Result<Vec<Embedding>, PipelineError> {
        let mut encoded = Vec::with_capacity(texts.len());
        for text in texts {
            if text.trim().is_empty() {
                return Err(PipelineError::invalid(
                    "input must be a string",
                    Some("input"),
                ));
            }
            encoded.push(self.tokenize(text).map_err(to_pipeline_error)?);
        }
        self.embed_encoded(&encoded, batch)
            .map_err(to_pipeline_error)
    }
}

impl EmbeddingsPipeline for BertEmbeddings {
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>, PipelineError> {
        self.embed_texts(texts, None)
    }

    fn dimensions(&self) -> usize {
        self.encoder.config().hidden_size
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }
}

/// Map a crate error to the seam's status classes.
pub fn to_pipeline_error(e: BertError) -> PipelineError {
    match e {
        BertError::Ledger { what, .. } => PipelineError::does_not_fit(what),
        other => PipelineError::internal(other),
    }
}

/// Open the embeddings pipeline for a registry row (what the binary's factory calls).
/// `spec.dir` holds the checkpoint; a `spec.defaults` of `{"weights": "int8"}` quantizes at load.
pub fn open_embeddings(
    spec: &ModelSpec,
    ledger: Arc<Ledger>,
    owner: Owner,
) -> Result<Box<dyn EmbeddingsPipeline>, PipelineError> {
    let format = match spec.defaults.get("weights").and_then(|v| v.as_str()) {
        Some("int8") => WeightFormat::Int8,
        _ => WeightFormat::AsStored,
    };
    let model = BertEmbeddings::open(&spec.dir, ledger, owner, OpenOptions { format }).map_err(
        |e| match e {
            BertError::Ledger { .. } => PipelineError::does_not_fit(format!("{} ({e})", spec.id)),
            other => PipelineError::internal(other),
        },
    )?;
    Ok(Box::new(model))
}
