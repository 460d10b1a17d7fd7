//! The MCP tools: their schemas, and what a call does.
//!
//! Key design choice: a generate tool validates its arguments with the
//! pipeline's own parser before anything is queued (a bad argument is a
//! JSON-RPC invalid-params error and no job exists), then either hands the
//! client a task to poll (when it declared the tasks extension) or waits for
//! the job on the same call. Waiting never owns the job: a client that goes
//! away leaves it running, to be read or cancelled later.

use std::sync::Arc;

use base64::Engine;
use favlo_pipeline::{MediaKind, ModelKind};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::{Value, json};

use super::wire;
use crate::AppState;
use crate::media::store::kind_dir;
use crate::media::{CancelError, JobRecord, JobStatus};
use crate::scheduler::SubmitError;

/// What a generate tool makes.
pub(super) struct GenerateTool {
    pub name: &'static str,
    pub kind: MediaKind,
    pub model_kind: ModelKind,
    pub about: &'static str,
    pub schema: fn() -> Value,
}

fn model_prop() -> Value {
    json!({"type": "string", "description": "Registry id of the model (default: the registry's default for this kind; GET /v1/models lists them)"})
}

fn seed_prop() -> Value {
    json!({"type": "integer", "minimum": 0, "description": "Seed; the same request with the same seed gives the same bytes (default: drawn and reported in the job)"})
}

fn image_schema() -> Value {
    json!({"type": "object", "properties": {
        "prompt": {"type": "string", "description": "What to draw (recorded; an unconditional model ignores it)"},
        "n": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1, "description": "Images in the request (a grid when more than one)"},
        "size": {"type": "string", "description": "WIDTHxHEIGHT; the model's native size by default"},
        "seed": seed_prop(),
        "response_format": {"type": "string", "enum": ["png"], "default": "png"},
        "model": model_prop(),
    }})
}

fn video_schema() -> Value {
    json!({"type": "object", "properties": {
        "prompt": {"type": "string", "description": "What to show (recorded; an unconditional model ignores it)"},
        "seconds": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
        "fps": {"type": "integer", "minimum": 8, "maximum": 24, "default": 12},
        "size": {"type": "string", "description": "WIDTHxHEIGHT; the model's native size by default"},
        "seed": seed_prop(),
        "response_format": {"type": "string", "enum": ["mp4", "avi"], "default": "mp4"},
        "model": model_prop(),
    }})
}

fn music_schema() -> Value {
    json!({"type": "object", "properties": {
        "prompt": {"type": "string"},
        "seconds": {"type": "integer", "minimum": 1},
        "seed": seed_prop(),
        "response_format": {"type": "string", "enum": ["wav", "flac"], "default": "wav"},
        "model": model_prop(),
    }})
}

fn speech_schema() -> Value {
    json!({"type": "object", "required": ["text"], "properties": {
        "text": {"type": "string", "description": "What to say"},
        "speed": {"type": "number", "exclusiveMinimum": 0, "default": 1.0, "description": "1.0 is the voice's own pace"},
        "seed": seed_prop(),
        "response_format": {"type": "string", "enum": ["wav", "flac"], "default": "wav"},
        "model": {"type": "string", "description": "Registry id of the voice (default: the registry's default voice)"},
    }})
}

/// The generate tools, in listing order.
pub(super) const GENERATE: [GenerateTool; 4] = [
    GenerateTool {
        name: "generate_image",
        kind: MediaKind::Image,
        model_kind: ModelKind::Image,
        about: "Generate an image; returns the PNG and a favlo://images/{id} link. Optional task.",
        schema: image_schema,
    },
    GenerateTool {
        name: "generate_video",
        kind: MediaKind::Video,
        model_kind: ModelKind::Video,
        about: "Generate a video clip; returns a favlo://videos/{id} link (MP4). Optional task.",
        schema: video_schema,
    },
    GenerateTool {
        name: "generate_music",
        kind: MediaKind::Music,
        model_kind: ModelKind::Music,
        about: "Generate music; returns a favlo://music/{id} link (WAV, FLAC). Optional task.",
        schema: music_schema,
    },
    GenerateTool {
        name: "generate_speech",
        kind: MediaKind::Voice,
        model_kind: ModelKind::Voice,
        about: "Speak text; returns a favlo://voice/{id} link (WAV, FLAC). Optional task.",
        schema: speech_schema,
    },
];

fn id_schema() -> Value {
    json!({"type": "object", "required": ["id"], "properties": {
        "id": {"type": "string", "description": "The job id a generate tool returned"}
    }})
}

fn schema_object(v: Value) -> Arc<JsonObject> {
    Arc::new(match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    })
}

/// Tools to list: generate tools whose kind has a model row, then status and cancel.
pub(super) fn list(state: &AppState) -> Vec<Tool> {
    let rows = state.catalog.rows();
    let mut tools: Vec<Tool> = GENERATE
        .iter()
        .filter(|t| rows.iter().any(|r| r.kind == t.model_kind))
        .map(|t| Tool::new(t.name, t.about, schema_object((t.schema)())))
        .collect();
    tools.push(Tool::new(
        "media_status",
        "The job record of a media job: status (queued, in_progress, completed, failed, cancelled), progress, error, and its favlo:// link once completed.",
        schema_object(id_schema()),
    ));
    tools.push(Tool::new(
        "media_cancel",
        "Cancel a media job: at once when waiting or paused, at its next stage when running. Its hold and files are dropped.",
        schema_object(id_schema()),
    ));
    tools
}

fn invalid(message: impl Into<String>, param: Option<&str>) -> McpError {
    McpError::invalid_params(message.into(), param.map(|p| json!({"param": p})))
}

/// Queue a generate job after validating it; the record is returned.
pub(super) async fn submit(
    state: &Arc<AppState>,
    tool: &GenerateTool,
    args: &JsonObject,
) -> Result<JobRecord, McpError> {
    let model = match args.get("model") {
        None | Some(Value::Null) => {
            let catalog = state.catalog.clone();
            let kind = tool.model_kind;
            tokio::task::spawn_blocking(move || catalog.default_for(kind))
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?
                .ok_or_else(|| {
                    invalid(
                        format!(
                            "no {} model is installed; {} needs one (GET /v1/models lists the models)",
                            tool.model_kind.as_str(),
                            tool.name
                        ),
                        Some("model"),
                    )
                })?
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid("model must be a string", Some("model"))),
    };
    let spec = crate::routes::resolve_model(state, &model, tool.model_kind)
        .await
        .map_err(super::api_to_mcp)?;
    let id = crate::media::jobs::mint_id(tool.kind);
    let body = Value::Object(args.clone());
    let factory = state.scheduler.factory().clone();
    let (spec, job) = {
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            let job = factory.parse_media(&spec, &id, &body);
            (spec, job)
        })
        .await
        .map_err(|e| McpError::internal_error(e.to_string(), None))?
    };
    let job = job.map_err(|e| super::api_to_mcp(e.into()))?;
    if job.kind != tool.kind {
        return Err(McpError::internal_error(
            format!("model {model} made a {:?} job for {}", job.kind, tool.name),
            None,
        ));
    }
    let rec = state
        .scheduler
        .submit_media(spec, job)
        .map_err(|e| match e {
            SubmitError::Locked(h) => McpError::internal_error(
                format!(
                    "the machine is locked by pid {} ({}); jobs resume after `favlo lock release`",
                    h.pid, h.command
                ),
                None,
            ),
            SubmitError::Full | SubmitError::Closed => {
                McpError::internal_error("the server is shutting down", None)
            }
        })?;
    tracing::info!(job = %rec.id, model = %rec.model, tool = tool.name, "media job queued");
    Ok(rec)
}

/// The tool result for a finished job: the record as structured content, a
/// text summary, the image itself for images, and the favlo:// link.
pub(super) fn finished(state: &AppState, rec: &JobRecord) -> Result<CallToolResult, McpError> {
    let structured = serde_json::to_value(rec).unwrap_or(Value::Null);
    match rec.status {
        JobStatus::Completed => {
            let uri = format!("favlo://{}/{}", kind_dir(rec.kind), rec.id);
            let mut content = vec![json!({"type": "text", "text": format!(
                "{} {} completed: {uri}", rec.kind_name(), rec.id
            )})];
            let served = state.scheduler.store().served_path(
                rec.kind,
                &rec.id,
                rec.response_format.as_deref(),
            );
            if let Ok((path, mime)) = served {
                if rec.kind == MediaKind::Image
                    && let Ok(bytes) = std::fs::read(&path)
                {
                    content.push(json!({"type": "image", "mimeType": mime,
                        "data": base64::engine::general_purpose::STANDARD.encode(bytes)}));
                }
                content.push(
                    json!({"type": "resource_link", "uri": uri, "name": rec.id, "mimeType": mime}),
                );
            }
            wire(json!({"content": content, "structuredContent": structured, "isError": false}))
        }
        JobStatus::Failed | JobStatus::Cancelled => {
            let why = rec
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_else(|| "cancelled".into());
            wire(json!({"content": [{"type": "text", "text": format!(
                "{} {} {}: {why}", rec.kind_name(), rec.id,
                if rec.status == JobStatus::Failed { "failed" } else { "was cancelled" }
            )}], "structuredContent": structured, "isError": true}))
        }
        _ => status_result(rec),
    }
}

/// The job record as a tool result.
pub(super) fn status_result(rec: &JobRecord) -> Result<CallToolResult, McpError> {
    let structured = serde_json::to_value(rec).unwrap_or(Value::Null);
    wire(
        json!({"content": [{"type": "text", "text": structured.to_string()}],
                "structuredContent": structured, "isError": false}),
    )
}

/// The `id` argument of media_status / media_cancel.
pub(super) fn id_arg(args: &JsonObject) -> Result<String, McpError> {
    match args.get("id") {
        Some(Value::String(s)) => {
            crate::media::store::check_id(s).map_err(|e| invalid(e.to_string(), Some("id")))?;
            Ok(s.clone())
        }
        None | Some(Value::Null) => Err(invalid("id is required", Some("id"))),
        Some(_) => Err(invalid("id must be a string", Some("id"))),
    }
}

/// `media_status`.
pub(super) fn status(state: &AppState, args: &JsonObject) -> Result<CallToolResult, McpError> {
    let id = id_arg(args)?;
    let rec = state
        .scheduler
        .jobs()
        .get(&id)
        .ok_or_else(|| invalid(format!("no media job with id `{id}`"), Some("id")))?;
    status_result(&rec)
}

/// `media_cancel`.
pub(super) fn cancel(state: &AppState, id: &str) -> Result<JobRecord, McpError> {
    match state.scheduler.cancel_media(id) {
        Ok(rec) => {
            tracing::info!(job = %id, "media job cancel requested");
            Ok(rec)
        }
        Err(CancelError::Unknown) => {
            Err(invalid(format!("no media job with id `{id}`"), Some("id")))
        }
        Err(CancelError::Finished(s)) => Err(invalid(
            format!(
                "media job {id} already ended ({})",
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
            Some("id"),
        )),
    }
}
