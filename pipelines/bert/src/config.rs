//! Model configuration: the HF `config.json` of a BERT or (XLM-)RoBERTa encoder plus the
//! sentence-transformers files (`modules.json`, `1_Pooling/config.json`,
//! `sentence_bert_config.json`) that choose pooling, normalisation and the sequence limit.
//! Key choice: the only architectural difference between the families (RoBERTa positions start
//! at `padding_idx + 1`) is reduced to one number, `position_offset`, so the forward pass has
//! no family branches.

use std::path::Path;

use serde_json::Value;

use crate::error::BertError;

/// Which checkpoint family the config names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `model_type: "bert"` (all-MiniLM-L6-v2 and friends): positions start at 0.
    Bert,
    /// `model_type: "roberta"` / `"xlm-roberta"` (bge-m3): positions start at `pad_token_id + 1`.
    Roberta,
}

/// The feed-forward activation (`hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Exact erf GELU (`"gelu"`).
    Gelu,
    /// Tanh-approximated GELU (`"gelu_new"`, `"gelu_pytorch_tanh"`, `"gelu_fast"`).
    GeluTanh,
    /// `"relu"`.
    Relu,
}

/// The encoder hyper-parameters read from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
    pub pad_token_id: u32,
    pub activation: Activation,
    /// Position id of the first token: 0 for BERT, `pad_token_id + 1` for RoBERTa.
    pub position_offset: usize,
}

impl EncoderConfig {
    /// Parse the text of a HF `config.json`.
    pub fn from_json(value: &Value) -> Result<Self, BertError> {
        let model_type = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("bert")
            .to_string();
        let family = match model_type.as_str() {
            "bert" => Family::Bert,
            "roberta" | "xlm-roberta" | "xlm_roberta" => Family::Roberta,
            _ => return Err(BertError::UnsupportedModel { model_type }),
        };
        if let Some(kind) = value.get("position_embedding_type").and_then(Value::as_str)
            && kind != "absolute"
        {
            return Err(BertError::Config {
                field: "position_embedding_type",
                reason: format!("{kind:?} is not supported (only \"absolute\")"),
            });
        }
        let activation = match value
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu")
        {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(BertError::Config {
                    field: "hidden_act",
                    reason: format!("{other:?} is not supported"),
                });
            }
        };
        let pad_token_id = opt_usize(value, "pad_token_id")?.unwrap_or(match family {
            Family::Bert => 0,
            Family::Roberta => 1,
        });
        let pad_token_id = u32::try_from(pad_token_id).map_err(|_| BertError::Config {
            field: "pad_token_id",
            reason: "out of range".into(),
        })?;
        let position_offset = match family {
            Family::Bert => 0,
            Family::Roberta => pad_token_id as usize + 1,
        };
        let cfg = EncoderConfig {
            family,
            vocab_size: req_usize(value, "vocab_size")?,
            hidden_size: req_usize(value, "hidden_size")?,
            num_layers: req_usize(value, "num_hidden_layers")?,
            num_heads: req_usize(value, "num_attention_heads")?,
            intermediate_size: req_usize(value, "intermediate_size")?,
            max_position_embeddings: req_usize(value, "max_position_embeddings")?,
            type_vocab_size: opt_usize(value, "type_vocab_size")?.unwrap_or(2),
            layer_norm_eps: value
                .get("layer_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-12) as f32,
            pad_token_id,
            activation,
            position_offset,
        };
        if cfg.num_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_heads) {
            return Err(BertError::Config {
                field: "num_attention_heads",
                reason: format!(
                    "{} does not divide hidden_size {}",
                    cfg.num_heads, cfg.hidden_size
                ),
            });
        }
        if cfg.max_position_embeddings <= cfg.position_offset {
            return Err(BertError::Config {
                field: "max_position_embeddings",
                reason: format!(
                    "{} leaves no positions after the offset {}",
                    cfg.max_position_embeddings, cfg.position_offset
                ),
            });
        }
        Ok(cfg)
    }

    /// Load `dir/config.json`.
    pub fn load(dir: &Path) -> Result<Self, BertError> {
        Self::from_json(&read_json(&dir.join("config.json"))?)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// How many tokens (special tokens included) the position table can address.
    pub fn max_positions(&self) -> usize {
        self.max_position_embeddings - self.position_offset
    }
}

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over the real (attention-mask) tokens, special tokens included.
    Mean,
    /// The first token (`[CLS]` / `<s>`).
    Cls,
    /// The last real token.
    LastToken,
    /// Element-wise max over the real tokens.
    Max,
}

/// What the sentence-transformers files ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentenceConfig {
    pub pooling: Pooling,
    /// True when `modules.json` lists a `Normalize` module.
    pub normalize: bool,
    /// `sentence_bert_config.json` `max_seq_length`, if present.
    pub max_seq_length: Option<usize>,
}

impl SentenceConfig {
    /// Read the sentence-transformers files under `dir`. A plain HF checkpoint without them
    /// gets mean pooling and no normalisation.
    pub fn load(dir: &Path) -> Result<Self, BertError> {
        let mut pooling = Pooling::Mean;
        let mut normalize = false;
        let modules_path = dir.join("modules.json");
        if modules_path.is_file() {
            let modules = read_json(&modules_path)?;
            for module in modules.as_array().map(Vec::as_slice).unwrap_or_default() {
                let kind = module.get("type").and_then(Value::as_str).unwrap_or("");
                let sub = module.get("path").and_then(Value::as_str).unwrap_or("");
                if kind.ends_with(".Normalize") {
                    normalize = true;
                } else if kind.ends_with(".Pooling") {
                    let path = dir.join(sub).join("config.json");
                    if path.is_file() {
                        pooling = pooling_from_json(&read_json(&path)?)?;
                    }
                }
            }
        } else {
            let path = dir.join("1_Pooling").join("config.json");
            if path.is_file() {
                pooling = pooling_from_json(&read_json(&path)?)?;
            }
        }
        let sbert = dir.join("sentence_bert_config.json");
        let max_seq_length = if sbert.is_file() {
            opt_usize(&read_json(&sbert)?, "max_seq_length")?
        } else {
            None
        };
        Ok(SentenceConfig {
            pooling,
            normalize,
            max_seq_length,
        })
    }
}

/// Map a sentence-transformers `Pooling` config to one mode.
pub fn pooling_from_json(value: &Value) -> Result<Pooling, BertError> {
    let on = |key: &str| value.get(key).and_then(Value::as_bool).unwrap_or(false);
    if let Some(mode) = value.get("pooling_mode").and_then(Value::as_str) {
        return match mode {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "lasttoken" => Ok(Pooling::LastToken),
            "max" => Ok(Pooling::Max),
            other => Err(BertError::Config {
                field: "pooling_mode",
                reason: format!("{other:?} is not supported"),
            }),
        };
    }
    let modes = [
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_max_tokens", Pooling::Max),
        ("pooling_mode_lasttoken", Pooling::LastToken),
    ];
    let chosen: Vec<Pooling> = modes
        .iter()
        .filter(|(k, _)| on(k))
        .map(|(_, p)| *p)
        .collect();
    for unsupported in [
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
    ] {
        if on(unsupported) {
            return Err(BertError::Config {
                field: "pooling_mode",
                reason: format!("{unsupported} is not supported"),
            });
        }
    }
    match chosen.as_slice() {
        [] => Ok(Pooling::Mean),
        [one] => Ok(*one),
        _ => Err(BertError::Config {
            field: "pooling_mode",
            reason: "several pooling modes at once (concatenation) are not supported".into(),
        }),
    }
}

/// Read and parse one JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Value, BertError> {
    let text = std::fs::read_to_string(path).map_err(|e| BertError::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| BertError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn opt_usize(value: &Value, field: &'static str) -> Result<Option<usize>, BertError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| BertError::Config {
                field,
                reason: format!("expected a non-negative integer, got {v}"),
            }),
    }
}

fn req_usize(value: &Value, field: &'static str) -> Result<usize, BertError> {
    opt_usize(value, field)?.ok_or_else(|| BertError::Config {
        field,
        reason: "missing".into(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn roberta_positions_start_after_padding_idx() {
        let v = serde_json::json!({"model_type": "xlm-roberta", "vocab_size": 10, "hidden_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
            "max_position_embeddings": 8194, "pad_token_id": 1, "type_vocab_size": 1});
        let c = EncoderConfig::from_json(&v).unwrap();
        assert_eq!(c.position_offset, 2);
        assert_eq!(c.max_positions(), 8192);
    }

    #[test]
    fn pooling_flags_map_to_one_mode() {
        let v =
            serde_json::json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false});
        assert_eq!(pooling_from_json(&v).unwrap(), Pooling::Cls);
        let v =
            serde_json::json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true});
        assert!(pooling_from_json(&v).is_err());
        let v = serde_json::json!({"pooling_mode_lasttoken": true});
        assert_eq!(pooling_from_json(&v).unwrap(), Pooling::LastToken);
    }
}
