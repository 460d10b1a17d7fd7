//! The language seam: one chat completion in, a stream of tokens out.
//!
//! Key design choice: the request arrives fully resolved. The server has
//! applied the model row's sampling defaults, the OpenAI defaults and the
//! `max_tokens` cap, so a pipeline never guesses; it owns only its prompt
//! rendering (chat template with `tools`), its sampler and its forward. Stop
//! strings and tool-call parsing are the server's (it raises the
//! [`StopFlag`](crate::StopFlag) when a stop string completes).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::chat::ChatMessage;
use crate::constraint::{Grammar, TokenVocab};
use crate::error::PipelineError;
use crate::sink::{StopFlag, TokenSink};

/// Resolved sampling parameters. `temperature == 0` means greedy (argmax).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Keep the k most likely; 0 = off.
    pub top_k: usize,
    /// Drop tokens below `min_p * p_max`; 0 = off.
    pub min_p: f32,
    /// Multiplicative penalty on already-seen tokens (CTRL style); 1 = off.
    pub repetition_penalty: f32,
    /// OpenAI presence penalty (subtract once if seen); 0 = off.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty (subtract per occurrence); 0 = off.
    pub frequency_penalty: f32,
    /// Seed for the sampler's RNG; `None` = from entropy.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    /// OpenAI's defaults: temperature 1, top_p 1, everything else off.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
        }
    }
}

/// One chat completion, resolved.
#[derive(Debug)]
pub struct CompletionRequest {
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// OpenAI `tools` array (`[{"type":"function","function":{...}}]`), passed
    /// to the chat template as `tools`. `None` when the request has none or
    /// `tool_choice` is `"none"`.
    pub tools: Option<serde_json::Value>,
    /// Most tokens to generate; `None` = until the context is full.
    pub max_tokens: Option<usize>,
    /// Sampler settings.
    pub sampling: SamplingParams,
    /// Stop strings (the server enforces them; informative for the pipeline).
    pub stop: Vec<String>,
    /// Report each sampled token's log-probability to the sink.
    pub logprobs: bool,
    /// How many alternatives per token (0..=20) with `logprobs`.
    pub top_logprobs: usize,
    /// Constrained decoding (response_format), applied every step.
    pub grammar: Option<Grammar>,
}

impl CompletionRequest {
    /// A request with these messages and every option at its default.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        CompletionRequest {
            messages,
            tools: None,
            max_tokens: None,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            logprobs: false,
            top_logprobs: 0,
            grammar: None,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end token, a complete constrained output, or a raised [`StopFlag`].
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
    /// The model called a tool (the server sets this after parsing; a
    /// pipeline that detects it itself may too).
    ToolCalls,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// One alternative in `top_logprobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text (lossy UTF-8 of `bytes`).
    pub token: String,
    /// Natural-log probability under the sampling distribution's logits
    /// (softmax of the raw logits, before temperature).
    pub logprob: f32,
    /// The token's raw bytes.
    pub bytes: Vec<u8>,
}

/// The sampled token's log-probability and its alternatives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The sampled token's text (lossy UTF-8 of `bytes`).
    pub token: String,
    /// Its natural-log probability (softmax of the raw logits).
    pub logprob: f32,
    /// Its raw bytes.
    pub bytes: Vec<u8>,
    /// The `top_logprobs` most likely tokens, most likely first.
    pub top: Vec<TopLogprob>,
}

/// The result of [`LanguagePipeline::complete`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Everything generated (the same text the sink received), end token excluded.
    pub text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens in the rendered prompt.
    pub prompt_tokens: usize,
    /// Tokens generated (end token excluded).
    pub completion_tokens: usize,
    /// One entry per generated token when the request asked for logprobs.
    pub logprobs: Vec<TokenLogprob>,
    /// Prompt processing time.
    pub prefill_ms: f64,
    /// Token generation time.
    pub decode_ms: f64,
}

/// A chat handed to [`LanguagePipeline::serve_chats`]: what `complete` borrows,
/// owned, and the queue's tag for it.
pub struct QueuedChat {
    /// The queue's own tag (it gets the chat back in [`ChatQueue::done`]).
    pub tag: u64,
    /// The resolved request.
    pub request: CompletionRequest,
    /// Where its pieces go.
    pub sink: Box<dyn TokenSink>,
    /// Its stop flag.
    pub stop: StopFlag,
}

/// Where [`LanguagePipeline::serve_chats`] takes chats from and hands them back.
pub trait ChatQueue {
    /// The next chat to start, if one waits now (never blocks).
    fn next(&mut self) -> Option<QueuedChat>;
    /// `chat` ended with `result` (what `complete` would have returned).
    fn done(&mut self, chat: QueuedChat, result: Result<Completion, PipelineError>);
}

/// Serves every chat `queue` holds through `pipe.complete`, one after another: the
/// default [`LanguagePipeline::serve_chats`], for an implementation that overrides it
/// and sometimes serves one at a time.
pub fn serve_one_at_a_time<P: LanguagePipeline + ?Sized>(pipe: &mut P, queue: &mut dyn ChatQueue) {
    while let Some(mut chat) = queue.next() {
        let r = pipe.complete(&chat.request, &mut *chat.sink, &chat.stop);
        queue.done(chat, r);
    }
}

/// A resident chat model.
///
/// The server calls `complete` (or `serve_chats`) from one blocking worker
/// thread, one call at a time; the runtime must stay usable after any error,
/// including `Closed`.
pub trait LanguagePipeline: Send {
    /// Run one completion. Send every piece to `sink` as it is decoded; return
    /// `Err(PipelineError::Closed)` as soon as the sink fails (`?` does it);
    /// check `stop` once per token and end with `FinishReason::Stop` when raised.
    /// A prompt longer than the context is `InvalidRequest` with param
    /// `"messages"`. With `req.grammar`, mask logits before each sample and
    /// commit after; end when the mask is complete.
    fn complete(
        &mut self,
        req: &CompletionRequest,
        sink: &mut dyn TokenSink,
        stop: &StopFlag,
    ) -> Result<Completion, PipelineError>;

    /// Context length this opening serves (after any shrink to fit).
    fn context_length(&self) -> usize;

    /// Most chats [`Self::serve_chats`] decodes together (default 1: one at a time).
    fn max_batch(&self) -> usize {
        1
    }

    /// Serve chats from `queue` until none waits and none runs: up to `max_batch`
    /// decoded together, a waiting chat joining between two decode steps when one
    /// ends. Each chat's result is what `complete` gives it; a failed or closed sink
    /// ends only its own chat. The default runs them one at a time with `complete`.
    fn serve_chats(&mut self, queue: &mut dyn ChatQueue) {
        serve_one_at_a_time(self, queue);
    }

    /// The vocabulary as bytes, so the server can build a [`Grammar`]. `None`
    /// (the default) means this pipeline cannot do constrained decoding and
    /// `response_format` json is refused with a 400.
    fn vocab(&self) -> Option<Arc<TokenVocab>> {
        None
    }

    /// Release the runtime. The default drops it (every ledger buffer returns
    /// its bytes on drop); the server then sweeps the owner and checks that
    /// nothing of it is live before the next runtime opens.
    fn close(self: Box<Self>) -> Result<(), PipelineError> {
        drop(self);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_strings() {
        let r = CompletionRequest::new(vec![]);
        assert_eq!(r.sampling.temperature, 1.0);
        assert_eq!(r.sampling.top_p, 1.0);
        assert!(r.grammar.is_none());
        assert_eq!(FinishReason::ToolCalls.as_str(), "tool_calls");
        assert_eq!(
            serde_json::to_string(&FinishReason::Length).unwrap(),
            "\"length\""
        );
    }
}
