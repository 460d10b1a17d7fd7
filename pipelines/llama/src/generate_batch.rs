//! Several chats decoded together (`LanguagePipeline::complete_batch` on a model opened
//! with `OpenOptions::sequences` > 1): each request in its own sequence, one batched
//! decode step per token for all that are still going.
//!
//! Key design choices:
//! - Static batches: the requests start together (each prompt prefilled into its own
//!   sequence) and a request that ends leaves the step (the model replays the graph of
//!   the remaining set); a request that arrives meanwhile waits for the next batch.
//! - Each request keeps what `complete` gives it: its own sampler (penalties, seed;
//!   a step without penalties picks its token on the device with the host sampler's
//!   rule and draw, as `generate` does), streaming decoder, stop strings, stop flag and
//!   `max_tokens`; a closed sink ends only its own request. Requests with a grammar or logprobs are not batched
//!   (the caller runs them one at a time).
//! - Sequence 0's cache is overwritten, so the prefix kept for the next request's reuse
//!   is dropped.

use std::time::Instant;

use favlo_formats::tokenizer::{StreamDecoder, Tokenizer};
use favlo_pipeline::{BatchItem, Completion, FinishReason, PipelineError};

use crate::error::LlamaError;
use crate::generate::find_stop;
use crate::runtime::LlamaRuntime;
use crate::sampler::Sampler;

/// One request's state in the batch.
struct Live {
    /// Index into the batch's items (and its sequence).
    item: usize,
    prompt_len: usize,
    max: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    text: String,
    tokens: Vec<u32>,
    stopped_by_string: bool,
    prefill_ms: f64,
    /// `Some` once it ended (its finish reason or error).
    end: Option<Result<FinishReason, PipelineError>>,
    /// Its steps pick their token on the device (no penalties, a model that can).
    on_device: bool,
    /// The token the last step picked on the device.
    pending: Option<u32>,
}

impl LlamaRuntime {
    /// Whether [`Self::generate_batch`] can take `items` together.
    pub(crate) fn batchable(&self, items: &[BatchItem<'_>]) -> bool {
        items.len() > 1
            && items.len() <= self.model.sequences()
            && items
                .iter()
                .all(|i| i.request.grammar.is_none() && !i.request.logprobs)
    }

    /// Runs the batchable `items` together (see the module doc).
    pub(crate) fn generate_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Vec<Result<Completion, PipelineError>> {
        // The prompts first: rendering them needs the tokenizer in place.
        let prompts: Vec<Result<Vec<u32>, PipelineError>> = items
            .iter()
            .map(|it| {
                self.prompt_ids(&it.request.messages, it.request.tools.as_ref())
                    .map_err(LlamaError::into_pipeline)
            })
            .collect();
        let Some(tok) = self.tokenizer.take() else {
            return items
                .iter()
                .map(|_| Err(PipelineError::internal("no tokenizer")))
                .collect();
        };
        let out = self.batch_with(items, prompts, &tok);
        self.tokenizer = Some(tok);
        out
    }

    fn batch_with(
        &mut self,
        items: &mut [BatchItem<'_>],
        prompts: Vec<Result<Vec<u32>, PipelineError>>,
        tok: &Tokenizer,
    ) -> Vec<Result<Completion, PipelineError>> {
        let cap = self.model.capacity();
        let vocab = self.config().vocab_size;
        let mut results: Vec<Option<Result<Completion, PipelineError>>> =
            items.iter().map(|_| None).collect();
        // Sequence 0's cache is about to be overwritten.
        self.cached.clear();
        let mut logits = vec![0f32; items.len() * vocab];
        let mut live: Vec<Live> = Vec::new();
        for (i, (it, prompt)) in items.iter().zip(prompts).enumerate() {
            let t0 = Instant::now();
            let prompt = match prompt {
                Ok(p) => p,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            if prompt.is_empty() || prompt.len() >= cap {
                results[i] = Some(Err(PipelineError::invalid(
                    format!("prompt is {} tokens; the context holds {cap}", prompt.len()),
                    Some("messages"),
                )));
                continue;
            }
            let seq = live.len();
            let out = &mut logits[seq * vocab..(seq + 1) * vocab];
            if let Err(e) = self.model.forward_seq(seq, &prompt, 0, out) {
                results[i] = Some(Err(e.into_pipeline()));
                continue;
            }
            let max = it
                .request
                .max_tokens
                .unwrap_or(usize::MAX)
                .min(cap - prompt.len());
            let sampler = Sampler::new(&it.request.sampling, &prompt);
            let on_device = self.model.chooses_on_device() && sampler.penalty_free();
            live.push(Live {
                item: i,
                prompt_len: prompt.len(),
                max,
                sampler,
                decoder: StreamDecoder::new(),
                text: String::new(),
                tokens: Vec::new(),
                stopped_by_string: false,
                prefill_ms: t0.elapsed().as_secs_f64() * 1e3,
                end: (max == 0).then_some(Ok(FinishReason::Length)),
                on_device,
                pending: None,
            });
        }
        let t1 = Instant::now();
        let mut decode_ms = vec![0f64; live.len()];
        loop {
            let (mut steps, mut choices) = (Vec::new(), Vec::new());
            for (seq, l) in live.iter_mut().enumerate() {
                if l.end.is_some() {
                    continue;
                }
                let it = &mut items[l.item];
                let t = match l.pending.take() {
                    Some(t) => t,
                    None => {
                        let row = &mut logits[seq * vocab..(seq + 1) * vocab];
                        l.sampler.penalize(row);
                        l.sampler.choose(row)
                    }
                };
                if self.stop_ids.contains(&t) {
                    l.end = Some(Ok(FinishReason::Stop));
                    continue;
                }
                l.sampler.accept(t);
                l.tokens.push(t);
                let piece = l.decoder.push_token(tok, t);
                if it.sink.token(&piece, None).is_err() {
                    l.end = Some(Err(PipelineError::Closed));
                    continue;
                }
                l.text.push_str(&piece);
                if let Some(cut) = find_stop(&l.text, &it.request.stop, piece.len()) {
                    l.text.truncate(cut);
                    l.stopped_by_string = true;
                    l.end = Some(Ok(FinishReason::Stop));
                    continue;
                }
                if it.stop.is_raised() {
                    l.end = Some(Ok(FinishReason::Stop));
                    continue;
                }
                if l.tokens.len() >= l.max {
                    l.end = Some(Ok(FinishReason::Length));
                    continue;
                }
                steps.push((seq, t, l.prompt_len + l.tokens.len() - 1));
                // As `generate`: the draw for the next token is taken with the step.
                choices.push(l.on_device.then(|| l.sampler.device_choice()));
            }
            for (seq, l) in live.iter().enumerate() {
                if l.end.is_some() && decode_ms[seq] == 0.0 {
                    decode_ms[seq] = t1.elapsed().as_secs_f64() * 1e3;
                }
            }
            if steps.is_empty() {
                break;
            }
            let mut step_logits = vec![0f32; steps.len() * vocab];
            let picked = match self
                .model
                .decode_batch_choose(&steps, &choices, &mut step_logits)
            {
                Ok(p) => p,
                Err(e) => {
                    let e = LlamaError::into_pipeline(e);
                    for &(seq, _, _) in &steps {
                        live[seq].end = Some(Err(clone_err(&e)));
                        decode_ms[seq] = t1.elapsed().as_secs_f64() * 1e3;
                    }
                    break;
                }
            };
            let rows = steps.iter().zip(step_logits.chunks(vocab)).zip(picked);
            for ((&(seq, _, _), row), pick) in rows {
                match pick {
                    Some(t) => live[seq].pending = Some(t),
                    None => logits[seq * vocab..(seq + 1) * vocab].copy_from_slice(row),
                }
            }
        }
        for (seq, mut l) in live.into_iter().enumerate() {
            let it = &mut items[l.item];
            let end = l.end.take().unwrap_or(Ok(FinishReason::Length));
            results[l.item] = Some(end.and_then(|finish| {
                let rest = l.decoder.finish();
                if !rest.is_empty() && !l.stopped_by_string {
                    it.sink
                        .token(&rest, None)
                        .map_err(|_| PipelineError::Closed)?;
                    l.text.push_str(&rest);
                }
                Ok(Completion {
                    text: l.text,
                    finish_reason: finish,
                    prompt_tokens: l.prompt_len,
                    completion_tokens: l.tokens.len(),
                    logprobs: Vec::new(),
                    prefill_ms: l.prefill_ms,
                    decode_ms: decode_ms[seq],
                })
            }));
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PipelineError::internal("request not run"))))
            .collect()
    }
}

/// The same error again (one failed step ends every request in it).
fn clone_err(e: &PipelineError) -> PipelineError {
    PipelineError::internal(e.to_string())
}
