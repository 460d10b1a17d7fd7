//! Tokenizers described by GGUF `tokenizer.ggml.*` metadata.
//!
//! Key design choice: the GGUF facts are translated into the equivalent Hugging Face
//! `tokenizer.json` document (BPE model, pre-tokenizer chosen by `tokenizer.ggml.pre`,
//! control/user-defined tokens as added tokens, BOS via a template post-processor), so
//! encoding runs through the same `tokenizers` code as every other model.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{SpecialInfo, TokenizerError};

/// GGUF token types (`tokenizer.ggml.token_type`).
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;

/// The `tokenizer.ggml.*` facts, as a plain struct (also readable from JSON fixtures).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: pre-tokenizer name, e.g. "smollm", "qwen2", "llama-bpe".
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.merges`, each "left right".
    pub merges: Vec<String>,
    pub token_types: Vec<i32>,
    pub scores: Vec<f32>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id`: also end generation.
    pub eot_id: Option<u32>,
    pub eom_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece); `None` means the model default.
    pub add_space_prefix: Option<bool>,
    pub chat_template: Option<String>,
}

/// Qwen2 split regex (as in Qwen2/Qwen3 `tokenizer.json`; single digits).
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3 split regex (digit runs of up to three).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn split(regex: &str) -> Value {
    json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false})
}

/// (normalizer, pre_tokenizer, ignore_merges) for a byte-level BPE `pre` name.
fn gpt2_pre(pre: Option<&str>) -> Result<(Value, Value, bool), TokenizerError> {
    let seq = |parts: Vec<Value>| json!({"type": "Sequence", "pretokenizers": parts});
    Ok(match pre.unwrap_or("default") {
        "default" | "gpt-2" | "gpt2" => (Value::Null, byte_level(true), false),
        // llama.cpp runs `\p{N}` first, then the GPT-2 regex; HF: Digits + ByteLevel.
        "smollm" | "starcoder" => (
            Value::Null,
            seq(vec![
                json!({"type": "Digits", "individual_digits": true}),
                byte_level(true),
            ]),
            false,
        ),
        "qwen2" | "deepseek-r1-qwen" => (
            json!({"type": "NFC"}),
            seq(vec![split(QWEN2_REGEX), byte_level(false)]),
            false,
        ),
        "llama3" | "llama-bpe" => (
            Value::Null,
            seq(vec![split(LLAMA3_REGEX), byte_level(false)]),
            true,
        ),
        other => {
            return Err(TokenizerError::UnsupportedPre {
                pre: other.to_owned(),
            });
        }
    })
}

fn token_name(v: &GgufVocab, id: Option<u32>, key: &str) -> Result<Option<String>, TokenizerError> {
    let Some(id) = id else { return Ok(None) };
    match v.tokens.get(id as usize) {
        Some(t) => Ok(Some(t.clone())),
        None => Err(TokenizerError::Metadata {
            key: key.to_owned(),
            reason: format!("id {id} is outside the vocabulary of {}", v.tokens.len()),
        }),
    }
}

/// Added tokens: control, user-defined (and for SentencePiece, unknown) tokens.
fn added_tokens(v: &GgufVocab, with_unknown: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for (id, (tok, ty)) in v.tokens.iter().zip(&v.token_types).enumerate() {
        let special = *ty == TYPE_CONTROL || (with_unknown && *ty == TYPE_UNKNOWN);
        if special || *ty == TYPE_USER_DEFINED {
            out.push(json!({
                "id": id, "content": tok, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            }));
        }
    }
    out
}

/// `<bos> $A <eos>` as requested by add_bos/add_eos; `None` when neither applies.
fn post_processor(bos: Option<(&str, u32)>, eos: Option<(&str, u32)>) -> Value {
    if bos.is_none() && eos.is_none() {
        return Value::Null;
    }
    let mut specials = Map::new();
    let mut single = Vec::new();
    let mut pair = Vec::new();
    if let Some((t, id)) = bos {
        specials.insert(t.into(), json!({"id": t, "ids": [id], "tokens": [t]}));
        single.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
        pair.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    pair.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let Some((t, id)) = eos {
        specials.insert(t.into(), json!({"id": t, "ids": [id], "tokens": [t]}));
        single.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
        pair.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
    }
    if let Some((t, _)) = bos {
        pair.push(json!({"SpecialToken": {"id": t, "type_id": 1}}));
    }
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    if let Some((t, _)) = eos {
        pair.push(json!({"SpecialToken": {"id": t, "type_id": 1}}));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials})
}

fn vocab_map(v: &GgufVocab) -> Map<String, Value> {
    let mut m = Map::new();
    for (id, t) in v.tokens.iter().enumerate() {
        // First occurrence wins for duplicated strings, as in llama.cpp's text->id map.
        m.entry(t.clone()).or_insert_with(|| json!(id));
    }
    m
}

fn gpt2_merges(v: &GgufVocab) -> Result<Vec<Value>, TokenizerError> {
    v.merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((a, b)) => Ok(json!([a, b])),
            None => Err(TokenizerError::Metadata {
                key: "tokenizer.ggml.merges".into(),
                reason: format!("merge {i} ({m:?}) has no space"),
            }),
        })
        .collect()
}

/// SentencePiece BPE has no merge list: every split `a|b` of a vocabulary piece `a+b`
/// whose halves are both pieces is a merge, ranked by the score of `a+b` (higher first).
fn spm_merges(v: &GgufVocab, vocab: &Map<String, Value>) -> Vec<Value> {
    let mut found: Vec<(f32, usize, &str, &str)> = Vec::new();
    for (id, tok) in v.tokens.iter().enumerate() {
        if v.token_types.get(id).is_some_and(|t| *t != 1) {
            continue;
        }
        let score = v.scores.get(id).copied().unwrap_or(0.0);
        for (k, _) in tok.char_indices().skip(1) {
            let (a, b) = tok.split_at(k);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                found.push((score, id, a, b));
            }
        }
    }
    found.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    found
        .into_iter()
        .map(|(_, _, a, b)| json!([a, b]))
        .collect()
}

/// Builds the `tokenizer.json` document and the special-token facts.
pub(crate) fn build_tokenizer_json(v: &GgufVocab) -> Result<(Value, SpecialInfo), TokenizerError> {
    if !v.token_types.is_empty() && v.token_types.len() != v.tokens.len() {
        return Err(TokenizerError::Metadata {
            key: "tokenizer.ggml.token_type".into(),
            reason: format!(
                "{} entries for {} tokens",
                v.token_types.len(),
                v.tokens.len()
            ),
        });
    }
    let bos = token_name(v, v.bos_id, "tokenizer.ggml.bos_token_id")?;
    let eos = token_name(v, v.eos_id, "tokenizer.ggml.eos_token_id")?;
    let unk = token_name(v, v.unk_id, "tokenizer.ggml.unknown_token_id")?;
    let bos_pp = bos.as_deref().zip(v.bos_id).filter(|_| v.add_bos);
    let eos_pp = eos.as_deref().zip(v.eos_id).filter(|_| v.add_eos);
    let vocab = vocab_map(v);
    let doc = match v.model.as_str() {
        "gpt2" => {
            let (normalizer, pre_tokenizer, ignore_merges) = gpt2_pre(v.pre.as_deref())?;
            json!({
                "version": "1.0", "truncation": null, "padding": null,
                "added_tokens": added_tokens(v, false),
                "normalizer": normalizer,
                "pre_tokenizer": pre_tokenizer,
                "post_processor": post_processor(bos_pp, eos_pp),
                "decoder": byte_level(true),
                "model": {
                    "type": "BPE", "dropout": null, "unk_token": null,
                    "continuing_subword_prefix": null, "end_of_word_suffix": null,
                    "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges,
                    "vocab": vocab, "merges": gpt2_merges(v)?,
                },
            })
        }
        "llama" => {
            let prefix = v.add_space_prefix.unwrap_or(true);
            let mut decoders = vec![
                json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
                json!({"type": "ByteFallback"}),
                json!({"type": "Fuse"}),
            ];
            if prefix {
                decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
            }
            let merges = spm_merges(v, &vocab);
            json!({
                "version": "1.0", "truncation": null, "padding": null,
                "added_tokens": added_tokens(v, true),
                "normalizer": null,
                "pre_tokenizer": {"type": "Metaspace", "replacement": "\u{2581}",
                                  "prepend_scheme": "never", "split": false},
                "post_processor": post_processor(bos_pp, eos_pp),
                "decoder": {"type": "Sequence", "decoders": decoders},
                "model": {
                    "type": "BPE", "dropout": null, "unk_token": unk,
                    "continuing_subword_prefix": null, "end_of_word_suffix": null,
                    "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                    "vocab": vocab, "merges": merges,
                },
            })
        }
        other => {
            return Err(TokenizerError::UnsupportedModel {
                model: other.to_owned(),
            });
        }
    };
    let info = SpecialInfo {
        bos_token: bos,
        eos_token: eos,
        extra_eos_ids: v.eot_id.into_iter().chain(v.eom_id).collect(),
        chat_template: v.chat_template.clone(),
        // SentencePiece adds its dummy space in front of the whole text (special tokens
        // included); Metaspace's "first" scheme would skip it before a leading space.
        prepend_space: v.model == "llama" && v.add_space_prefix.unwrap_or(true),
    };
    Ok((doc, info))
}

/// Reads the `tokenizer.ggml.*` / `tokenizer.chat_template` keys of a GGUF file.
pub(crate) fn vocab_from_gguf(file: &crate::gguf::GgufFile) -> Result<GgufVocab, TokenizerError> {
    let missing = |key: &str| TokenizerError::Metadata {
        key: key.to_owned(),
        reason: "missing or of the wrong type".to_owned(),
    };
    let strings = |key: &str| -> Option<Vec<String>> {
        file.get_string_array(key)
            .map(|v| v.into_iter().map(str::to_owned).collect())
    };
    let model = file
        .get_str("tokenizer.ggml.model")
        .ok_or_else(|| missing("tokenizer.ggml.model"))?
        .to_owned();
    let tokens =
        strings("tokenizer.ggml.tokens").ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
    let merges = match file.get("tokenizer.ggml.merges") {
        None => Vec::new(),
        Some(_) => {
            strings("tokenizer.ggml.merges").ok_or_else(|| missing("tokenizer.ggml.merges"))?
        }
    };
    let token_types = match file.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(_) => file
            .get_i32_array("tokenizer.ggml.token_type")
            .ok_or_else(|| missing("tokenizer.ggml.token_type"))?,
    };
    let scores = match file.get("tokenizer.ggml.scores") {
        None => Vec::new(),
        Some(_) => file
            .get_f32_array("tokenizer.ggml.scores")
            .ok_or_else(|| missing("tokenizer.ggml.scores"))?,
    };
    let id = |key: &str| file.get_u32(key);
    // llama.cpp defaults: SentencePiece adds BOS, byte-level BPE does not.
    let default_add_bos = model == "llama";
    Ok(GgufVocab {
        pre: file.get_str("tokenizer.ggml.pre").map(str::to_owned),
        tokens,
        merges,
        token_types,
        scores,
        bos_id: id("tokenizer.ggml.bos_token_id"),
        eos_id: id("tokenizer.ggml.eos_token_id"),
        eot_id: id("tokenizer.ggml.eot_token_id"),
        eom_id: id("tokenizer.ggml.eom_token_id"),
        pad_id: id("tokenizer.ggml.padding_token_id"),
        unk_id: id("tokenizer.ggml.unknown_token_id"),
        add_bos: file
            .get_bool("tokenizer.ggml.add_bos_token")
            .unwrap_or(default_add_bos),
        add_eos: file
            .get_bool("tokenizer.ggml.add_eos_token")
            .unwrap_or(false),
        add_space_prefix: file.get_bool("tokenizer.ggml.add_space_prefix"),
        chat_template: file.get_str("tokenizer.chat_template").map(str::to_owned),
        model,
    })
}
