//! `POST /v1/audio/speech`: OpenAI's text-to-speech route over a voice media job.
//!
//! Key design choice: the route is a thin client of the media engine, like an
//! inline MCP call: the request becomes a voice job (same queue, same
//! preemption, same saved file), the reply is the served file's bytes. Unlike
//! MCP, the HTTP request owns its job: a client that disconnects cancels it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use favlo_pipeline::{MediaKind, ModelKind};
use serde_json::{Map, Value};

use super::fields::object;
use super::resolve_model;
use crate::AppState;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::media::JobStatus;
use crate::scheduler::SubmitError;

/// Formats this route can return.
const FORMATS: [&str; 2] = ["wav", "flac"];

/// Cancels the job when the request future is dropped before it finished.
struct CancelOnDrop {
    state: Arc<AppState>,
    id: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed && self.state.scheduler.cancel_media(&self.id).is_ok() {
            tracing::info!(job = %self.id, "speech client went away; job cancelled");
        }
    }
}

fn voice_model(state: &AppState, body: &Map<String, Value>) -> Result<String, ApiError> {
    let named = |key: &str| -> Result<Option<String>, ApiError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::invalid(
                format!("{key} must be a string"),
                Some(key),
            )),
        }
    };
    let model = named("model")?;
    let voice = named("voice")?;
    // One read of the registry (rows may touch the disk).
    let rows = state.catalog.rows();
    let kind_of = |id: &str| rows.iter().find(|r| r.id == id).map(|r| r.kind);
    // `voice` may name a voice model row; OpenAI voice names ("alloy") are
    // accepted and mean the model's own voice.
    for candidate in [voice.as_deref(), model.as_deref()].into_iter().flatten() {
        if kind_of(candidate) == Some(ModelKind::Voice) {
            return Ok(candidate.to_string());
        }
    }
    match model {
        Some(m) if kind_of(&m).is_some() => Ok(m), // wrong kind: resolve_model says so
        Some(m) if !m.starts_with("tts-") && !m.starts_with("gpt-") => {
            Err(ApiError::model_not_found(&m))
        }
        _ => rows
            .iter()
            .find(|r| r.kind == ModelKind::Voice)
            .map(|r| r.id.clone())
            .ok_or_else(|| ApiError::invalid("no voice model is installed", Some("model"))),
    }
}

/// The handler.
pub async fn speech(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson,
) -> Result<Response, ApiError> {
    let body = object(&body)?.clone();
    let format = match body.get("response_format") {
        None | Some(Value::Null) => "wav".to_string(),
        Some(Value::String(s)) if FORMATS.contains(&s.as_str()) => s.clone(),
        Some(Value::String(s)) => {
            return Err(ApiError::invalid(
                format!("response_format {s} is not supported; use wav or flac"),
                Some("response_format"),
            ));
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "response_format must be a string",
                Some("response_format"),
            ));
        }
    };
    let input = match body.get("input") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => return Err(ApiError::invalid("input must be a string", Some("input"))),
    };
    let s2 = state.clone();
    let b2 = body.clone();
    let model = tokio::task::spawn_blocking(move || voice_model(&s2, &b2))
        .await
        .map_err(ApiError::internal)??;
    let spec = resolve_model(&state, &model, ModelKind::Voice).await?;
    let mut job_body = serde_json::Map::new();
    job_body.insert("text".into(), Value::String(input));
    job_body.insert("response_format".into(), Value::String(format.clone()));
    for key in ["speed", "seed", "noise_scale", "length_scale", "noise_w"] {
        if let Some(v) = body.get(key) {
            job_body.insert(key.into(), v.clone());
        }
    }
    let id = crate::media::jobs::mint_id(MediaKind::Voice);
    let factory = state.scheduler.factory().clone();
    let (spec, job) = {
        let id = id.clone();
        let b = Value::Object(job_body);
        tokio::task::spawn_blocking(move || {
            let job = factory.parse_media(&spec, &id, &b);
            (spec, job)
        })
        .await
        .map_err(ApiError::internal)?
    };
    let rec = state
        .scheduler
        .submit_media(spec, job?)
        .map_err(|e| match e {
            SubmitError::Locked(h) => ApiError::unavailable(
                format!(
                    "the machine is locked by pid {} ({}); try again after `favlo lock release`",
                    h.pid, h.command
                ),
                "machine_locked",
            ),
            _ => ApiError::unavailable("the server is shutting down", "shutting_down"),
        })?;
    let mut guard = CancelOnDrop {
        state: state.clone(),
        id: rec.id.clone(),
        armed: true,
    };
    let done = state
        .scheduler
        .jobs()
        .wait(&rec.id)
        .await
        .ok_or_else(|| ApiError::internal("the speech job disappeared"))?;
    guard.armed = false;
    match done.status {
        JobStatus::Completed => {}
        _ => {
            let e = done.error.unwrap_or(crate::media::jobs::JobError {
                message: "the speech job was cancelled".into(),
                kind: "server_error".into(),
            });
            return Err(if e.kind == "invalid_request_error" {
                ApiError::invalid(e.message, Some("input"))
            } else {
                ApiError::internal(e.message)
            });
        }
    }
    let store = state.scheduler.store().clone();
    let id = rec.id.clone();
    let (bytes, mime) =
        tokio::task::spawn_blocking(move || store.read(MediaKind::Voice, &id, Some(&format)))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?;
    Ok((
        [
            (header::CONTENT_TYPE, mime.to_string()),
            (
                header::HeaderName::from_static("x-favlo-job"),
                rec.id.clone(),
            ),
        ],
        bytes,
    )
        .into_response())
}
