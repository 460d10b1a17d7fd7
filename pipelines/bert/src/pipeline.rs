//! `BertEmbeddings`: the [`EmbeddingsPipeline`] over an [`Encoder`], its tokenizer and its
//! sentence-transformers pooling.
//!
//! Key choices: inputs are tokenized, truncated at the model's limit (the smaller of the
//! position table and `sentence_bert_config.json`'s `max_seq_length`) and sorted by length;
//! consecutive inputs then form batches of at most `max_batch_tokens` tokens (sized against the
//! ledger's room at open time) and `FORWARD_TOKENS` (cache-sized) so similar lengths run
//! together. Vectors come back in input order.
//!
//! `OpenOptions::device` picks where the encoder runs: the CPU (default, [`Encoder`]) or,
//! with the `cuda` feature, an NVIDIA GPU ([`crate::cuda::CudaEncoder`], exact f32, the
//! same batching with larger per-forward limits, pooling on the device).

use std::path::Path;
use std::sync::Arc;

use favlo_pipeline::{Embedding, EmbeddingsPipeline, ModelSpec, PipelineError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner, fit};
use rayon::prelude::*;

use crate::config::{EncoderConfig, SentenceConfig};
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
/// On a GPU: most inputs and tokens per forward pass. The GPU has no cache to stay in
/// and each forward costs ~60 launches whatever its size, so one request is one forward
/// whenever it fits (the CPU's splitting would only add launches).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const GPU_BATCH_SEQS: usize = 256;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const GPU_FORWARD_TOKENS: usize = 16_384;

/// Options for [`BertEmbeddings::open`].
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Weight storage (f32 as stored, or int8 quantized at load). On CUDA every linear
    /// runs in f32: int8 weights (stored or quantized here) are widened at upload.
    pub format: WeightFormat,
    /// Where the encoder runs: `Device::Cpu` (default) or `Device::Cuda(n)` (needs the
    /// `cuda` feature and a usable driver, NVRTC and cuBLASLt).
    pub device: Device,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            format: WeightFormat::AsStored,
            device: Device::Cpu,
        }
    }
}

/// Where the forward pass runs (one per pipeline, never moved in a hot path, so the
/// variants' different sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Backend {
    Cpu(Encoder),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaEncoder),
}

/// A loaded sentence-embedding model.
pub struct BertEmbeddings {
    tokenizer: EncoderTokenizer,
    backend: Backend,
    sentence: SentenceConfig,
    max_tokens: usize,
    max_batch_tokens: usize,
    /// Most inputs / tokens one forward takes (CPU: cache-sized; GPU: larger).
    batch_seqs: usize,
    forward_tokens: usize,
}

/// Whether `device` can run this pipeline here: `Ok` for the CPU; for `Device::Cuda(n)`
/// the build must have the `cuda` feature and the driver, NVRTC, cuBLASLt and device `n`
/// must answer. The error ("CUDA is unavailable: …") says why not; the binary can call
/// this at start-up beside `favlo_llama::check_device`.
pub fn check_device(device: Device) -> Result<(), BertError> {
    match device {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => crate::cuda::probe(n as usize),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(BertError::Device {
            message: "CUDA is unavailable: favlo-bert was built without CUDA support (cargo feature `cuda`)".into(),
        }),
        other => Err(BertError::Device {
            message: format!("device {other} is not supported for embeddings"),
        }),
    }
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
        check_device(options.device)?;
        let sentence = SentenceConfig::load(dir)?;
        let tokenizer = EncoderTokenizer::from_file(&dir.join("tokenizer.json"))?;
        let backend = match options.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => Backend::Cuda(crate::cuda::CudaEncoder::open(
                dir,
                n as usize,
                owner,
                options.format,
            )?),
            _ => Backend::Cpu(Encoder::open(
                dir,
                Arc::clone(&ledger),
                owner,
                options.format,
            )?),
        };
        let cfg = match &backend {
            Backend::Cpu(e) => e.config(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(e) => e.config(),
        };
        let mut max_tokens = cfg.max_positions();
        if let Some(limit) = sentence.max_seq_length {
            max_tokens = max_tokens.min(limit.max(2));
        }
        let request = format!("{} embeddings at {max_tokens} tokens", dir.display());
        let (max_batch_tokens, batch_seqs, forward_tokens) = match &backend {
            Backend::Cpu(e) => (
                fit(
                    &ledger,
                    &request,
                    max_tokens,
                    PREFERRED_BATCH_TOKENS.max(max_tokens),
                    |t| e.scratch_bytes(t),
                ),
                MAX_BATCH_SEQS,
                FORWARD_TOKENS,
            ),
            #[cfg(feature = "cuda")]
            Backend::Cuda(e) => (
                fit(
                    e.ledger(),
                    &request,
                    max_tokens,
                    GPU_FORWARD_TOKENS.max(max_tokens),
                    |t| e.scratch_bytes(t, GPU_BATCH_SEQS),
                ),
                GPU_BATCH_SEQS,
                GPU_FORWARD_TOKENS,
            ),
        };
        let max_batch_tokens =
            max_batch_tokens.map_err(|e| BertError::ledger(request.clone(), e))?;
        Ok(BertEmbeddings {
            tokenizer,
            backend,
            sentence,
            max_tokens,
            max_batch_tokens,
            batch_seqs,
            forward_tokens,
        })
    }

    /// The CPU encoder (`None` when the model runs on a GPU).
    pub fn encoder(&self) -> Option<&Encoder> {
        match &self.backend {
            Backend::Cpu(e) => Some(e),
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => None,
        }
    }

    /// The encoder's hyper-parameters.
    pub fn config(&self) -> &EncoderConfig {
        match &self.backend {
            Backend::Cpu(e) => e.config(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(e) => e.config(),
        }
    }

    /// What the linear layers run as: the CPU's kinds ([`Encoder::weights_kind`]) or
    /// `"cuda-f32"`.
    pub fn weights_kind(&self) -> &'static str {
        match &self.backend {
            Backend::Cpu(e) => e.weights_kind(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => "cuda-f32",
        }
    }

    /// Whether the linear layers run in int8 (never on a GPU, which widens to f32).
    pub fn is_int8(&self) -> bool {
        self.encoder().is_some_and(Encoder::is_int8)
    }

    /// Where the forward pass runs.
    pub fn device(&self) -> Device {
        match &self.backend {
            Backend::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Backend::Cuda(e) => Device::Cuda(e.ordinal()),
        }
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
        let max_seqs = batch.unwrap_or(self.batch_seqs).max(1);
        let mut out: Vec<Option<Embedding>> = vec![None; inputs.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < order.len() && end - start < max_seqs {
                let len = inputs[order[end]].ids.len();
                if end > start && tokens + len > self.max_batch_tokens.min(self.forward_tokens) {
                    break;
                }
                tokens += len;
                end += 1;
            }
            let seqs: Vec<&[u32]> = order[start..end]
                .iter()
                .map(|&i| inputs[i].ids.as_slice())
                .collect();
            let vectors = self.forward_pooled(&seqs)?;
            for (vector, &i) in vectors.into_iter().zip(&order[start..end]) {
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

    /// One forward over `seqs`, pooled (and normalised) as the sentence config says.
    fn forward_pooled(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>, BertError> {
        let SentenceConfig {
            pooling, normalize, ..
        } = self.sentence;
        match &self.backend {
            Backend::Cpu(encoder) => {
                let hidden = encoder.forward(seqs)?;
                Ok((0..seqs.len())
                    .map(|slot| {
                        let mut v = pool(hidden.sequence(slot), hidden.hidden_size, pooling);
                        if normalize {
                            l2_normalize(&mut v);
                        }
                        v
                    })
                    .collect())
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(encoder) => encoder.forward_pooled(seqs, pooling, normalize),
        }
    }

    /// Embed texts with at most `batch` inputs per forward pass.
    pub fn embed_texts(
        &self,
        texts: &[&str],
        batch: Option<usize>,
    ) -> Result<Vec<Embedding>, PipelineError> {
        if texts.iter().any(|t| t.trim().is_empty()) {
            return Err(PipelineError::invalid(
                "input must be a string",
                Some("input"),
            ));
        }
        // Tokenization in parallel: on a GPU it is most of a request's host time
        // (~110 µs per MiniLM sentence against ~50 µs of device forward in batches).
        let encoded = texts
            .par_iter()
            .map(|t| self.tokenize(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_pipeline_error)?;
        self.embed_encoded(&encoded, batch)
            .map_err(to_pipeline_error)
    }
}

impl EmbeddingsPipeline for BertEmbeddings {
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>, PipelineError> {
        self.embed_texts(texts, None)
    }

    fn dimensions(&self) -> usize {
        self.config().hidden_size
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

/// Open the embeddings pipeline for a registry row (what the binary's factory calls) on
/// `device`. `spec.dir` holds the checkpoint; a `spec.defaults` of `{"weights": "int8"}`
/// quantizes at load.
pub fn open_embeddings(
    spec: &ModelSpec,
    ledger: Arc<Ledger>,
    owner: Owner,
    device: Device,
) -> Result<Box<dyn EmbeddingsPipeline>, PipelineError> {
    let format = match spec.defaults.get("weights").and_then(|v| v.as_str()) {
        Some("int8") => WeightFormat::Int8,
        _ => WeightFormat::AsStored,
    };
    let options = OpenOptions { format, device };
    let model = BertEmbeddings::open(&spec.dir, ledger, owner, options).map_err(|e| match e {
        BertError::Ledger { .. } => PipelineError::does_not_fit(format!("{} ({e})", spec.id)),
        other => PipelineError::internal(other),
    })?;
    Ok(Box::new(model))
}
