//! Opening a model (checkpoint + tokenizer + chat template + KV cache sized to fit).
//!
//! Key design choice: weights load first (they are what they are), then the
//! context length is the one knob: the largest context in `min..=max` whose KV
//! cache + activations fit in the ledger's `room()` is chosen with
//! `favlo_runtime::ledger::fit`; if even the minimum does not fit the open fails
//! with a `DoesNotFit` that names the request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_formats::tokenizer::{ChatTemplate, Tokenizer};
use favlo_pipeline::{ChatMessage, TokenVocab};
use favlo_runtime::buffer::Buffer;
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{self, Ledger, Owner, SpanKind};

use crate::checkpoint::Checkpoint;
use crate::config::LlamaConfig;
use crate::error::LlamaError;
use crate::model::{LlamaModel, f16_kv, kv_bytes_per_token, scratch_bytes};
use crate::weights::{self, WeightFormat};

/// Options for [`open`].
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Storage of the linear layers.
    pub format: WeightFormat,
    /// Upper bound on the context (`None`: the checkpoint's trained length).
    pub max_context: Option<usize>,
    /// Smallest context worth opening (prompt + max_tokens of the request that
    /// triggers the open, or 256).
    pub min_context: usize,
    /// Name used in `DoesNotFit` messages (e.g. the registry id).
    pub name: Option<String>,
    /// Where the forward pass runs. `Device::Cuda(n)` needs the `cuda` feature and
    /// runs MXFP8 (`format` native → MXFP8) or MXFP4 weights; the context is then
    /// sized from the GPU's ledger, not `ledger`.
    pub device: Device,
    /// CUDA only: the device KV cache in f16 (default) rather than f32.
    pub kv_f16: bool,
    /// CUDA only: most prompt tokens per batched prefill chunk (`None`: 2048 for the exact
    /// prefill, 1024 for FP8, or 1024 where the default would shorten the context; never
    /// more than the longest context asked for; see `prefill_chunk`). Each exact chunk
    /// expands every projection's MX weights to bf16 once, so larger chunks amortize that
    /// and run larger GEMMs, for device scratch linear in the size.
    pub prefill_chunk: Option<usize>,
    /// CUDA only: the arithmetic of the batched prefill's projections.
    pub prefill: PrefillMode,
    /// CUDA only: sequences decoded together (1..=4; default 1), each holding the whole
    /// context in its own KV cache (`LlamaModel::decode_batch`).
    pub sequences: usize,
}

/// How a CUDA prefill computes its projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefillMode {
    /// Exactly the decode path's products (the MX weights expanded to bf16, each
    /// activation in two bf16 planes, f32 accumulation): the same numbers as the CPU
    /// within 1e-4. The default.
    #[default]
    Exact,
    /// FP8 tensor-core GEMMs (Hopper, sm_90a): the activations rounded to E4M3 per
    /// token row and 32-value block, the weights kept a second time as E4M3 tiles
    /// (+1 byte per weight). About twice the exact path's prompt rate on long prompts,
    /// at the accuracy of FP8 activations (docs/CUDA.md gives the measured error).
    Fp8,
}

impl PrefillMode {
    /// `exact` or `fp8`.
    pub fn parse(s: &str) -> Option<PrefillMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "exact" => Some(PrefillMode::Exact),
            "fp8" => Some(PrefillMode::Fp8),
            _ => None,
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            format: WeightFormat::default(),
            max_context: None,
            min_context: 256,
            name: None,
            device: Device::Cpu,
            kv_f16: true,
            prefill_chunk: None,
            prefill: PrefillMode::Exact,
            sequences: 1,
        }
    }
}

/// An opened Llama-family model, ready to complete chats.
pub struct LlamaRuntime {
    pub(crate) model: LlamaModel,
    pub(crate) tokenizer: Option<Tokenizer>,
    pub(crate) template: Option<ChatTemplate>,
    /// Ids that end generation.
    pub(crate) stop_ids: Vec<u32>,
    /// Tokens whose keys/values are in the cache (prefix reuse across requests).
    pub(crate) cached: Vec<u32>,
    /// Last-token logits.
    pub(crate) logits: Buffer<f32>,
    /// Copy of the raw logits while the sampler edits `logits` (for logprobs).
    pub(crate) raw: Buffer<f32>,
    pub(crate) vocab: Option<Arc<TokenVocab>>,
    pub(crate) name: String,
}

/// Which files make the model: a `.gguf`, or HF `config.json` + safetensors.
fn locate(path: &Path) -> Result<(PathBuf, bool), LlamaError> {
    let missing = |what: &str| LlamaError::Read {
        path: path.display().to_string(),
        message: what.to_string(),
    };
    if path.is_file() {
        let gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        return Ok((path.to_path_buf(), gguf));
    }
    let entries = std::fs::read_dir(path).map_err(|e| missing(&e.to_string()))?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    if let Some(g) = files.iter().find(|f| {
        f.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    }) {
        return Ok((g.clone(), true));
    }
    if path.join("config.json").is_file() {
        let index = path.join("model.safetensors.index.json");
        let st = if index.is_file() {
            index
        } else {
            path.join("model.safetensors")
        };
        return Ok((st, false));
    }
    Err(missing(
        "no .gguf file and no config.json + model.safetensors",
    ))
}

/// Open the model at `path` (a `.gguf` file, or a directory holding one, or a
/// Hugging Face directory with `config.json`, safetensors and optionally
/// `tokenizer.json`). Every buffer is allocated from `ledger` under `owner`.
pub fn open(
    path: &Path,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    options: &OpenOptions,
) -> Result<LlamaRuntime, LlamaError> {
    let format = weight_format(options)?;
    let (file, is_gguf) = locate(path)?;
    let (ck, mut cfg, tokenizer) = if is_gguf {
        let ck = Checkpoint::open_gguf(&file)?;
        let Checkpoint::Gguf { file: g, .. } = &ck else {
            return Err(LlamaError::config("internal: expected a GGUF checkpoint"));
        };
        let cfg = LlamaConfig::from_gguf(g)?;
        let tok = Tokenizer::from_gguf(g)?;
        (ck, cfg, Some(tok))
    } else {
        let dir = file.parent().unwrap_or(Path::new("."));
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| LlamaError::Read {
            path: cfg_path.display().to_string(),
            message: e.to_string(),
        })?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| LlamaError::Read {
                path: cfg_path.display().to_string(),
                message: e.to_string(),
            })?;
        let cfg = LlamaConfig::from_hf_json(&json)?;
        let tok_path = dir.join("tokenizer.json");
        let tok = if tok_path.is_file() {
            Some(Tokenizer::from_file(&tok_path)?)
        } else {
            None
        };
        (Checkpoint::open_safetensors(&file)?, cfg, tok)
    };
    let name = options.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned())
    });
    let w = weights::load(&ck, &mut cfg, ledger, owner, format)?;
    drop(ck);

    let max_ctx = options
        .max_context
        .map_or(cfg.context_length, |m| m.min(cfg.context_length))
        .max(1);
    let min_ctx = options.min_context.clamp(1, max_ctx);
    let ctx = if options.device == Device::Cpu {
        let fixed = scratch_bytes(&cfg) + (2 * cfg.vocab_size * 4) as u64;
        let per_tok = kv_bytes_per_token(&cfg, f16_kv(w.ggml_numerics, &cfg));
        let request = format!("{name} with a {min_ctx}-token context");
        ledger::fit(ledger, &request, min_ctx, max_ctx, |c| {
            fixed + per_tok * c as u64
        })?
    } else {
        0
    };
    let logits = ledger.alloc::<f32>(owner, SpanKind::Scratch, cfg.vocab_size)?;
    let raw = ledger.alloc::<f32>(owner, SpanKind::Scratch, cfg.vocab_size)?;
    let mut stop_ids = cfg.eos_ids.clone();
    let mut template = None;
    if let Some(tok) = &tokenizer {
        stop_ids.extend(tok.eos_ids());
        for s in [
            "<|im_end|>",
            "<|endoftext|>",
            "<|eot_id|>",
            "<|end|>",
            "<end_of_turn>",
        ] {
            stop_ids.extend(tok.token_to_id(s));
        }
        if let Some(src) = tok.chat_template() {
            template = Some(ChatTemplate::new(
                src,
                tok.bos_token().unwrap_or(""),
                tok.eos_token().unwrap_or(""),
            )?);
        }
    }
    stop_ids.sort_unstable();
    stop_ids.dedup();
    let model = match options.device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let opts = crate::cuda::CudaOptions {
                ordinal: n as usize,
                kv_f16: options.kv_f16,
                prefill_chunk: options.prefill_chunk,
                prefill: options.prefill,
                sequences: options.sequences,
            };
            let dev = crate::cuda::CudaLlama::open(&cfg, &w, owner, opts, min_ctx, max_ctx, &name)?;
            LlamaModel::with_cuda(cfg, w, ledger, owner, dev)?
        }
        _ => LlamaModel::new(cfg, w, ledger, owner, ctx)?,
    };
    let vocab = tokenizer
        .as_ref()
        .map(|t| Arc::new(build_vocab(t, model.config().vocab_size, &stop_ids)));
    Ok(LlamaRuntime {
        model,
        tokenizer,
        template,
        stop_ids,
        cached: Vec::new(),
        logits,
        raw,
        vocab,
        name,
    })
}

/// Whether `device` can run this pipeline here: `Ok` for the CPU; for `Device::Cuda(n)`
/// the build must have the `cuda` feature and the driver, NVRTC and device `n` must
/// answer. The error says why not (for a usage error before anything loads).
pub fn check_device(device: Device) -> Result<(), LlamaError> {
    match device {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let count = favlo_runtime::cuda::CudaContext::probe().map_err(crate::cuda::dev_err)?;
            if n as usize >= count {
                return Err(LlamaError::Device {
                    message: format!(
                        "CUDA is unavailable: no device cuda:{n} (the driver reports {count})"
                    ),
                });
            }
            Ok(())
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(LlamaError::Device {
            message: "CUDA is unavailable: this favlo was built without CUDA support (cargo feature `cuda`)".into(),
        }),
        other => Err(LlamaError::Device {
            message: format!("device {other:?} is not supported"),
        }),
    }
}

/// The weight storage for `options.device`, after checking that the device can be used
/// at all (before anything loads): CUDA runs MXFP8 (the default) or MXFP4.
fn weight_format(options: &OpenOptions) -> Result<WeightFormat, LlamaError> {
    check_device(options.device)?;
    if options.device == Device::Cpu {
        if options.prefill == PrefillMode::Fp8 {
            return Err(LlamaError::Request {
                message: "the FP8 prefill runs on CUDA (Hopper) only; the CPU prefill is exact"
                    .into(),
            });
        }
        return Ok(options.format);
    }
    match options.format {
        WeightFormat::Native | WeightFormat::Mxfp8 => Ok(WeightFormat::Mxfp8),
        WeightFormat::Mxfp4 => Ok(WeightFormat::Mxfp4),
        other => Err(LlamaError::Request {
            message: format!("CUDA runs MXFP8 or MXFP4 weights, not {other:?}"),
        }),
    }
}

fn build_vocab(tok: &Tokenizer, n: usize, stop_ids: &[u32]) -> TokenVocab {
    let mut v = TokenVocab {
        tokens: Vec::with_capacity(n),
        eos: stop_ids.to_vec(),
        special: Vec::new(),
    };
    for id in 0..n as u32 {
        if tok.is_special(id) {
            v.tokens.push(Vec::new());
            if !stop_ids.contains(&id) {
                v.special.push(id);
            }
        } else {
            v.tokens.push(tok.token_bytes_ref(id).to_vec());
        }
    }
    v
}

impl LlamaRuntime {
    /// The model (forward pass, config).
    pub fn model(&mut self) -> &mut LlamaModel {
        // The caller may run arbitrary tokens: the cache no longer matches `cached`.
        self.cached.clear();
        &mut self.model
    }

    /// The model's config.
    pub fn config(&self) -> &LlamaConfig {
        self.model.config()
    }

    /// The tokenizer, when the checkpoint has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Ids that end a generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Display name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Render `messages` (+ `tools`) with the chat template and tokenize.
    pub fn prompt_ids(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
    ) -> Result<Vec<u32>, LlamaError> {
        let tok = self.tokenizer.as_ref().ok_or_else(|| LlamaError::Request {
            message: "this checkpoint has no tokenizer".into(),
        })?;
        let text = match &self.template {
            Some(t) => t.render(&ChatMessage::template_values(messages), tools, true)?,
            None => chatml(messages),
        };
        Ok(tok.encode(&text, false)?)
    }
}

/// ChatML rendering for checkpoints without a template.
fn chatml(messages: &[ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        s.push_str(&format!(
            "<|im_start|>{}\n{}<|im_end|>\n",
            m.role.as_str(),
            m.content
        ));
    }
    s.push_str("<|im_start|>assistant\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_prefill_is_refused_on_the_cpu_before_loading() {
        // Refused by the options check, before the (missing) path is read.
        let ledger = Ledger::new(Device::Cpu, None);
        let owner = Owner::mint("prefill-test");
        let opts = OpenOptions {
            prefill: PrefillMode::Fp8,
            ..OpenOptions::default()
        };
        let err = open(Path::new("/no/such/model"), &ledger, &owner, &opts)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("FP8 prefill runs on CUDA"), "{err}");
        assert_eq!(PrefillMode::parse(" FP8 "), Some(PrefillMode::Fp8));
        assert_eq!(PrefillMode::parse("exact"), Some(PrefillMode::Exact));
        assert_eq!(PrefillMode::parse("bf16"), None);
    }
}
