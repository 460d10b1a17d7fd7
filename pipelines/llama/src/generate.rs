//! The generation loop (ids in, ids out) and the `LanguagePipeline` built on it.
//!
//! Key design choices:
//! - Prefill reuses the longest cached prefix of the previous request (the KV
//!   rows are still valid), then runs the rest in chunks; decode is one token per
//!   forward. The cache bookkeeping (`cached`) only ever lists tokens whose
//!   keys/values were really written, so a cancelled request leaves it valid.
//! - Per token: logprobs (from the raw logits) → penalties → constraint mask →
//!   sample → commit. The callback sees each token and may end the generation.
//! - Text streaming goes through formats' `StreamDecoder`, so a piece is always
//!   whole UTF-8; stop strings (the server also enforces them) end the
//!   generation and are cut from the returned text.

use std::time::Instant;

use favlo_formats::tokenizer::StreamDecoder;
use favlo_pipeline::{
    Completion, CompletionRequest, FinishReason, Grammar, LanguagePipeline, PipelineError,
    SamplingParams, StopFlag, TokenLogprob, TokenSink, TokenVocab, TopLogprob,
};

use crate::error::LlamaError;
use crate::model::DeviceChoice;
use crate::runtime::LlamaRuntime;
use crate::sampler::{Sampler, logprobs};

/// What the per-token callback tells the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep going.
    Continue,
    /// End now with `FinishReason::Stop`.
    Stop,
}

/// Settings of one id-level generation.
pub struct GenerateParams<'a> {
    pub sampling: &'a SamplingParams,
    pub max_tokens: usize,
    /// `Some(n)`: compute the chosen token's logprob and the `n` best.
    pub logprobs: Option<usize>,
    pub grammar: Option<&'a Grammar>,
}

/// What an id-level generation produced.
#[derive(Clone, Debug)]
pub struct Generated {
    /// New tokens (stop token excluded).
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    /// Prompt tokens actually run (after prefix reuse).
    pub prefilled: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

/// A chosen token's logprob and the best alternatives `(id, logprob)`.
pub type TokenScore = (f32, Vec<(u32, f32)>);

impl LlamaRuntime {
    /// Prefill `prompt`, then sample up to `max_tokens` tokens. `on_token` runs
    /// after each generated token (stop tokens excluded).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        p: &GenerateParams<'_>,
        on_token: &mut dyn FnMut(u32, Option<TokenScore>) -> Result<Step, PipelineError>,
    ) -> Result<Generated, PipelineError> {
        let cap = self.model.capacity();
        if prompt.is_empty() {
            return Err(PipelineError::invalid(
                "the prompt is empty",
                Some("messages"),
            ));
        }
        if prompt.len() >= cap {
            return Err(PipelineError::invalid(
                format!("prompt is {} tokens; the context holds {cap}", prompt.len()),
                Some("messages"),
            ));
        }
        let t0 = Instant::now();
        let reuse = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        self.cached.truncate(reuse);
        let mut sampler = Sampler::new(p.sampling, prompt);
        // On a model that picks tokens where the logits are (CUDA), a step without
        // penalties, logprobs or grammar copies back one token instead of the logits.
        let on_device = self.model.chooses_on_device()
            && sampler.penalty_free()
            && p.logprobs.is_none()
            && p.grammar.is_none();
        let choice = on_device.then(|| sampler.device_choice());
        let mut next = self.run(&prompt[reuse..], reuse, choice)?;
        self.cached.extend_from_slice(&prompt[reuse..]);
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let mut tokens = Vec::new();
        let max = p.max_tokens.min(cap - prompt.len());
        let mut finish = FinishReason::Length;
        while tokens.len() < max {
            let tok = match next {
                Some(t) => t,
                None => {
                    if p.logprobs.is_some() {
                        self.raw.copy_from_slice(&self.logits);
                    }
                    sampler.penalize(&mut self.logits);
                    if let Some(g) = p.grammar {
                        g.mask().mask_logits(&mut self.logits)?;
                    }
                    sampler.choose(&self.logits)
                }
            };
            if let Some(g) = p.grammar {
                g.mask().commit(tok)?;
            }
            if self.stop_ids.contains(&tok) {
                finish = FinishReason::Stop;
                break;
            }
            let score = p.logprobs.map(|n| logprobs(&self.raw, tok as usize, n));
            sampler.accept(tok);
            tokens.push(tok);
            let step = on_token(tok, score)?;
            let complete = p.grammar.is_some_and(|g| g.mask().is_complete());
            if step == Step::Stop || complete {
                finish = FinishReason::Stop;
                break;
            }
            if tokens.len() == max {
                break;
            }
            let n_past = self.cached.len();
            let choice = on_device.then(|| sampler.device_choice());
            next = self.run(&[tok], n_past, choice)?;
            self.cached.push(tok);
        }
        Ok(Generated {
            tokens,
            finish,
            prefilled: prompt.len() - reuse,
            prefill_ms,
            decode_ms: t1.elapsed().as_secs_f64() * 1e3,
        })
    }
}

impl LlamaRuntime {
    /// Runs `ids` at `n_past..`: with a `choice` the device's pick of the next token
    /// (`Some`), else the logits into `self.logits` (`None`).
    fn run(
        &mut self,
        ids: &[u32],
        n_past: usize,
        choice: Option<DeviceChoice>,
    ) -> Result<Option<u32>, PipelineError> {
        if let Some(c) = choice
            && let Some(t) = self
                .model
                .forward_choose(ids, n_past, &c)
                .map_err(LlamaError::into_pipeline)?
        {
            return Ok(Some(t));
        }
        self.model
            .forward(ids, n_past, &mut self.logits, false)
            .map_err(LlamaError::into_pipeline)?;
        Ok(None)
    }
}

impl LanguagePipeline for LlamaRuntime {
    fn complete(
        &mut self,
        req: &CompletionRequest,
        sink: &mut dyn TokenSink,
        stop: &StopFlag,
    ) -> Result<Completion, PipelineError> {
        let prompt = self
            .prompt_ids(&req.messages, req.tools.as_ref())
            .map_err(LlamaError::into_pipeline)?;
        let tok = self
            .tokenizer
            .take()
            .ok_or_else(|| PipelineError::internal("no tokenizer"))?;
        let result = self.complete_ids(&prompt, req, sink, stop, &tok);
        self.tokenizer = Some(tok);
        result
    }

    fn context_length(&self) -> usize {
        self.model.capacity()
    }

    fn max_batch(&self) -> usize {
        self.model.sequences()
    }

    fn serve_chats(&mut self, queue: &mut dyn favlo_pipeline::ChatQueue) {
        if self.model.sequences() > 1 {
            return self.serve_together(queue);
        }
        favlo_pipeline::serve_one_at_a_time(self, queue);
    }

    fn vocab(&self) -> Option<std::sync::Arc<TokenVocab>> {
        self.vocab.clone()
    }
}

impl LlamaRuntime {
    fn complete_ids(
        &mut self,
        prompt: &[u32],
        req: &CompletionRequest,
        sink: &mut dyn TokenSink,
        stop: &StopFlag,
        tok: &favlo_formats::tokenizer::Tokenizer,
    ) -> Result<Completion, PipelineError> {
        let params = GenerateParams {
            sampling: &req.sampling,
            max_tokens: req.max_tokens.unwrap_or(usize::MAX),
            logprobs: req.logprobs.then_some(req.top_logprobs.min(20)),
            grammar: req.grammar.as_ref(),
        };
        let mut decoder = StreamDecoder::new();
        let mut text = String::new();
        let mut lps = Vec::new();
        let mut stopped_by_string = false;
        let out = self.generate(prompt, &params, &mut |id, score| {
            let piece = decoder.push_token(tok, id);
            let lp = score.map(|(logprob, top)| token_logprob(tok, id, logprob, &top));
            if let Some(lp) = &lp {
                lps.push(lp.clone());
            }
            sink.token(&piece, lp)?;
            text.push_str(&piece);
            if let Some(cut) = find_stop(&text, &req.stop, piece.len()) {
                text.truncate(cut);
                stopped_by_string = true;
                return Ok(Step::Stop);
            }
            Ok(if stop.is_raised() {
                Step::Stop
            } else {
                Step::Continue
            })
        })?;
        let rest = decoder.finish();
        if !rest.is_empty() && !stopped_by_string {
            sink.token(&rest, None)?;
            text.push_str(&rest);
        }
        Ok(Completion {
            text,
            finish_reason: out.finish,
            prompt_tokens: prompt.len(),
            completion_tokens: out.tokens.len(),
            logprobs: lps,
            prefill_ms: out.prefill_ms,
            decode_ms: out.decode_ms,
        })
    }
}

/// Byte offset where the first stop string starts, searching only where a
/// match could involve the newest `new_len` bytes.
pub(crate) fn find_stop(text: &str, stops: &[String], new_len: usize) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let mut from = text.len().saturating_sub(new_len + s.len());
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            text[from..].find(s.as_str()).map(|i| from + i)
        })
        .min()
}

fn token_logprob(
    tok: &favlo_formats::tokenizer::Tokenizer,
    id: u32,
    logprob: f32,
    top: &[(u32, f32)],
) -> TokenLogprob {
    let bytes = tok.token_bytes_ref(id).to_vec();
    TokenLogprob {
        token: String::from_utf8_lossy(&bytes).into_owned(),
        logprob,
        top: top
            .iter()
            .map(|&(t, lp)| {
                let b = tok.token_bytes_ref(t).to_vec();
                TopLogprob {
                    token: String::from_utf8_lossy(&b).into_owned(),
                    logprob: lp,
                    bytes: b,
                }
            })
            .collect(),
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::find_stop;

    #[test]
    fn stop_strings_found_across_pieces() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc EN", &stops, 2), None);
        assert_eq!(find_stop("abc END", &stops, 1), Some(4));
        assert_eq!(find_stop("héllo\n\nx", &stops, 2), Some(6));
        assert_eq!(find_stop("x", &[String::new()], 1), None);
    }
}
