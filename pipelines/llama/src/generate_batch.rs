//! Several chats decoded together (`LanguagePipeline::serve_chats` on a model opened
//! with `OpenOptions::sequences` > 1): each chat in a sequence of its own, one batched
//! decode step per token for all that are running.
//!
//! Key design choices:
//! - Continuous batches: a waiting chat is taken from the queue between two steps
//!   whenever a sequence is free, prefilled into it, and joins the step after its
//!   prompt is in; a chat that ends frees its sequence at once (the model replays the
//!   graph of the remaining set).
//! - A joining prompt is prefilled one prefill chunk per decode step while other chats
//!   decode, so they pause for at most one chunk between two tokens instead of for the
//!   whole prompt; with nothing decoding it is prefilled at once. The chunks are the
//!   ones a lone prefill runs (same positions, same kernels), so the result does not
//!   depend on what else runs.
//! - Each chat keeps what `complete` gives it: its own sampler (penalties, seed; a step
//!   without penalties picks its token on the device with the host sampler's rule and
//!   draw, as `generate` does), streaming decoder, stop strings, stop flag and
//!   `max_tokens`; a closed sink ends only its own chat.
//! - A chat that asks for logprobs or a grammar runs alone through `complete` once the
//!   running ones have ended (no other chat is taken meanwhile), since it samples from
//!   sequence 0's logits on the host.
//! - Sequence 0's cache is overwritten, so the prefix kept for the next request's reuse
//!   is dropped whenever a chat is prefilled.

use std::time::Instant;

use favlo_formats::tokenizer::{StreamDecoder, Tokenizer};
use favlo_pipeline::{
    ChatQueue, Completion, FinishReason, LanguagePipeline, PipelineError, QueuedChat,
};

use crate::generate::find_stop;
use crate::runtime::LlamaRuntime;
use crate::sampler::Sampler;

/// One running chat.
struct Live {
    chat: QueuedChat,
    /// The prompt's ids and how many of them are in the sequence's cache.
    prompt: Vec<u32>,
    filled: usize,
    max: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    text: String,
    tokens: Vec<u32>,
    stopped_by_string: bool,
    prefill_ms: f64,
    /// When it was taken from the queue, then (its prompt in) when decoding began.
    started: Instant,
    /// Its steps pick their token on the device (no penalties, a model that can).
    on_device: bool,
    /// The token the last step picked on the device.
    pending: Option<u32>,
    /// The sequence's logits after the last step (when not picked on the device).
    logits: Vec<f32>,
}

/// Why a running chat stops now.
enum End {
    Finish(FinishReason),
    Failed(PipelineError),
}

impl LlamaRuntime {
    /// [`LanguagePipeline::serve_chats`] for an opening of several sequences.
    pub(crate) fn serve_together(&mut self, queue: &mut dyn ChatQueue) {
        let n = self.model.sequences();
        let vocab = self.config().vocab_size;
        let mut slots: Vec<Option<Live>> = (0..n).map(|_| None).collect();
        // The step's logits rows, kept across steps: only rows not picked on the device
        // are written and read, so the buffer is never cleared.
        let mut logits: Vec<f32> = Vec::new();
        // A chat that must run alone, waiting for the running ones to end.
        let mut alone: Option<QueuedChat> = None;
        loop {
            // Take waiting chats into free sequences.
            let mut none_waiting = false;
            while alone.is_none() {
                let Some(free) = slots.iter().position(Option::is_none) else {
                    break;
                };
                let Some(chat) = queue.next() else {
                    none_waiting = true;
                    break;
                };
                if chat.request.logprobs || chat.request.grammar.is_some() {
                    alone = Some(chat);
                    break;
                }
                slots[free] = self.start(chat, queue);
            }
            self.prefill_step(&mut slots, queue);
            if slots.iter().all(Option::is_none) {
                match alone.take() {
                    Some(mut chat) => {
                        let r = self.complete(&chat.request, &mut *chat.sink, &chat.stop);
                        queue.done(chat, r);
                        continue;
                    }
                    // Nothing runs and nothing waits.
                    None if none_waiting => break,
                    None => continue,
                }
            }
            // One token of every running chat; the ones that go on take a step.
            let Some(tok) = self.tokenizer.take() else {
                for live in slots.iter_mut().filter_map(Option::take) {
                    queue.done(live.chat, Err(PipelineError::internal("no tokenizer")));
                }
                continue;
            };
            let mut steps = Vec::new();
            let mut choices = Vec::new();
            for (seq, slot) in slots.iter_mut().enumerate() {
                let Some(live) = slot.as_mut().filter(|l| l.prefilled()) else {
                    continue;
                };
                match self.advance(live, &tok) {
                    None => {
                        steps.push((seq, *live.tokens.last().unwrap_or(&0), live.position()));
                        // As `generate`: the draw for the next token goes with the step.
                        choices.push(live.on_device.then(|| live.sampler.device_choice()));
                    }
                    Some(end) => {
                        if let Some(live) = slot.take() {
                            let (chat, result) = live.finish(end);
                            queue.done(chat, result);
                        }
                    }
                }
            }
            self.tokenizer = Some(tok);
            if steps.is_empty() {
                continue;
            }
            logits.resize(steps.len() * vocab, 0.0);
            match self
                .model
                .decode_batch_choose(&steps, &choices, &mut logits)
            {
                Ok(picked) => {
                    let rows = steps.iter().zip(logits.chunks(vocab)).zip(picked);
                    for ((&(seq, _, _), row), pick) in rows {
                        if let Some(live) = slots.get_mut(seq).and_then(Option::as_mut) {
                            match pick {
                                Some(t) => live.pending = Some(t),
                                None => live.logits.copy_from_slice(row),
                            }
                        }
                    }
                }
                Err(e) => {
                    let e = e.into_pipeline();
                    for &(seq, _, _) in &steps {
                        if let Some(live) = slots.get_mut(seq).and_then(Option::take) {
                            let err = PipelineError::internal(e.to_string());
                            let (chat, result) = live.finish(End::Failed(err));
                            queue.done(chat, result);
                        }
                    }
                }
            }
        }
    }

    /// Prompts not yet in their caches: one prefill chunk of each while any chat
    /// decodes, else the whole prompt. A chat whose client stopped it ends between
    /// chunks; one whose prefill fails goes back to `queue` with the error.
    fn prefill_step(&mut self, slots: &mut [Option<Live>], queue: &mut dyn ChatQueue) {
        let decoding = slots.iter().flatten().any(Live::prefilled);
        let chunk = self.model.prefill_chunk().unwrap_or(usize::MAX).max(1);
        for (seq, slot) in slots.iter_mut().enumerate() {
            let Some(live) = slot.as_mut().filter(|l| !l.prefilled()) else {
                continue;
            };
            if live.chat.stop.is_raised() {
                if let Some(live) = slot.take() {
                    let (chat, result) = live.finish(End::Finish(FinishReason::Stop));
                    queue.done(chat, result);
                }
                continue;
            }
            let (from, len) = (live.filled, live.prompt.len());
            let to = if decoding {
                from.saturating_add(chunk).min(len)
            } else {
                len
            };
            let run = self
                .model
                .forward_seq(seq, &live.prompt[from..to], from, &mut live.logits);
            match run {
                Ok(()) => {
                    live.filled = to;
                    if to == len {
                        live.prefill_ms = live.started.elapsed().as_secs_f64() * 1e3;
                        live.started = Instant::now();
                    }
                }
                Err(e) => {
                    if let Some(live) = slot.take() {
                        queue.done(live.chat, Err(e.into_pipeline()));
                    }
                }
            }
        }
    }

    /// Renders `chat`'s prompt for a free sequence (prefilled by [`Self::prefill_step`]);
    /// a chat that cannot start goes back to `queue` with its error.
    fn start(&mut self, chat: QueuedChat, queue: &mut dyn ChatQueue) -> Option<Live> {
        let t0 = Instant::now();
        let cap = self.model.capacity();
        let prompt = match self.prompt_ids(&chat.request.messages, chat.request.tools.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                queue.done(chat, Err(e.into_pipeline()));
                return None;
            }
        };
        if prompt.is_empty() || prompt.len() >= cap {
            let e = PipelineError::invalid(
                format!("prompt is {} tokens; the context holds {cap}", prompt.len()),
                Some("messages"),
            );
            queue.done(chat, Err(e));
            return None;
        }
        // Sequence 0's cache (the prefix reuse's) is about to change.
        self.cached.clear();
        let logits = vec![0f32; self.config().vocab_size];
        let max = chat
            .request
            .max_tokens
            .unwrap_or(usize::MAX)
            .min(cap - prompt.len());
        let sampler = Sampler::new(&chat.request.sampling, &prompt);
        let on_device = self.model.chooses_on_device() && sampler.penalty_free();
        Some(Live {
            filled: 0,
            prompt,
            max,
            sampler,
            decoder: StreamDecoder::new(),
            text: String::new(),
            tokens: Vec::new(),
            stopped_by_string: false,
            prefill_ms: 0.0,
            started: t0,
            on_device,
            pending: None,
            logits,
            chat,
        })
    }

    /// `live`'s next token: sampled (or the one its last step picked), streamed, and
    /// checked against the ends; `None` when it goes on.
    fn advance(&self, live: &mut Live, tok: &Tokenizer) -> Option<End> {
        if live.max == 0 {
            return Some(End::Finish(FinishReason::Length));
        }
        let t = match live.pending.take() {
            Some(t) => t,
            None => {
                live.sampler.penalize(&mut live.logits);
                live.sampler.choose(&live.logits)
            }
        };
        if self.stop_ids.contains(&t) {
            return Some(End::Finish(FinishReason::Stop));
        }
        live.sampler.accept(t);
        live.tokens.push(t);
        let piece = live.decoder.push_token(tok, t);
        if live.chat.sink.token(&piece, None).is_err() {
            return Some(End::Failed(PipelineError::Closed));
        }
        live.text.push_str(&piece);
        if let Some(cut) = find_stop(&live.text, &live.chat.request.stop, piece.len()) {
            live.text.truncate(cut);
            live.stopped_by_string = true;
            return Some(End::Finish(FinishReason::Stop));
        }
        if live.chat.stop.is_raised() {
            return Some(End::Finish(FinishReason::Stop));
        }
        if live.tokens.len() >= live.max {
            return Some(End::Finish(FinishReason::Length));
        }
        None
    }
}

impl Live {
    /// Its whole prompt is in its cache: it decodes.
    fn prefilled(&self) -> bool {
        self.filled == self.prompt.len()
    }

    /// The position of its newest token.
    fn position(&self) -> usize {
        self.prompt.len() + self.tokens.len().saturating_sub(1)
    }

    /// The chat and what `complete` would have returned for it.
    fn finish(mut self, end: End) -> (QueuedChat, Result<Completion, PipelineError>) {
        let finish = match end {
            End::Finish(f) => f,
            End::Failed(e) => return (self.chat, Err(e)),
        };
        let rest = self.decoder.finish();
        if !rest.is_empty() && !self.stopped_by_string {
            if self.chat.sink.token(&rest, None).is_err() {
                return (self.chat, Err(PipelineError::Closed));
            }
            self.text.push_str(&rest);
        }
        let decode_ms = if self.prefilled() {
            self.started.elapsed().as_secs_f64() * 1e3
        } else {
            0.0
        };
        let c = Completion {
            text: self.text,
            finish_reason: finish,
            prompt_tokens: self.prompt.len(),
            completion_tokens: self.tokens.len(),
            logprobs: Vec::new(),
            prefill_ms: self.prefill_ms,
            decode_ms,
        };
        (self.chat, Ok(c))
    }
}
