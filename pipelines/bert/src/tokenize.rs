//! Tokenization for encoders: `tokenizer.json` with its configured padding and truncation
//! switched off, and truncation done here.
//!
//! Key choice: a local wrapper over the `tokenizers` crate rather than
//! `favlo_formats::tokenizer::Tokenizer`, because that wrapper applies whatever padding and
//! truncation the file configures (all-MiniLM-L6-v2 pads and truncates every input to 128), and
//! an embeddings batch must be padded per batch and truncated at the model's own limit, with the
//! cut reported. Truncation keeps the leading special token and the closing one, as Hugging Face
//! does for a single sequence (`[CLS] a b … [SEP]`, `<s> a b … </s>`).

use std::path::Path;

use crate::error::BertError;

/// One tokenized input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids, special tokens included, at most the limit long.
    pub ids: Vec<u32>,
    /// Whether tokens were dropped to fit the limit.
    pub truncated: bool,
}

/// An encoder tokenizer.
pub struct EncoderTokenizer {
    inner: tokenizers::Tokenizer,
}

impl EncoderTokenizer {
    /// Load `tokenizer.json`, disabling its padding and truncation.
    pub fn from_file(path: &Path) -> Result<Self, BertError> {
        let mut inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| BertError::Tokenizer {
                reason: format!("{}: {e}", path.display()),
            })?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| BertError::Tokenizer {
                reason: e.to_string(),
            })?;
        Ok(EncoderTokenizer { inner })
    }

    /// Encode `text` with special tokens, truncated to `limit` tokens (≥ 2).
    pub fn encode(&self, text: &str, limit: usize) -> Result<Encoded, BertError> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| BertError::Tokenizer {
                reason: e.to_string(),
            })?;
        Ok(truncate(
            enc.get_ids(),
            enc.get_special_tokens_mask(),
            limit,
        ))
    }

    /// The underlying tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// Cut `ids` to `limit`, keeping any trailing special tokens (the closing `[SEP]`/`</s>`).
pub fn truncate(ids: &[u32], special: &[u32], limit: usize) -> Encoded {
    if ids.len() <= limit {
        return Encoded {
            ids: ids.to_vec(),
            truncated: false,
        };
    }
    let tail = special
        .iter()
        .rev()
        .take_while(|&&s| s == 1)
        .count()
        .min(limit / 2);
    let head = limit - tail;
    let mut out = Vec::with_capacity(limit);
    out.extend_from_slice(&ids[..head]);
    out.extend_from_slice(&ids[ids.len() - tail..]);
    Encoded {
        ids: out,
        truncated: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_closing_special_token() {
        let ids = [101, 5, 6, 7, 8, 9, 102];
        let special = [1, 0, 0, 0, 0, 0, 1];
        let e = truncate(&ids, &special, 4);
        assert_eq!(e.ids, vec![101, 5, 6, 102]);
        assert!(e.truncated);
        let e = truncate(&ids, &special, 7);
        assert_eq!(e.ids, ids.to_vec());
        assert!(!e.truncated);
    }
}
