//! The media job table: records MCP reads, queue order, holds of paused jobs.
//!
//! Key design choice: one mutex-guarded table is the only truth about a job.
//! The device worker moves a job through `queued → in_progress → completed |
//! failed | cancelled`; a preempted job stays `in_progress` at the head of the
//! queue with its host hold; waiters (an inline `tools/call`) watch the
//! record through a `watch` channel instead of polling. A record carries the
//! keys clients read (`size`, `seconds`, `response_format`) and never a path
//! or bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use favlo_pipeline::{Control, MediaHold, MediaJob, MediaKind, ModelSpec, PipelineError};
use serde::Serialize;
use tokio::sync::watch;

use crate::media::store::kind_dir;

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for the device.
    Queued,
    /// Running, or paused by a chat (same id, resumes by itself).
    InProgress,
    /// The file is saved.
    Completed,
    /// It failed; `error` says why.
    Failed,
    /// Cancelled; nothing is kept.
    Cancelled,
}

impl JobStatus {
    /// No further change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// `stage` of `stages` finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Stages finished.
    pub stage: usize,
    /// Stages in all, once the pipeline has said.
    pub stages: Option<usize>,
}

/// A failure as MCP shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobError {
    /// What happened.
    pub message: String,
    /// `invalid_request_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The public job record (`media_status`, `tasks/get`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobRecord {
    /// Job id (also the MCP task id and the file stem).
    pub id: String,
    /// `image`, `video`, `music`, `voice`.
    pub kind: MediaKind,
    /// The model row.
    pub model: String,
    /// Where it is.
    pub status: JobStatus,
    /// Stage counter.
    pub progress: Progress,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of the last change.
    pub updated_at: u64,
    /// Paused right now: a chat has the device; it resumes by itself.
    pub paused: bool,
    /// Times a chat paused it.
    pub preemptions: u32,
    /// Last pause: milliseconds from the chat's preempt request to the job
    /// standing paused at a stage boundary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_latency_ms: Option<u64>,
    /// Last resume: milliseconds to reopen the runtime before the job went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_ms: Option<u64>,
    /// Set when failed.
    pub error: Option<JobError>,
    /// `favlo://<kind>/<id>` once completed.
    pub resource: Option<String>,
    /// Requested size (images, video).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Requested length (video, music, voice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Requested download format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<String>,
    /// The seed the output came from (resolved when the request had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl JobRecord {
    /// `image`, `video`, `music` or `voice`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            MediaKind::Image => "image",
            MediaKind::Video => "video",
            MediaKind::Music => "music",
            MediaKind::Voice => "voice",
        }
    }
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh job id: kind prefix, clock and a process counter (`[a-z0-9-]`).
pub fn mint_id(kind: MediaKind) -> String {
    let prefix = match kind {
        MediaKind::Image => "img",
        MediaKind::Video => "vid",
        MediaKind::Music => "mus",
        MediaKind::Voice => "voc",
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!(
        "{prefix}-{ms:x}-{:04x}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Unix seconds now.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

struct Entry {
    record: JobRecord,
    job: MediaJob,
    spec: ModelSpec,
    hold: Option<MediaHold>,
    control: Control,
    /// Stage count when the current run started (from the hold).
    base: usize,
    tx: watch::Sender<JobRecord>,
}

/// What the worker needs to run a job.
pub struct Runnable {
    /// The row.
    pub spec: ModelSpec,
    /// The job.
    pub job: MediaJob,
    /// The hold to resume from.
    pub hold: Option<MediaHold>,
    /// Its control flags (shared with the table, so cancel reaches it).
    pub control: Control,
}

/// Why a cancel did nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No such job.
    Unknown,
    /// It already finished with this status.
    Finished(JobStatus),
}

#[derive(Default)]
struct Table {
    entries: HashMap<String, Entry>,
    queue: VecDeque<String>,
}

/// All jobs of this daemon.
#[derive(Default)]
pub struct Jobs {
    table: Mutex<Table>,
}

fn lock(m: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn touch(e: &mut Entry) {
    e.record.updated_at = now_s();
    e.tx.send_replace(e.record.clone());
}

impl Jobs {
    /// Add a parsed job at the back of the queue.
    pub fn submit(&self, spec: ModelSpec, job: MediaJob) -> JobRecord {
        let p = &job.params;
        let now = now_s();
        let record = JobRecord {
            id: job.id.clone(),
            kind: job.kind,
            model: spec.id.clone(),
            status: JobStatus::Queued,
            progress: Progress::default(),
            created_at: now,
            updated_at: now,
            paused: false,
            preemptions: 0,
            pause_latency_ms: None,
            resume_ms: None,
            error: None,
            resource: None,
            size: p.get("size").and_then(|v| v.as_str()).map(str::to_owned),
            seconds: p.get("seconds").and_then(serde_json::Value::as_f64),
            response_format: p
                .get("response_format")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            seed: p.get("seed").and_then(serde_json::Value::as_u64),
        };
        let (tx, _) = watch::channel(record.clone());
        let mut t = lock(&self.table);
        t.queue.push_back(job.id.clone());
        t.entries.insert(
            job.id.clone(),
            Entry {
                record: record.clone(),
                job,
                spec,
                hold: None,
                control: Control::new(),
                base: 0,
                tx,
            },
        );
        record
    }

    /// A job's record.
    pub fn get(&self, id: &str) -> Option<JobRecord> {
        lock(&self.table).entries.get(id).map(|e| e.record.clone())
    }

    /// Every record, newest first.
    pub fn list(&self) -> Vec<JobRecord> {
        let mut v: Vec<JobRecord> = lock(&self.table)
            .entries
            .values()
            .map(|e| e.record.clone())
            .collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        v
    }

    /// Watch a job's record change.
    pub fn watch(&self, id: &str) -> Option<watch::Receiver<JobRecord>> {
        lock(&self.table).entries.get(id).map(|e| e.tx.subscribe())
    }

    /// Wait until the job reaches a terminal status (`None`: no such job).
    pub async fn wait(&self, id: &str) -> Option<JobRecord> {
        let mut rx = self.watch(id)?;
        loop {
            let rec = rx.borrow_and_update().clone();
            if rec.status.is_terminal() {
                return Some(rec);
            }
            if rx.changed().await.is_err() {
                return self.get(id);
            }
        }
    }

    /// Jobs waiting or paused.
    pub fn pending(&self) -> usize {
        lock(&self.table).queue.len()
    }

    /// Take the head of the queue to run: marks it `in_progress`, hands out
    /// its hold. `None` when nothing waits.
    pub fn start_next(&self) -> Option<Runnable> {
        let mut t = lock(&self.table);
        while let Some(id) = t.queue.front().cloned() {
            let Some(e) = t.entries.get_mut(&id) else {
                t.queue.pop_front();
                continue;
            };
            if e.record.status.is_terminal() {
                t.queue.pop_front();
                continue;
            }
            e.control = fresh(&e.control);
            e.record.status = JobStatus::InProgress;
            e.record.paused = false;
            e.base = e.hold.as_ref().map_or(0, |h| h.stage);
            touch(e);
            return Some(Runnable {
                spec: e.spec.clone(),
                job: e.job.clone(),
                hold: e.hold.take(),
                control: e.control.clone(),
            });
        }
        None
    }

    /// The pipeline told how many stages the job has.
    pub fn set_stages(&self, id: &str, stages: Option<usize>) {
        if let Some(e) = lock(&self.table).entries.get_mut(id) {
            e.record.progress.stages = stages;
            touch(e);
        }
    }

    /// Refresh the stage counter from the running control.
    pub fn tick(&self, id: &str) {
        if let Some(e) = lock(&self.table).entries.get_mut(id) {
            let stage = e.base + e.control.passed();
            if stage != e.record.progress.stage {
                e.record.progress.stage = stage;
                touch(e);
            }
        }
    }

    /// A resumed run reopened its runtime in `ms`.
    pub fn resumed(&self, id: &str, ms: u64) {
        if let Some(e) = lock(&self.table).entries.get_mut(id) {
            e.record.resume_ms = Some(ms);
            touch(e);
        }
    }

    /// Preempted: keep the hold, stay `in_progress` at the head.
    pub fn pause(&self, id: &str, hold: MediaHold, latency_ms: Option<u64>) {
        let mut t = lock(&self.table);
        if let Some(e) = t.entries.get_mut(id) {
            if e.control.signal() == Some(favlo_pipeline::Signal::Cancel) {
                e.record.status = JobStatus::Cancelled;
                touch(e);
                t.queue.retain(|q| q != id);
                return;
            }
            e.record.progress.stage = hold.stage;
            e.record.preemptions += 1;
            e.record.paused = true;
            e.record.pause_latency_ms = latency_ms;
            e.hold = Some(hold);
            touch(e);
        }
    }

    /// Finished and saved.
    pub fn complete(&self, id: &str) {
        let mut t = lock(&self.table);
        if let Some(e) = t.entries.get_mut(id) {
            e.record.status = JobStatus::Completed;
            if let Some(n) = e.record.progress.stages {
                e.record.progress.stage = n;
            }
            e.record.resource = Some(format!("favlo://{}/{id}", kind_dir(e.record.kind)));
            touch(e);
        }
        t.queue.retain(|q| q != id);
    }

    /// Failed with `err`.
    pub fn fail(&self, id: &str, err: &PipelineError) {
        let (message, kind) = match err {
            PipelineError::InvalidRequest { message, .. } => {
                (message.clone(), "invalid_request_error")
            }
            PipelineError::DoesNotFit { .. } => (err.to_string(), "server_error"),
            other => {
                tracing::error!(job = %id, error = %other, "media job failed");
                (
                    "the job failed; the server log has the details".to_string(),
                    "server_error",
                )
            }
        };
        let mut t = lock(&self.table);
        if let Some(e) = t.entries.get_mut(id) {
            e.record.status = JobStatus::Failed;
            e.record.error = Some(JobError {
                message,
                kind: kind.into(),
            });
            e.hold = None;
            touch(e);
        }
        t.queue.retain(|q| q != id);
    }

    /// The running job saw the cancel flag.
    pub fn cancelled(&self, id: &str) {
        let mut t = lock(&self.table);
        if let Some(e) = t.entries.get_mut(id) {
            e.record.status = JobStatus::Cancelled;
            e.hold = None;
            touch(e);
        }
        t.queue.retain(|q| q != id);
    }

    /// Cancel: a waiting or paused job ends now (its hold dropped); a running
    /// one gets the flag and ends at its next stage boundary.
    pub fn cancel(&self, id: &str, running: bool) -> Result<JobRecord, CancelError> {
        let mut t = lock(&self.table);
        let e = t.entries.get_mut(id).ok_or(CancelError::Unknown)?;
        if e.record.status.is_terminal() {
            return Err(CancelError::Finished(e.record.status));
        }
        e.control.cancel();
        if !running {
            e.record.status = JobStatus::Cancelled;
            e.record.paused = false;
            e.hold = None;
            touch(e);
            let rec = e.record.clone();
            t.queue.retain(|q| q != id);
            return Ok(rec);
        }
        Ok(e.record.clone())
    }

    /// Drop a job (its files expired). A running job is left alone.
    pub fn forget(&self, id: &str) {
        let mut t = lock(&self.table);
        if t.entries
            .get(id)
            .is_some_and(|e| e.record.status.is_terminal())
        {
            t.entries.remove(id);
        }
    }

    /// Drop terminal jobs last changed before `cutoff` (unix seconds).
    pub fn forget_older(&self, cutoff: u64) -> usize {
        let mut t = lock(&self.table);
        let before = t.entries.len();
        t.entries
            .retain(|_, e| !(e.record.status.is_terminal() && e.record.updated_at < cutoff));
        before - t.entries.len()
    }
}

/// A control with the same cancel state as `old` but a fresh boundary count
/// and preempt flag (a resumed run counts from its hold's stage).
fn fresh(old: &Control) -> Control {
    let c = Control::new();
    if old.signal() == Some(favlo_pipeline::Signal::Cancel) {
        c.cancel();
    }
    c
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec() -> ModelSpec {
        ModelSpec {
            id: "m".into(),
            family: "f".into(),
            kind: favlo_pipeline::ModelKind::Image,
            dir: "/x".into(),
            files: vec![],
            context_length: None,
            defaults: serde_json::json!({}),
        }
    }

    fn job(id: &str) -> MediaJob {
        MediaJob {
            id: id.into(),
            kind: MediaKind::Image,
            params: serde_json::json!({"size": "64x64", "seed": 7, "response_format": "png"}),
        }
    }

    #[test]
    fn lifecycle_pause_resume_complete() {
        let jobs = Jobs::default();
        let rec = jobs.submit(spec(), job("a"));
        assert_eq!(rec.status, JobStatus::Queued);
        assert_eq!(rec.size.as_deref(), Some("64x64"));
        jobs.submit(spec(), job("b"));
        let r = jobs.start_next().unwrap();
        assert_eq!(r.job.id, "a");
        assert_eq!(jobs.get("a").unwrap().status, JobStatus::InProgress);
        jobs.pause(
            "a",
            MediaHold {
                stage: 2,
                state: Box::new(5u32),
            },
            Some(3),
        );
        let rec = jobs.get("a").unwrap();
        assert_eq!(
            (rec.status, rec.progress.stage, rec.preemptions),
            (JobStatus::InProgress, 2, 1)
        );
        // The paused job is resumed before the next queued one, with its hold.
        let r = jobs.start_next().unwrap();
        assert_eq!(r.job.id, "a");
        assert_eq!(r.hold.unwrap().stage, 2);
        assert!(!jobs.get("a").unwrap().paused);
        jobs.set_stages("a", Some(5));
        jobs.complete("a");
        let rec = jobs.get("a").unwrap();
        assert_eq!(rec.status, JobStatus::Completed);
        assert_eq!(rec.progress.stage, 5);
        assert_eq!(rec.resource.as_deref(), Some("favlo://images/a"));
        assert_eq!(jobs.start_next().unwrap().job.id, "b");
    }

    #[test]
    fn cancel_waiting_and_finished() {
        let jobs = Jobs::default();
        jobs.submit(spec(), job("a"));
        let mut w = jobs.watch("a").unwrap();
        let rec = jobs.cancel("a", false).unwrap();
        assert_eq!(rec.status, JobStatus::Cancelled);
        assert!(w.has_changed().unwrap());
        assert_eq!(w.borrow_and_update().status, JobStatus::Cancelled);
        assert!(jobs.start_next().is_none());
        assert_eq!(
            jobs.cancel("a", false),
            Err(CancelError::Finished(JobStatus::Cancelled))
        );
        assert_eq!(jobs.cancel("zz", false), Err(CancelError::Unknown));
        // A failed job reports its error without internals.
        jobs.submit(spec(), job("c"));
        jobs.fail("c", &PipelineError::internal("secret detail"));
        let e = jobs.get("c").unwrap().error.unwrap();
        assert!(!e.message.contains("secret"));
        assert_eq!(e.kind, "server_error");
        assert_eq!(jobs.forget_older(u64::MAX), 2);
    }
}
