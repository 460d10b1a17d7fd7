//! The scheduler: one device worker (chat and media share the resident) and
//! an embeddings worker.
//!
//! Key design choice: generation never runs on the async runtime. The device
//! worker is one OS thread that owns the one resident runtime, chat or media,
//! and always serves waiting chats first. A chat that arrives while a media
//! job runs raises the job's preempt flag; the job pauses at its next stage
//! boundary with a host hold, its runtime is closed and swept, the chats run,
//! and the job resumes from the hold once they have drained. A job for
//! another model closes the resident and sweeps its ledger owner (a leak is
//! logged and counted) before the next opens; the same model stays resident.
//! While the machine lock is held by another process the worker closes its
//! resident and runs nothing. Embeddings have their own thread.

mod batch;
mod chat;
mod embed;
mod media;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, TrySendError, channel,
    sync_channel,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use favlo_pipeline::{
    Completion, CompletionRequest, Control, Embedding, GrammarSpec, Ledger, MediaJob, ModelSpec,
    PipelineError, PipelineFactory, TokenLogprob,
};
use tokio::sync::{mpsc, oneshot};

use crate::json::Compiled;
use crate::lock::{LockInfo, MachineLock};
use crate::media::{CancelError, JobRecord, Jobs, MediaStore};
use crate::metrics::Metrics;

/// What the device worker sends back for one request.
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

enum DeviceMsg {
    Chat(Box<ChatJob>),
    Wake,
    Shutdown,
}

/// Handle the routes use to submit work.
pub struct Scheduler {
    device: Sender<DeviceMsg>,
    embed: SyncSender<EmbedJob>,
    capacity: usize,
    shared: Arc<Shared>,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is at capacity.
    Full,
    /// The worker is gone (shutting down).
    Closed,
    /// Another process holds the machine lock.
    Locked(LockInfo),
}

/// State the handle and the workers share.
pub(crate) struct Shared {
    factory: Arc<dyn PipelineFactory>,
    ledger: Arc<Ledger>,
    metrics: Arc<Metrics>,
    residency: Mutex<Residency>,
    /// Media jobs.
    pub(crate) jobs: Arc<Jobs>,
    /// Media files.
    pub(crate) store: MediaStore,
    lock: Option<MachineLock>,
    /// The running media job and its control.
    running: Mutex<Option<(String, Control)>>,
    /// When the running job was first asked to pause.
    preempt_at: Mutex<Option<Instant>>,
    /// Chats submitted and not yet started.
    chats_waiting: AtomicUsize,
    /// A chat or media job is on the device now.
    busy: AtomicBool,
}

/// What the scheduler is given at start.
pub struct SchedulerDeps {
    /// Opens pipelines.
    pub factory: Arc<dyn PipelineFactory>,
    /// The ledger.
    pub ledger: Arc<Ledger>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Waiting chats allowed (429 beyond).
    pub capacity: usize,
    /// Where media files go.
    pub store: MediaStore,
    /// The machine lock, when the daemon honours one.
    pub lock: Option<MachineLock>,
}

impl Scheduler {
    /// Start both workers.
    pub fn start(deps: SchedulerDeps) -> Scheduler {
        let (device_tx, device_rx) = channel();
        let (embed_tx, embed_rx) = sync_channel(deps.capacity);
        let shared = Arc::new(Shared {
            factory: deps.factory,
            ledger: deps.ledger,
            metrics: deps.metrics,
            residency: Mutex::new(Residency::default()),
            jobs: Arc::new(Jobs::default()),
            store: deps.store,
            lock: deps.lock,
            running: Mutex::new(None),
            preempt_at: Mutex::new(None),
            chats_waiting: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
        });
        {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("favlo-device".into())
                .spawn(move || device_worker(device_rx, &s));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the device worker");
            }
        }
        {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("favlo-embeddings".into())
                .spawn(move || {
                    embed::embed_worker(
                        embed_rx,
                        s.factory.clone(),
                        s.ledger.clone(),
                        s.metrics.clone(),
                        &s.residency,
                    )
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the embeddings worker");
            }
        }
        Scheduler {
            device: device_tx,
            embed: embed_tx,
            capacity: deps.capacity,
            shared,
        }
    }

    /// Queue capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// What is loaded.
    pub fn residency(&self) -> Residency {
        lock(&self.shared.residency).clone()
    }

    /// The pipeline factory (media requests are parsed with it before queueing).
    pub fn factory(&self) -> &Arc<dyn PipelineFactory> {
        &self.shared.factory
    }

    /// The media job table.
    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.shared.jobs
    }

    /// The media store.
    pub fn store(&self) -> &MediaStore {
        &self.shared.store
    }

    /// The live holder of the machine lock.
    pub fn locked(&self) -> Option<LockInfo> {
        self.shared.lock.as_ref().and_then(MachineLock::holder)
    }

    /// Requests on or waiting for the device (chats, media jobs).
    pub fn open_requests(&self) -> usize {
        self.shared.chats_waiting.load(Ordering::SeqCst)
            + usize::from(self.shared.busy.load(Ordering::SeqCst))
            + self.shared.jobs.pending()
    }

    /// Queue a chat job (never blocks). Preempts a running media job.
    pub fn submit_chat(&self, job: ChatJob) -> Result<(), SubmitError> {
        let s = &self.shared;
        if s.chats_waiting.fetch_add(1, Ordering::SeqCst) >= self.capacity {
            s.chats_waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Full);
        }
        // Counted first, then the lock is read: an acquire that wrote its file
        // after this check sees this chat as an open request.
        if let Some(holder) = self.locked() {
            s.chats_waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Locked(holder));
        }
        s.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        if let Some((id, control)) = lock(&s.running).as_ref() {
            tracing::info!(job = %id, "chat arrived; pausing the media job at its next stage");
            lock(&s.preempt_at).get_or_insert_with(Instant::now);
            control.preempt();
        }
        if self.device.send(DeviceMsg::Chat(Box::new(job))).is_err() {
            s.chats_waiting.fetch_sub(1, Ordering::SeqCst);
            s.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
            return Err(SubmitError::Closed);
        }
        Ok(())
    }

    /// Queue a parsed media job; its record is returned at once.
    pub fn submit_media(&self, spec: ModelSpec, job: MediaJob) -> Result<JobRecord, SubmitError> {
        if let Some(holder) = self.locked() {
            return Err(SubmitError::Locked(holder));
        }
        let rec = self.shared.jobs.submit(spec, job);
        if self.device.send(DeviceMsg::Wake).is_err() {
            let _ = self.shared.jobs.cancel(&rec.id, false);
            return Err(SubmitError::Closed);
        }
        Ok(rec)
    }

    /// Cancel a media job: at once when waiting or paused, at its next stage
    /// boundary when running.
    pub fn cancel_media(&self, id: &str) -> Result<JobRecord, CancelError> {
        let running = lock(&self.shared.running)
            .as_ref()
            .is_some_and(|(r, _)| r == id);
        let rec = self.shared.jobs.cancel(id, running)?;
        let _ = self.device.send(DeviceMsg::Wake);
        Ok(rec)
    }

    /// Queue an embeddings job (never blocks).
    pub fn submit_embed(&self, job: EmbedJob) -> Result<(), SubmitError> {
        self.embed.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full,
            TrySendError::Disconnected(_) => SubmitError::Closed,
        })
    }

    /// Ask the device worker to close the resident and exit after queued chats.
    pub fn shutdown(&self) {
        if let Some((_, c)) = lock(&self.shared.running).as_ref() {
            c.preempt();
        }
        let _ = self.device.send(DeviceMsg::Shutdown);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The runtime on the device.
enum Resident {
    Chat(chat::ChatResident),
    Media(media::MediaResident),
}

impl Resident {
    fn id(&self) -> &str {
        match self {
            Resident::Chat(c) => &c.id,
            Resident::Media(m) => &m.id,
        }
    }
}

fn close_resident(r: Resident, s: &Shared) {
    let t = Instant::now();
    lock(&s.residency).resident = None;
    let (id, owner, closed) = match r {
        Resident::Chat(c) => (c.id, c.owner, c.pipe.close()),
        Resident::Media(m) => (m.id, m.owner, m.pipe.close()),
    };
    if let Err(e) = closed {
        tracing::error!(model = %id, error = %e, "closing the resident failed");
    }
    match s.ledger.sweep(&owner) {
        Ok(_) => tracing::info!(model = %id, owner = %owner.as_str(), "resident closed and swept"),
        Err(e) => {
            Metrics::add(&s.metrics.leaks, 1);
            tracing::error!(model = %id, error = %e, "resident left memory behind after close");
        }
    }
    s.metrics
        .last_switch_ms
        .store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
}

/// Close the resident unless it is `id`.
fn switch_to(resident: &mut Option<Resident>, id: &str, s: &Shared) {
    if resident.as_ref().is_some_and(|r| r.id() != id)
        && let Some(r) = resident.take()
    {
        Metrics::add(&s.metrics.switches, 1);
        close_resident(r, s);
    }
}

/// Moves what has arrived on the worker's channel into `chats` without waiting;
/// `shutdown` once the server asks or the channel is gone.
fn drain_channel(
    rx: &Receiver<DeviceMsg>,
    chats: &mut VecDeque<Box<ChatJob>>,
    shutdown: &mut bool,
) {
    loop {
        match rx.try_recv() {
            Ok(DeviceMsg::Chat(j)) => chats.push_back(j),
            Ok(DeviceMsg::Wake) => {}
            Ok(DeviceMsg::Shutdown) | Err(TryRecvError::Disconnected) => {
                *shutdown = true;
                break;
            }
            Err(TryRecvError::Empty) => break,
        }
    }
}

/// The front chat, taken off the queue and out of the waiting counts.
fn take_chat(chats: &mut VecDeque<Box<ChatJob>>, s: &Shared) -> Option<Box<ChatJob>> {
    let job = chats.pop_front()?;
    s.chats_waiting.fetch_sub(1, Ordering::SeqCst);
    s.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
    Some(job)
}

fn device_worker(rx: Receiver<DeviceMsg>, s: &Shared) {
    let mut resident: Option<Resident> = None;
    let mut chats: VecDeque<Box<ChatJob>> = Default::default();
    let mut shutdown = false;
    let mut last_lock_check = Instant::now() - Duration::from_secs(1);
    loop {
        drain_channel(&rx, &mut chats, &mut shutdown);
        if last_lock_check.elapsed() >= Duration::from_millis(200) {
            last_lock_check = Instant::now();
            if let Some(holder) = s.lock.as_ref().and_then(MachineLock::holder) {
                if let Some(r) = resident.take() {
                    tracing::info!(pid = holder.pid, command = %holder.command, "machine lock taken; closing the resident");
                    close_resident(r, s);
                }
                if chats.is_empty() {
                    if shutdown {
                        break;
                    }
                    match rx.recv_timeout(Duration::from_millis(250)) {
                        Ok(DeviceMsg::Chat(j)) => chats.push_back(j),
                        Ok(DeviceMsg::Wake) | Err(RecvTimeoutError::Timeout) => {}
                        Ok(DeviceMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                            shutdown = true
                        }
                    }
                    continue;
                }
            }
        }
        if let Some(job) = take_chat(&mut chats, s) {
            s.busy.store(true, Ordering::SeqCst);
            // A resident model that decodes several chats together takes this one and
            // those that join it while it runs (`batch.rs`).
            if chat::batch_room(&resident, &job.spec.id) > 1 && job.format.is_none() {
                batch::serve(*job, &mut chats, &rx, &mut shutdown, &mut resident, s);
            } else {
                chat::run(*job, &mut resident, s);
            }
            s.busy.store(false, Ordering::SeqCst);
            continue;
        }
        if shutdown {
            break;
        }
        if let Some(run) = s.jobs.start_next() {
            s.busy.store(true, Ordering::SeqCst);
            media::run(run, &mut resident, s);
            s.busy.store(false, Ordering::SeqCst);
            continue;
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(DeviceMsg::Chat(j)) => chats.push_back(j),
            Ok(DeviceMsg::Wake) | Err(RecvTimeoutError::Timeout) => {}
            Ok(DeviceMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => shutdown = true,
        }
    }
    if let Some(r) = resident.take() {
        close_resident(r, s);
    }
}
