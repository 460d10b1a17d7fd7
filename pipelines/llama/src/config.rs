//! Model hyper-parameters from a Hugging Face `config.json` or from GGUF metadata.
//!
//! Key design choice: one [`LlamaConfig`] for every dense family member; the
//! family differences that the forward pass cares about (biases, q/k norm, tied
//! head) are decided later from which tensors exist, so the config only holds
//! numbers. The RoPE pair layout is not a model property but a checkpoint one:
//! llama.cpp permutes Llama's q/k rows for the interleaved ("normal") rope, so
//! GGUF Llama uses [`RopeLayout::Interleaved`] and everything else NeoX.

use favlo_formats::gguf::{GgufFile, GgufValue};
use favlo_runtime::cpu::RopeLayout;
use serde_json::Value;

use crate::error::LlamaError;

/// Which member of the family (changes defaults only; tensors decide the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama / Llama 2 / Llama 3 / SmolLM / Mistral-dense.
    Llama,
    /// Qwen2 / Qwen2.5 (q/k/v biases).
    Qwen2,
    /// Qwen3 dense (per-head q/k RMSNorm).
    Qwen3,
}

impl Arch {
    fn parse(s: &str) -> Option<Arch> {
        match s {
            "llama" | "mistral" | "smollm" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            _ => None,
        }
    }

    /// GGUF metadata key prefix / HF `model_type`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }
}

/// How rotary frequencies are rescaled for long contexts.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Position interpolation: every frequency divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.1 piecewise scaling of the wavelengths.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: f32,
    },
    /// Per-frequency divisors read from the checkpoint (GGUF `rope_freqs.weight`).
    FreqFactors(Vec<f32>),
}

/// Hyper-parameters of one dense decoder.
#[derive(Clone, Debug)]
pub struct LlamaConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dimensions per head (normally `head_dim`).
    pub rope_dim: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    pub rope_layout: RopeLayout,
    /// Trained context length (the KV cache's upper bound).
    pub context_length: usize,
    /// `tie_word_embeddings` when the config says so; a missing head tensor ties too.
    pub tie_embeddings: bool,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
}

impl LlamaConfig {
    /// Width of the q projection.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of each of the k and v projections.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    fn check(self) -> Result<Self, LlamaError> {
        let bad = |what: &str| Err(LlamaError::config(what));
        if self.hidden == 0 || self.n_layers == 0 || self.vocab_size == 0 || self.intermediate == 0
        {
            return bad("zero hidden size, layer count, vocabulary or intermediate size");
        }
        if self.n_heads == 0
            || self.n_kv_heads == 0
            || !self.n_heads.is_multiple_of(self.n_kv_heads)
        {
            return bad("head_count must be a non-zero multiple of head_count_kv");
        }
        if self.head_dim == 0
            || !self.head_dim.is_multiple_of(2)
            || self.rope_dim > self.head_dim
            || !self.rope_dim.is_multiple_of(2)
        {
            return bad("head_dim and rope dimension must be even with rope_dim <= head_dim");
        }
        Ok(self)
    }

    /// From a Hugging Face `config.json` (transformers 4 `rope_theta`/`rope_scaling`
    /// or transformers 5 `rope_parameters`). Safetensors checkpoints use NeoX rope.
    pub fn from_hf_json(v: &Value) -> Result<Self, LlamaError> {
        let model_type = v["model_type"].as_str().unwrap_or("llama");
        let arch = Arch::parse(model_type)
            .ok_or_else(|| LlamaError::config(format!("unsupported model_type {model_type:?}")))?;
        let num = |k: &str| v[k].as_u64().map(|x| x as usize);
        let need =
            |k: &str| num(k).ok_or_else(|| LlamaError::config(format!("config.json lacks {k}")));
        let hidden = need("hidden_size")?;
        let n_heads = need("num_attention_heads")?;
        let head_dim = num("head_dim").unwrap_or(hidden / n_heads.max(1));
        let rope = if v["rope_parameters"].is_object() {
            &v["rope_parameters"]
        } else {
            &v["rope_scaling"]
        };
        let rope_theta = v["rope_theta"]
            .as_f64()
            .or_else(|| rope["rope_theta"].as_f64())
            .unwrap_or(10000.0) as f32;
        let rope_scaling = hf_rope_scaling(rope);
        let partial = v["partial_rotary_factor"].as_f64().unwrap_or(1.0);
        let rope_dim = ((head_dim as f64 * partial) as usize) & !1;
        let eos_ids = match &v["eos_token_id"] {
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect(),
            x => x.as_u64().map(|x| x as u32).into_iter().collect(),
        };
        LlamaConfig {
            arch,
            vocab_size: need("vocab_size")?,
            hidden,
            intermediate: need("intermediate_size")?,
            n_layers: need("num_hidden_layers")?,
            n_heads,
            n_kv_heads: num("num_key_value_heads").unwrap_or(n_heads),
            head_dim,
            rope_dim,
            rms_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6) as f32,
            rope_theta,
            rope_scaling,
            rope_layout: RopeLayout::NeoX,
            context_length: num("max_position_embeddings").unwrap_or(4096),
            tie_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
            bos_id: v["bos_token_id"].as_u64().map(|x| x as u32),
            eos_ids,
        }
        .check()
    }

    /// From GGUF metadata (`general.architecture` then `<arch>.*` keys).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, LlamaError> {
        let arch_name = file
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| LlamaError::config("GGUF lacks general.architecture"))?;
        let arch = Arch::parse(arch_name).ok_or_else(|| {
            LlamaError::config(format!("unsupported GGUF architecture {arch_name:?}"))
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let u = |k: &str| {
            file.get(&key(k))
                .and_then(GgufValue::as_u64)
                .map(|x| x as usize)
        };
        let f = |k: &str| file.get(&key(k)).and_then(GgufValue::as_f32);
        let need =
            |k: &str| u(k).ok_or_else(|| LlamaError::config(format!("GGUF lacks {}", key(k))));
        let hidden = need("embedding_length")?;
        let n_heads = need("attention.head_count")?;
        let head_dim = u("attention.key_length").unwrap_or(hidden / n_heads.max(1));
        let vocab_size = match u("vocab_size") {
            Some(n) => n,
            None => file
                .get("tokenizer.ggml.tokens")
                .and_then(GgufValue::as_array)
                .map(<[GgufValue]>::len)
                .ok_or_else(|| LlamaError::config("GGUF lacks a vocabulary size"))?,
        };
        let scale_type = file
            .get(&key("rope.scaling.type"))
            .and_then(GgufValue::as_str)
            .unwrap_or("none");
        let factor = f("rope.scaling.factor").unwrap_or(1.0);
        let rope_scaling = match scale_type {
            "linear" if factor != 1.0 => RopeScaling::Linear { factor },
            _ => RopeScaling::None,
        };
        let tok_u32 = |k: &str| file.get(k).and_then(GgufValue::as_u32);
        LlamaConfig {
            arch,
            vocab_size,
            hidden,
            intermediate: need("feed_forward_length")?,
            n_layers: need("block_count")?,
            n_heads,
            n_kv_heads: u("attention.head_count_kv").unwrap_or(n_heads),
            head_dim,
            rope_dim: u("rope.dimension_count").unwrap_or(head_dim),
            rms_eps: f("attention.layer_norm_rms_epsilon").unwrap_or(1e-6),
            rope_theta: f("rope.freq_base").unwrap_or(10000.0),
            rope_scaling,
            rope_layout: if arch == Arch::Llama {
                RopeLayout::Interleaved
            } else {
                RopeLayout::NeoX
            },
            context_length: u("context_length").unwrap_or(4096),
            tie_embeddings: false,
            bos_id: tok_u32("tokenizer.ggml.bos_token_id"),
            eos_ids: tok_u32("tokenizer.ggml.eos_token_id").into_iter().collect(),
        }
        .check()
    }
}

fn hf_rope_scaling(r: &Value) -> RopeScaling {
    let kind = r["rope_type"]
        .as_str()
        .or_else(|| r["type"].as_str())
        .unwrap_or("default");
    let g = |k: &str, d: f64| r[k].as_f64().unwrap_or(d) as f32;
    match kind {
        "linear" => RopeScaling::Linear {
            factor: g("factor", 1.0),
        },
        "llama3" => RopeScaling::Llama3 {
            factor: g("factor", 8.0),
            low_freq_factor: g("low_freq_factor", 1.0),
            high_freq_factor: g("high_freq_factor", 4.0),
            original_max_position: g("original_max_position_embeddings", 8192.0),
        },
        _ => RopeScaling::None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hf_v5_rope_parameters() {
        let v: Value = serde_json::json!({
            "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 24, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128,
            "rope_parameters": {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                                "original_max_position_embeddings": 32},
            "eos_token_id": [2, 7]
        });
        let c = LlamaConfig::from_hf_json(&v).unwrap();
        assert_eq!(c.arch, Arch::Qwen3);
        assert_eq!((c.head_dim, c.q_dim(), c.kv_dim()), (24, 96, 48));
        assert_eq!(c.rope_theta, 50000.0);
        assert_eq!(c.eos_ids, vec![2, 7]);
        assert!(
            matches!(c.rope_scaling, RopeScaling::Llama3 { original_max_position, .. } if original_max_position == 32.0)
        );
        let bad = serde_json::json!({"model_type": "gpt2"});
        assert!(LlamaConfig::from_hf_json(&bad).is_err());
    }
}
