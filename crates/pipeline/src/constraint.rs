//! Constrained decoding hook: the server builds a token mask, the pipeline applies it.
//!
//! Key design choice: the pipeline knows its tokenizer, the server knows the
//! request. A pipeline exposes its vocabulary as raw token bytes
//! ([`TokenVocab`], via [`crate::LanguagePipeline::vocab`]); the server compiles
//! `response_format` over that vocabulary into a [`LogitMask`] (its own JSON
//! engine, or any other) and puts it in the request as a [`Grammar`]. Each
//! decode step the pipeline calls [`LogitMask::mask_logits`] before sampling and
//! [`LogitMask::commit`] after, and stops when [`LogitMask::is_complete`].

use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::error::PipelineError;

/// A tokenizer's vocabulary as bytes, for building constraints.
#[derive(Clone, Debug, Default)]
pub struct TokenVocab {
    /// `tokens[id]` = the raw bytes the token decodes to (byte-level BPE
    /// unmapped, SentencePiece `▁` as a space, `<0xNN>` byte tokens as that
    /// byte). Empty for tokens that produce no text.
    pub tokens: Vec<Vec<u8>>,
    /// End-of-generation ids (EOS, `<|im_end|>`, `<|endoftext|>`, ...).
    pub eos: Vec<u32>,
    /// Control tokens that must never be produced inside constrained output
    /// (BOS, `<|im_start|>`, `<tool_call>` ...); eos ids need not be listed.
    pub special: Vec<u32>,
}

impl TokenVocab {
    /// Number of token ids.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// A per-step token mask over one vocabulary. One instance serves one generation.
pub trait LogitMask: Send {
    /// Set `allowed[id]` for every id in `0..allowed.len()`: `true` when the
    /// token may come next. End tokens are allowed only once the output is
    /// complete. `allowed.len()` is the model's logits length (it may exceed
    /// the tokenizer's vocabulary: the extra ids are disallowed).
    fn allowed(&mut self, allowed: &mut [bool]) -> Result<(), PipelineError>;

    /// Advance past the token the pipeline sampled. An end token is accepted
    /// when complete. A token `allowed` refused is an `Internal` error.
    fn commit(&mut self, token: u32) -> Result<(), PipelineError>;

    /// Whether the output is complete: nothing but an end token may follow, so
    /// the pipeline may finish now with [`crate::FinishReason::Stop`].
    fn is_complete(&self) -> bool;

    /// Set every disallowed logit to `-inf` (call before sampling). Fails when
    /// no token at all is allowed (a dead end: a bug in the constraint).
    fn mask_logits(&mut self, logits: &mut [f32]) -> Result<(), PipelineError> {
        let mut allowed = vec![false; logits.len()];
        self.allowed(&mut allowed)?;
        let mut any = false;
        for (l, ok) in logits.iter_mut().zip(&allowed) {
            if *ok {
                any = true;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        if any {
            Ok(())
        } else {
            Err(PipelineError::internal("constraint allows no token"))
        }
    }
}

/// What `response_format` asked for (kept for logs and for pipelines that want
/// to mention the schema in a system prompt).
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// `{"type":"json_object"}`: any JSON object.
    JsonObject,
    /// `{"type":"json_schema","json_schema":{"schema":...}}`.
    JsonSchema(Value),
}

/// A compiled constraint inside a [`crate::CompletionRequest`]. The request is
/// passed by `&`, so the mask sits behind a mutex; only the generating thread
/// locks it.
pub struct Grammar {
    /// What was asked.
    pub spec: GrammarSpec,
    mask: Mutex<Box<dyn LogitMask>>,
}

impl Grammar {
    /// Wrap a compiled mask.
    pub fn new(spec: GrammarSpec, mask: Box<dyn LogitMask>) -> Self {
        Grammar {
            spec,
            mask: Mutex::new(mask),
        }
    }

    /// The mask, for one decode step (or the whole generation).
    pub fn mask(&self) -> MutexGuard<'_, Box<dyn LogitMask>> {
        self.mask
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Allows only even ids until two tokens were committed, then only id 1 (end).
    struct Evens(usize);
    impl LogitMask for Evens {
        fn allowed(&mut self, allowed: &mut [bool]) -> Result<(), PipelineError> {
            for (i, a) in allowed.iter_mut().enumerate() {
                *a = if self.0 >= 2 { i == 1 } else { i % 2 == 0 };
            }
            Ok(())
        }
        fn commit(&mut self, _token: u32) -> Result<(), PipelineError> {
            self.0 += 1;
            Ok(())
        }
        fn is_complete(&self) -> bool {
            self.0 >= 2
        }
    }

    #[test]
    fn mask_logits_sets_neg_inf() {
        let g = Grammar::new(GrammarSpec::JsonObject, Box::new(Evens(0)));
        let mut logits = vec![0.5f32, 1.5, -2.0, 3.0];
        g.mask().mask_logits(&mut logits).unwrap();
        assert_eq!(logits[0], 0.5);
        assert_eq!(logits[1], f32::NEG_INFINITY);
        assert_eq!(logits[2], -2.0);
        assert_eq!(logits[3], f32::NEG_INFINITY);
        g.mask().commit(0).unwrap();
        g.mask().commit(2).unwrap();
        assert!(g.mask().is_complete());
        let mut logits = vec![0.0f32; 4];
        g.mask().mask_logits(&mut logits).unwrap();
        assert_eq!(logits[1], 0.0);
        assert_eq!(logits[0], f32::NEG_INFINITY);
        let mut empty = vec![0.0f32; 1];
        assert!(g.mask().mask_logits(&mut empty).is_err());
    }
}
