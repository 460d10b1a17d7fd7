//! Favlo's seams: the traits a model family implements and the listener drives.
//!
//! Key design choice: nothing here knows HTTP or JSON-RPC. The server turns an
//! OpenAI body into a [`CompletionRequest`] (or embeddings texts, or a media
//! job), resolves every default (sampling from the model row, stop strings,
//! constraints), and hands the pipeline plain Rust values. A pipeline streams
//! tokens into a [`TokenSink`]; the sink's [`RequestClosed`] is how a closed
//! client stops generation at the next token. The binary maps a registry row to
//! an opened pipeline through [`PipelineFactory`], so the server never depends on
//! a pipeline crate.
//!
//! Seams (design.md "The seams"):
//! - [`PipelineFactory`]: `open(owner, ledger, spec) -> runtime` for each kind.
//! - [`LanguagePipeline`]: `complete(request, sink, stop) -> Completion`.
//! - [`EmbeddingsPipeline`]: `embed_batch(texts) -> [Embedding]`.
//! - [`MediaPipeline`]: `parse(body) -> job`, `generate(job, hold, control)`,
//!   `pack(output) -> file`, with [`MediaPaused`] for preempt/cancel.

mod chat;
mod constraint;
mod embeddings;
mod error;
mod factory;
mod language;
mod media;
mod sink;

pub use chat::{ChatMessage, Role, ToolCall};
pub use constraint::{Grammar, GrammarSpec, LogitMask, TokenVocab};
pub use embeddings::{Embedding, EmbeddingsPipeline};
pub use error::{ErrorKind, PipelineError};
pub use factory::{ModelKind, ModelSpec, PipelineFactory};
pub use language::{
    ChatQueue, Completion, CompletionRequest, FinishReason, LanguagePipeline, QueuedChat,
    SamplingParams, TokenLogprob, TopLogprob, serve_one_at_a_time,
};
pub use media::{
    Control, MediaError, MediaFile, MediaHold, MediaJob, MediaKind, MediaOutput, MediaPaused,
    MediaPipeline, Signal,
};
pub use sink::{CollectSink, RequestClosed, StopFlag, TokenSink};

/// Re-exported so pipelines and the server name the same ledger types.
pub use favlo_runtime::ledger::{Ledger, Owner};
