//! Chats of the resident model decoded together: the device worker's queue handed to
//! the pipeline as its `ChatQueue` (`LanguagePipeline::serve_chats`).
//!
//! Key design choice: the queue stays strictly first come, first served. A waiting
//! chat joins the running batch (between two decode steps, when a sequence is free)
//! only when it is at the front of the queue and is for the resident model without a
//! `response_format`; otherwise the batch drains and the worker goes on with the
//! front chat as before. Each chat's sink lives behind a mutex the queue keeps too,
//! so when the pipeline hands a chat back the queue finishes it (stop-string tail,
//! metrics, `Done`) exactly as a chat served alone.

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use favlo_pipeline::{
    ChatQueue, Completion, PipelineError, QueuedChat, RequestClosed, TokenLogprob, TokenSink,
};
use tokio::sync::mpsc;

use super::chat::{ChannelSink, finish, run};
use super::{
    ChatEvent, ChatJob, DeviceMsg, Resident, Shared, close_resident, drain_channel, lock, take_chat,
};

/// A chat the pipeline holds: where its events go, and its sink's state.
struct Active {
    events: mpsc::UnboundedSender<ChatEvent>,
    sink: Arc<Mutex<ChannelSink>>,
}

/// The sink the pipeline writes to: the queue's `ChannelSink`, shared.
struct SharedSink(Arc<Mutex<ChannelSink>>);

impl TokenSink for SharedSink {
    fn token(&mut self, piece: &str, logprob: Option<TokenLogprob>) -> Result<(), RequestClosed> {
        lock(&self.0).token(piece, logprob)
    }
}

/// The worker's queue of chats, as the pipeline sees it.
struct WorkerQueue<'a> {
    /// The resident model's id.
    id: String,
    first: Option<ChatJob>,
    chats: &'a mut VecDeque<Box<ChatJob>>,
    rx: &'a Receiver<DeviceMsg>,
    shutdown: &'a mut bool,
    s: &'a Shared,
    active: HashMap<u64, Active>,
    next_tag: u64,
}

impl WorkerQueue<'_> {
    /// The front chat, when it may join: this model's, no `response_format`.
    fn take_front(&mut self) -> Option<ChatJob> {
        drain_channel(self.rx, self.chats, self.shutdown);
        let front = self.chats.front()?;
        if front.spec.id != self.id || front.format.is_some() {
            return None;
        }
        take_chat(self.chats, self.s).map(|j| *j)
    }
}

impl ChatQueue for WorkerQueue<'_> {
    fn next(&mut self) -> Option<QueuedChat> {
        loop {
            let job = match self.first.take() {
                Some(j) => j,
                None => self.take_front()?,
            };
            if job.events.is_closed() {
                continue; // the client left while queued
            }
            let sink = Arc::new(Mutex::new(ChannelSink::new(&job.events, &job.request)));
            let stop = lock(&sink).stop.clone();
            let tag = self.next_tag;
            self.next_tag += 1;
            self.active.insert(
                tag,
                Active {
                    events: job.events,
                    sink: Arc::clone(&sink),
                },
            );
            return Some(QueuedChat {
                tag,
                request: job.request,
                sink: Box::new(SharedSink(sink)),
                stop,
            });
        }
    }

    fn done(&mut self, chat: QueuedChat, result: Result<Completion, PipelineError>) {
        let Some(a) = self.active.remove(&chat.tag) else {
            return;
        };
        drop(chat);
        finish(result, &mut lock(&a.sink), &a.events, &self.id, self.s);
    }
}

/// Serves `first` (a chat of the resident model, `max_batch` > 1, no `response_format`)
/// and the chats that may join it, through the pipeline's `serve_chats`.
pub(super) fn serve(
    first: ChatJob,
    chats: &mut VecDeque<Box<ChatJob>>,
    rx: &Receiver<DeviceMsg>,
    shutdown: &mut bool,
    resident: &mut Option<Resident>,
    s: &Shared,
) {
    let id = first.spec.id.clone();
    let Some(Resident::Chat(r)) = resident.as_mut().filter(|r| r.id() == id) else {
        run(first, resident, s);
        return;
    };
    let mut q = WorkerQueue {
        id: id.clone(),
        first: Some(first),
        chats,
        rx,
        shutdown,
        s,
        active: HashMap::new(),
        next_tag: 0,
    };
    let served = catch_unwind(AssertUnwindSafe(|| r.pipe.serve_chats(&mut q)));
    let why = match served {
        Ok(()) => "the pipeline returned before this chat ended",
        Err(_) => {
            tracing::error!(model = %id, "the pipeline panicked; closing it");
            "pipeline panicked"
        }
    };
    // Chats the pipeline never handed back get an error, not a hang.
    let left: Vec<Active> = q.active.drain().map(|(_, a)| a).collect();
    for a in &left {
        let _ = a
            .events
            .send(ChatEvent::Done(Err(PipelineError::internal(why))));
    }
    if served.is_err()
        && let Some(r) = resident.take()
    {
        close_resident(r, s);
    }
}
