//! The embeddings worker: its own thread and its own loaded model.
//!
//! Key design choice: embeddings never touch the device resident, so a RAG
//! tool's thousand calls neither close a chat model nor pause a media job.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use favlo_pipeline::{EmbeddingsPipeline, Ledger, Owner, PipelineError, PipelineFactory};

use super::{EmbedInput, EmbedJob, Residency, lock};
use crate::metrics::Metrics;

pub(super) fn embed_worker(
    rx: Receiver<EmbedJob>,
    factory: Arc<dyn PipelineFactory>,
    ledger: Arc<Ledger>,
    metrics: Arc<Metrics>,
    residency: &Mutex<Residency>,
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
                    lock(residency).embeddings = Some(job.spec.id.clone());
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
