//! Running chats on the device worker: one at a time, or several of the same
//! resident model together when its pipeline decodes batches.
//!
//! Key design choice: tokens go to the request's channel; a dropped receiver
//! (client gone) makes the sink return `RequestClosed`, so generation stops at
//! the next token and the worker moves on (in a batch, the others go on). A
//! panic in a pipeline is caught, the resident closed, and the requests answered
//! with a 500.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use favlo_pipeline::{
    Completion, FinishReason, Grammar, GrammarSpec, LanguagePipeline, Owner, PipelineError,
    RequestClosed, StopFlag, TokenLogprob, TokenSink,
};
use tokio::sync::mpsc;

use super::{ChatEvent, ChatJob, Resident, Shared, close_resident, lock, switch_to};
use crate::json::{Compiled, JsonMask, TokenTrie};
use crate::metrics::Metrics;
use crate::stop::StopMatcher;

/// A resident chat model.
pub(super) struct ChatResident {
    pub(super) id: String,
    pub(super) owner: Owner,
    pub(super) pipe: Box<dyn LanguagePipeline>,
    trie: Option<Arc<TokenTrie>>,
}

/// Serve one chat: switch or open the model, then complete.
pub(super) fn run(job: ChatJob, resident: &mut Option<Resident>, s: &Shared) {
    let ChatJob {
        spec,
        mut request,
        format,
        events,
    } = job;
    if events.is_closed() {
        return; // the client left while queued
    }
    switch_to(resident, &spec.id, s);
    if resident.is_none() {
        let owner = Owner::mint(&spec.family);
        let t = Instant::now();
        let opened = catch_unwind(AssertUnwindSafe(|| {
            s.factory.open_language(&spec, &s.ledger, &owner)
        }));
        match opened {
            Ok(Ok(pipe)) => {
                s.metrics
                    .last_load_ms
                    .store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                tracing::info!(model = %spec.id, ms = t.elapsed().as_millis() as u64, "model opened");
                lock(&s.residency).resident = Some(spec.id.clone());
                *resident = Some(Resident::Chat(ChatResident {
                    id: spec.id.clone(),
                    owner,
                    pipe,
                    trie: None,
                }));
            }
            Ok(Err(e)) => {
                let _ = s.ledger.sweep(&owner);
                let _ = events.send(ChatEvent::Done(Err(e)));
                return;
            }
            Err(_) => {
                let _ = s.ledger.sweep(&owner);
                let _ = events.send(ChatEvent::Done(Err(PipelineError::internal(format!(
                    "opening {} panicked",
                    spec.id
                )))));
                return;
            }
        }
    }
    let Some(Resident::Chat(r)) = resident.as_mut() else {
        return;
    };
    if let Some((gspec, compiled)) = format {
        match grammar_for(r, gspec, compiled) {
            Ok(g) => request.grammar = Some(g),
            Err(e) => {
                let _ = events.send(ChatEvent::Done(Err(e)));
                return;
            }
        }
    }
    let mut sink = ChannelSink::new(&events, &request);
    let stop = sink.stop.clone();
    let result = catch_unwind(AssertUnwindSafe(|| {
        r.pipe.complete(&request, &mut sink, &stop)
    }));
    let result = match result {
        Ok(res) => res,
        Err(_) => {
            tracing::error!(model = %spec.id, "the pipeline panicked; closing it");
            if let Some(r) = resident.take() {
                close_resident(r, s);
            }
            let _ = events.send(ChatEvent::Done(Err(PipelineError::internal(
                "pipeline panicked",
            ))));
            return;
        }
    };
    finish(result, &mut sink, &events, &spec.id, s);
}

/// How many chats of model `id` the resident can take together now: its batch size
/// when it is that model, else 1.
pub(super) fn batch_room(resident: &Option<Resident>, id: &str) -> usize {
    match resident {
        Some(Resident::Chat(r)) if r.id == id => r.pipe.max_batch().max(1),
        _ => 1,
    }
}

/// Sends a chat's end: the stop matcher's tail, the metrics, then `Done`.
pub(super) fn finish(
    result: Result<Completion, PipelineError>,
    sink: &mut ChannelSink,
    events: &mpsc::UnboundedSender<ChatEvent>,
    model: &str,
    s: &Shared,
) {
    let result = match result {
        Ok(mut c) => {
            let tail = sink.matcher.finish();
            if !sink.matcher.stopped() && !tail.is_empty() {
                sink.emitted.push_str(&tail);
                let _ = events.send(ChatEvent::Token {
                    piece: tail,
                    logprob: None,
                });
            }
            if sink.matcher.stopped() {
                c.finish_reason = FinishReason::Stop;
            }
            c.text = std::mem::take(&mut sink.emitted);
            Metrics::add(&s.metrics.prompt_tokens, c.prompt_tokens as u64);
            Metrics::add(&s.metrics.completion_tokens, c.completion_tokens as u64);
            Ok(c)
        }
        Err(PipelineError::Closed) => {
            Metrics::add(&s.metrics.disconnects, 1);
            tracing::info!(model = %model, "client closed the request; generation stopped");
            Err(PipelineError::Closed)
        }
        Err(e) => Err(e),
    };
    let _ = events.send(ChatEvent::Done(result));
}

fn grammar_for(
    r: &mut ChatResident,
    spec: GrammarSpec,
    compiled: Arc<Compiled>,
) -> Result<Grammar, PipelineError> {
    let vocab = r.pipe.vocab().ok_or_else(|| {
        PipelineError::invalid(
            format!(
                "model {} does not support response_format json output",
                r.id
            ),
            Some("response_format"),
        )
    })?;
    let trie = match &r.trie {
        Some(t) => t.clone(),
        None => {
            let t = Arc::new(TokenTrie::new(&vocab));
            r.trie = Some(t.clone());
            t
        }
    };
    Ok(Grammar::new(
        spec,
        Box::new(JsonMask::new(compiled, trie, vocab)),
    ))
}

pub(super) struct ChannelSink {
    tx: mpsc::UnboundedSender<ChatEvent>,
    matcher: StopMatcher,
    pub(super) stop: StopFlag,
    emitted: String,
}

impl ChannelSink {
    pub(super) fn new(
        events: &mpsc::UnboundedSender<ChatEvent>,
        request: &favlo_pipeline::CompletionRequest,
    ) -> Self {
        ChannelSink {
            tx: events.clone(),
            matcher: StopMatcher::new(&request.stop),
            stop: StopFlag::new(),
            emitted: String::new(),
        }
    }
}

impl TokenSink for ChannelSink {
    fn token(&mut self, piece: &str, logprob: Option<TokenLogprob>) -> Result<(), RequestClosed> {
        if self.tx.is_closed() {
            return Err(RequestClosed);
        }
        let out = self.matcher.push(piece);
        if self.matcher.stopped() {
            self.stop.raise();
        }
        self.emitted.push_str(&out);
        self.tx
            .send(ChatEvent::Token {
                piece: out,
                logprob,
            })
            .map_err(|_| RequestClosed)
    }
}
