//! Running one media job on the device worker, until it ends or pauses.
//!
//! Key design choice: the job's `generate` runs on the device thread while a
//! small watcher thread copies its stage counter into the job record, so
//! `media_status` shows progress without the pipeline knowing about the
//! table. A preempted job's hold goes back into the table and its runtime is
//! closed and swept here, before the chat that asked for the device opens.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use favlo_pipeline::{MediaError, MediaPaused, MediaPipeline, Owner, PipelineError};

use super::{Resident, Shared, close_resident, lock, switch_to};
use crate::media::jobs::Runnable;

/// A resident media model.
pub(super) struct MediaResident {
    pub(super) id: String,
    pub(super) owner: Owner,
    pub(super) pipe: Box<dyn MediaPipeline>,
}

/// Open the job's model unless it is resident.
fn ensure_open(
    run: &Runnable,
    resident: &mut Option<Resident>,
    s: &Shared,
) -> Result<(), PipelineError> {
    switch_to(resident, &run.spec.id, s);
    if matches!(resident, Some(Resident::Media(_))) {
        return Ok(());
    }
    if let Some(r) = resident.take() {
        close_resident(r, s);
    }
    let owner = Owner::mint(&run.spec.family);
    let t = Instant::now();
    let opened = catch_unwind(AssertUnwindSafe(|| {
        s.factory.open_media(&run.spec, &s.ledger, &owner)
    }));
    match opened {
        Ok(Ok(pipe)) => {
            tracing::info!(model = %run.spec.id, ms = t.elapsed().as_millis() as u64, "media model opened");
            s.metrics
                .last_load_ms
                .store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
            lock(&s.residency).resident = Some(run.spec.id.clone());
            *resident = Some(Resident::Media(MediaResident {
                id: run.spec.id.clone(),
                owner,
                pipe,
            }));
            Ok(())
        }
        Ok(Err(e)) => {
            let _ = s.ledger.sweep(&owner);
            Err(e)
        }
        Err(_) => {
            let _ = s.ledger.sweep(&owner);
            Err(PipelineError::internal(format!(
                "opening {} panicked",
                run.spec.id
            )))
        }
    }
}

/// Run (or resume) one job until it completes, pauses, is cancelled or fails.
pub(super) fn run(run: Runnable, resident: &mut Option<Resident>, s: &Shared) {
    let id = run.job.id.clone();
    let t_open = Instant::now();
    if let Err(e) = ensure_open(&run, resident, s) {
        s.jobs.fail(&id, &e);
        return;
    }
    if run.hold.is_some() {
        s.jobs.resumed(&id, t_open.elapsed().as_millis() as u64);
    }
    let Some(Resident::Media(m)) = resident.as_mut() else {
        s.jobs
            .fail(&id, &PipelineError::internal("media resident missing"));
        return;
    };
    s.jobs.set_stages(&id, m.pipe.stages(&run.job));
    *lock(&s.preempt_at) = None;
    *lock(&s.running) = Some((id.clone(), run.control.clone()));
    // A chat that was counted before the control was published.
    if s.chats_waiting.load(Ordering::SeqCst) > 0 {
        lock(&s.preempt_at).get_or_insert_with(Instant::now);
        run.control.preempt();
    }
    let resumed = run.hold.as_ref().map(|h| h.stage);
    tracing::info!(job = %id, model = %run.spec.id, resumed_at = ?resumed, "media job running");
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                s.jobs.tick(&id);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = catch_unwind(AssertUnwindSafe(|| {
            m.pipe.generate(&run.job, run.hold, &run.control)
        }));
        done.store(true, Ordering::Release);
        r
    });
    *lock(&s.running) = None;
    let pause_ms = lock(&s.preempt_at)
        .take()
        .map(|t| t.elapsed().as_millis() as u64);
    s.jobs.tick(&id);
    match result {
        Ok(Ok(output)) => {
            let saved = m.pipe.pack(&run.job, output).and_then(|file| {
                s.store
                    .save(run.job.kind, &id, &file)
                    .map_err(|e| PipelineError::internal(e.to_string()))
            });
            match saved {
                Ok(exts) => {
                    tracing::info!(job = %id, files = ?exts, "media job completed");
                    s.jobs.complete(&id);
                }
                Err(e) => s.jobs.fail(&id, &e),
            }
        }
        Ok(Err(MediaError::Paused(MediaPaused::Preempt(hold)))) => {
            tracing::info!(job = %id, stage = hold.stage, pause_ms = ?pause_ms, "media job paused for a chat; closing its runtime");
            s.jobs.pause(&id, hold, pause_ms);
            if let Some(r) = resident.take() {
                close_resident(r, s);
            }
        }
        Ok(Err(MediaError::Paused(MediaPaused::Cancel))) => {
            tracing::info!(job = %id, "media job cancelled");
            s.jobs.cancelled(&id);
        }
        Ok(Err(MediaError::Failed(e))) => s.jobs.fail(&id, &e),
        Err(_) => {
            tracing::error!(job = %id, "the media pipeline panicked; closing it");
            s.jobs
                .fail(&id, &PipelineError::internal("media pipeline panicked"));
            if let Some(r) = resident.take() {
                close_resident(r, s);
            }
        }
    }
}
