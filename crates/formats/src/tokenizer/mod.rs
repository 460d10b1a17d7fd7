//! Tokenizers and chat templates.
//!
//! Key design choice: every tokenizer, whether it comes from a `tokenizer.json` or from
//! GGUF `tokenizer.ggml.*` metadata, ends up as one `tokenizers::Tokenizer` (the GGUF
//! path builds the equivalent `tokenizer.json` document and loads it), so there is one
//! encode/decode implementation. On top of it we keep a per-id table of the raw bytes of
//! every token so that a streaming decoder can cut text at correct UTF-8 boundaries.

mod bytes;
mod config;
mod error;
mod gguf_vocab;
mod stream;
mod template;

use std::collections::HashSet;
use std::path::Path;

pub use bytes::ByteMode;
pub use error::TokenizerError;
pub use gguf_vocab::GgufVocab;
pub use stream::StreamDecoder;
pub use template::{ChatTemplate, format_utc};

/// A loaded tokenizer plus the special-token facts the pipelines need.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    mode: ByteMode,
    /// Raw bytes of each token id (index = id); empty for ids with no token.
    bytes: Vec<Vec<u8>>,
    special: HashSet<u32>,
    bos: Option<u32>,
    eos: Vec<u32>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    chat_template: Option<String>,
    prepend_space: bool,
}

/// Facts that do not live in `tokenizer.json` itself (they come from
/// `tokenizer_config.json`, `generation_config.json` or GGUF metadata).
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecialInfo {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub extra_eos_ids: Vec<u32>,
    pub chat_template: Option<String>,
    /// Encode `" " + text` (SentencePiece dummy prefix).
    pub prepend_space: bool,
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`. When `tokenizer_config.json` and/or
    /// `generation_config.json` sit next to it, BOS/EOS tokens and the chat template are
    /// read from them too.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let info = config::read_sibling_configs(path)?;
        Self::from_json_str(&text, info).map_err(|e| match e {
            TokenizerError::Build { message } => TokenizerError::Load {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Builds a tokenizer from GGUF-style vocabulary data (see [`GgufVocab`]).
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Self, TokenizerError> {
        let (json, info) = gguf_vocab::build_tokenizer_json(v)?;
        Self::from_json_str(&json.to_string(), info)
    }

    /// Reads the `tokenizer.ggml.*` keys of a GGUF file and builds the tokenizer.
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Self, TokenizerError> {
        let v = gguf_vocab::vocab_from_gguf(file)?;
        Self::from_gguf_vocab(&v)
    }

    fn from_json_str(text: &str, info: SpecialInfo) -> Result<Self, TokenizerError> {
        let doc: serde_json::Value =
            serde_json::from_str(text).map_err(|e| TokenizerError::Build {
                message: e.to_string(),
            })?;
        let inner: tokenizers::Tokenizer =
            text.parse()
                .map_err(|e: tokenizers::Error| TokenizerError::Build {
                    message: e.to_string(),
                })?;
        let mode = ByteMode::detect(&doc);
        let added = inner.get_added_tokens_decoder();
        let special: HashSet<u32> = added
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| *id)
            .collect();
        let n = inner.get_vocab_size(true);
        let max_id = added.keys().copied().max().map_or(0, |m| m as usize + 1);
        let mut table = vec![Vec::new(); n.max(max_id)];
        for (id, slot) in table.iter_mut().enumerate() {
            let Ok(id32) = u32::try_from(id) else { break };
            if let Some(t) = added.get(&id32) {
                *slot = t.content.as_bytes().to_vec();
            } else if let Some(tok) = inner.id_to_token(id32) {
                *slot = mode.token_bytes(&tok);
            }
        }
        let lookup = |s: &Option<String>| s.as_deref().and_then(|t| inner.token_to_id(t));
        let bos = lookup(&info.bos_token);
        let mut eos: Vec<u32> = lookup(&info.eos_token).into_iter().collect();
        for id in &info.extra_eos_ids {
            if !eos.contains(id) {
                eos.push(*id);
            }
        }
        Ok(Tokenizer {
            inner,
            mode,
            bytes: table,
            special,
            bos,
            eos,
            bos_token: info.bos_token,
            eos_token: info.eos_token,
            chat_template: info.chat_template,
            prepend_space: info.prepend_space,
        })
    }

    /// Token ids of `text`. `add_special` applies the post-processor (e.g. BOS).
    /// Special-token text such as `<|im_start|>` is always matched as one token.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let prefixed;
        let text = if self.prepend_space && !text.is_empty() {
            prefixed = format!(" {text}");
            prefixed.as_str()
        } else {
            text
        };
        let enc = self
            .inner
            .encode(text, add_special)
            .map_err(|e| TokenizerError::Encode {
                message: e.to_string(),
            })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`; `skip_special` drops special tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode {
                message: e.to_string(),
            })
    }

    /// The raw bytes one token stands for (byte-level BPE characters mapped back to
    /// bytes, `<0xNN>` byte tokens as that byte, `▁` as a space). `None` for an
    /// unknown id.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let slot = self.bytes.get(id as usize)?;
        if slot.is_empty() && self.inner.id_to_token(id).is_none() {
            return None;
        }
        Some(slot.clone())
    }

    /// Borrowing variant of [`Tokenizer::token_bytes`] (empty for unknown ids).
    pub fn token_bytes_ref(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// Every id that ends generation (the EOS token and, from generation_config.json or
    /// GGUF `eot`/`eom` ids, the others).
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos.clone()
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// The chat template shipped with the tokenizer (tokenizer_config.json or GGUF
    /// `tokenizer.chat_template`), if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    pub fn token_to_id(&self, s: &str) -> Option<u32> {
        self.inner.token_to_id(s)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// True for added tokens marked special (control tokens).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.contains(&id)
    }

    /// How token strings map to bytes for this tokenizer.
    pub fn byte_mode(&self) -> ByteMode {
        self.mode
    }

    /// The wrapped `tokenizers` object, for anything not exposed here.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}
