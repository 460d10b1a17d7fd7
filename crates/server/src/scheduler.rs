//! The one-resident scheduler: a chat worker thread and an embeddings worker thread.
//!
//! Key design choice: generation never runs on the async runtime. The chat
//! worker is one OS thread that owns the resident [`LanguagePipeline`] and takes
//! jobs in order from a bounded queue (full → 429). A job for another model
//! closes the resident and sweeps its ledger owner (checked: a leak is logged
//! and counted) before the next opens; the same model stays resident. Tokens go
//! to the request's channel; a dropped receiver (client gone) makes the sink
//! return `RequestClosed`, so generation stops at the next token and the worker
//! moves on. Embeddings have their own thread and never touch the resident.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use favlo_pipeline::ModelSpec;
use favlo_pipeline::{
    Completion, CompletionRequest, Embedding, EmbeddingsPipeline, FinishReason, Grammar,
    GrammarSpec, LanguagePipeline, Ledger, Owner, PipelineError, PipelineFactory, RequestClosed,
    StopFlag, TokenLogprob, TokenSink,
};
use tokio::sync::{mpsc, oneshot};

use crate::json::{Compiled, JsonMask, TokenTrie};
use crate::metrics::Metrics;
use crate::stop::StopMatcher;

/// What the chat worker sends back for one request.
#[derive(Debug)]
pub enum ChatEvent {
    /// Text safe to show (stop strings already removed), with its logprob.
    Token {
        /// The text.
        piece: String,
        /// Its logprob, when asked for.
        logprob: Option<TokenLogprob>,
    },
    /// The end: the completion (its `text` is what was emitted) or the error.
    Done(Result<Completion, PipelineError>),
}

/// One chat job.
pub struct ChatJob {
    /// The row to run.
    pub spec: ModelSpec,
    /// The resolved request (its `grammar` is filled in by the worker).
    pub request: CompletionRequest,
    /// `response_format`, compiled against the resident's vocabulary.
    pub format: Option<(GrammarSpec, Arc<Compiled>)>,
    /// Where tokens go.
    pub events: mpsc::UnboundedSender<ChatEvent>,
}

/// One embeddings job.
pub struct EmbedJob {
    /// The row to run.
    pub spec: ModelSpec,
    /// The inputs.
    pub input: EmbedInput,
    /// The reply: embeddings plus the model's full dimension and truncation support.
    pub reply: oneshot::Sender<EmbedReply>,
}

/// The embeddings worker's answer: vectors, the model's full dimension, and
/// whether it allows truncation.
pub type EmbedReply = Result<(Vec<Embedding>, usize, bool), PipelineError>;

/// Embeddings input forms.
#[derive(Debug)]
pub enum EmbedInput {
    /// Strings.
    Texts(Vec<String>),
    /// Token id arrays.
    Tokens(Vec<Vec<u32>>),
}

/// What is loaded now (for `/v1/models` and the log).
#[derive(Debug, Default, Clone)]
pub struct Residency {
    /// The resident chat/media model id.
    pub resident: Option<String>,
    /// The loaded embeddings model id.
    pub embeddings: Option<String>,
}

enum ChatMsg {
    Job(Box<ChatJob>),
    Shutdown,
}

/// Handle the routes use to submit work.
pub struct Scheduler {
    chat: SyncSender<ChatMsg>,
    embed: SyncSender<EmbedJob>,
    capacity: usize,
    residency: Arc<Mutex<Residency>>,
    metrics: Arc<Metrics>,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is at capacity.
    Full,
    /// The worker is gone (shutting down).
    Closed,
}

impl Scheduler {
    /// Start both workers.
    pub fn start(
        factory: Arc<dyn PipelineFactory>,
        ledger: Arc<Ledger>,
        metrics: Arc<Metrics>,
        capacity: usize,
    ) -> Scheduler {
        let (chat_tx, chat_rx) = sync_channel(capacity);
        let (embed_tx, embed_rx) = sync_channel(capacity);
        let residency = Arc::new(Mutex::new(Residency::default()));
        {
            let (f, l, m, r) = (
                factory.clone(),
                ledger.clone(),
                metrics.clone(),
                residency.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name("favlo-chat".into())
                .spawn(move || chat_worker(chat_rx, f, l, m, r));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the chat worker");
            }
        }
        {
            let (m, r) = (metrics.clone(), residency.clone());
            let spawned = std::thread::Builder::new()
                .name("favlo-embeddings".into())
                .spawn(move || embed_worker(embed_rx, factory, ledger, m, r));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the embeddings worker");
            }
        }
        Scheduler {
            chat: chat_tx,
            embed: embed_tx,
            capacity,
            residency,
            metrics,
        }
    }

    /// Queue capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// What is loaded.
    pub fn residency(&self) -> Residency {
        lock(&self.residency).clone()
    }

    /// Queue a chat job (never blocks).
    pub fn submit_chat(&self, job: ChatJob) -> Result<(), SubmitError> {
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        match self.chat.try_send(ChatMsg::Job(Box::new(job))) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
                Err(match e {
                    TrySendError::Full(_) => SubmitError::Full,
                    TrySendError::Disconnected(_) => SubmitError::Closed,
                })
            }
        }
    }

    /// Queue an embeddings job (never blocks).
    pub fn submit_embed(&self, job: EmbedJob) -> Result<(), SubmitError> {
        self.embed.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full,
            TrySendError::Disconnected(_) => SubmitError::Closed,
        })
    }

    /// Ask the chat worker to close the resident and exit after queued jobs.
    pub fn shutdown(&self) {
        let _ = self.chat.try_send(ChatMsg::Shutdown);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Resident {
    id: String,
    owner: Owner,
    pipe: Box<dyn LanguagePipeline>,
    trie: Option<Arc<TokenTrie>>,
}

fn close_resident(r: Resident, ledger: &Ledger, metrics: &Metrics) {
    let t = Instant::now();
    let Resident {
        id, owner, pipe, ..
    } = r;
    if let Err(e) = pipe.close() {
        tracing::error!(model = %id, error = %e, "closing the resident failed");
    }
    match ledger.sweep(&owner) {
        Ok(_) => tracing::info!(model = %id, owner = %owner.as_str(), "resident closed and swept"),
        Err(e) => {
            Metrics::add(&metrics.leaks, 1);
            tracing::error!(model = %id, error = %e, "resident left memory behind after close");
        }
    }
    metrics
        .last_switch_ms
        .store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
}

fn chat_worker(
    rx: Receiver<ChatMsg>,
    factory: Arc<dyn PipelineFactory>,
    ledger: Arc<Ledger>,
    metrics: Arc<Metrics>,
    residency: Arc<Mutex<Residency>>,
) {
    let mut resident: Option<Resident> = None;
    while let Ok(ChatMsg::Job(job)) = rx.recv() {
        metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        let ChatJob {
            spec,
            mut request,
            format,
            events,
        } = *job;
        if events.is_closed() {
            continue; // the client left while queued
        }
        // Switch if another model is resident.
        if resident.as_ref().is_some_and(|r| r.id != spec.id)
            && let Some(r) = resident.take()
        {
            {
                lock(&residency).resident = None;
                Metrics::add(&metrics.switches, 1);
                close_resident(r, &ledger, &metrics);
            }
        }
        if resident.is_none() {
            let owner = Owner::mint(&spec.family);
            let t = Instant::now();
            let opened = catch_unwind(AssertUnwindSafe(|| {
                factory.open_language(&spec, &ledger, &owner)
            }));
            match opened {
                Ok(Ok(pipe)) => {
                    metrics
                        .last_load_ms
                        .store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                    tracing::info!(model = %spec.id, ms = t.elapsed().as_millis() as u64, "model opened");
                    lock(&residency).resident = Some(spec.id.clone());
                    resident = Some(Resident {
                        id: spec.id.clone(),
                        owner,
                        pipe,
                        trie: None,
                    });
                }
                Ok(Err(e)) => {
                    let _ = ledger.sweep(&owner);
                    let _ = events.send(ChatEvent::Done(Err(e)));
                    continue;
                }
                Err(_) => {
                    let _ = ledger.sweep(&owner);
                    let _ = events.send(ChatEvent::Done(Err(PipelineError::internal(format!(
                        "opening {} panicked",
                        spec.id
                    )))));
                    continue;
                }
            }
        }
        let Some(r) = resident.as_mut() else { continue };
        if let Some((gspec, compiled)) = format {
            match grammar_for(r, gspec, compiled) {
                Ok(g) => request.grammar = Some(g),
                Err(e) => {
                    let _ = events.send(ChatEvent::Done(Err(e)));
                    continue;
                }
            }
        }
        let stop = StopFlag::new();
        let mut sink = ChannelSink {
            tx: events.clone(),
            matcher: StopMatcher::new(&request.stop),
            stop: stop.clone(),
            emitted: String::new(),
        };
        let result = catch_unwind(AssertUnwindSafe(|| {
            r.pipe.complete(&request, &mut sink, &stop)
        }));
        let result = match result {
            Ok(res) => res,
            Err(_) => {
                tracing::error!(model = %r.id, "the pipeline panicked; closing it");
                if let Some(r) = resident.take() {
                    lock(&residency).resident = None;
                    close_resident(r, &ledger, &metrics);
                }
                let _ = events.send(ChatEvent::Done(Err(PipelineError::internal(
                    "pipeline panicked",
                ))));
                continue;
            }
        };
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
                Metrics::add(&metrics.prompt_tokens, c.prompt_tokens as u64);
                Metrics::add(&metrics.completion_tokens, c.completion_tokens as u64);
                Ok(c)
            }
            Err(PipelineError::Closed) => {
                Metrics::add(&metrics.disconnects, 1);
                tracing::info!(model = %spec.id, "client closed the request; generation stopped");
                Err(PipelineError::Closed)
            }
            Err(e) => Err(e),
        };
        let _ = events.send(ChatEvent::Done(result));
    }
    if let Some(r) = resident.take() {
        close_resident(r, &ledger, &metrics);
    }
    lock(&residency).resident = None;
}

fn grammar_for(
    r: &mut Resident,
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

struct ChannelSink {
    tx: mpsc::UnboundedSender<ChatEvent>,
    matcher: StopMatcher,
    stop: StopFlag,
    emitted: String,
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

fn embed_worker(
    rx: Receiver<EmbedJob>,
    factory: Arc<dyn PipelineFactory>,
    ledger: Arc<Ledger>,
    metrics: Arc<Metrics>,
    residency: Arc<Mutex<Residency>>,
) {
    let mut loaded: Option<(String, Owner, Arc<dyn EmbeddingsPipeline>)> = None;
    while let Ok(job) = rx.recv() {
        if job.reply.is_closed() {
            continue;
        }
        if loaded.as_ref().is_some_and(|(id, _, _)| *id != job.spec.id)
            && let Some((id, owner, pipe)) = loaded.take()
        {
            {
                drop(pipe);
                if let Err(e) = ledger.sweep(&owner) {
                    Metrics::add(&metrics.leaks, 1);
                    tracing::error!(model = %id, error = %e, "embeddings model left memory behind");
                }
            }
        }
        if loaded.is_none() {
            let owner = Owner::mint(&job.spec.family);
            let opened = catch_unwind(AssertUnwindSafe(|| {
                factory.open_embeddings(&job.spec, &ledger, &owner)
            }));
            match opened {
                Ok(Ok(p)) => {
                    lock(&residency).embeddings = Some(job.spec.id.clone());
                    loaded = Some((job.spec.id.clone(), owner, p));
                }
                Ok(Err(e)) => {
                    let _ = ledger.sweep(&owner);
                    let _ = job.reply.send(Err(e));
                    continue;
                }
                Err(_) => {
                    let _ = ledger.sweep(&owner);
                    let _ = job
                        .reply
                        .send(Err(PipelineError::internal("opening embeddings panicked")));
                    continue;
                }
            }
        }
        let Some((_, _, pipe)) = loaded.as_ref() else {
            continue;
        };
        let out = catch_unwind(AssertUnwindSafe(|| match &job.input {
            EmbedInput::Texts(t) => {
                let refs: Vec<&str> = t.iter().map(String::as_str).collect();
                pipe.embed_batch(&refs)
            }
            EmbedInput::Tokens(ids) => pipe.embed_tokens(ids),
        }))
        .unwrap_or_else(|_| Err(PipelineError::internal("embeddings pipeline panicked")));
        let out = out.map(|e| (e, pipe.dimensions(), pipe.supports_truncation()));
        let _ = job.reply.send(out);
    }
}
