//! MCP resources: `favlo://<kind>/<id>` files and `favlo://memory`.
//!
//! Key design choice: a resource read goes to the media store's served file
//! on disk (never to bytes kept in memory), with the job's requested format
//! when it has one; an id is checked before any path exists.

use base64::Engine;
use favlo_pipeline::MediaKind;
use rmcp::ErrorData as McpError;
use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult};
use serde_json::{Value, json};

use super::wire;
use crate::AppState;
use crate::media::JobStatus;
use crate::media::store::{StoreError, kind_dir, kind_of_dir};

/// The memory ledger as JSON (what `/v1/memory` shows): the host ledger's figures at the
/// top level, and under `devices` the ledger of every accelerator a model holds open
/// (same fields each).
pub(crate) fn memory_json(state: &AppState) -> Value {
    let mut v = ledger_json(&state.ledger.snapshot());
    let devices: Vec<Value> = favlo_runtime::device_ledgers::snapshots()
        .iter()
        .map(ledger_json)
        .collect();
    let r = state.scheduler.residency();
    if let Value::Object(m) = &mut v {
        m.insert("devices".into(), Value::Array(devices));
        m.insert("resident".into(), json!(r.resident));
        m.insert("embeddings".into(), json!(r.embeddings));
    }
    v
}

/// One ledger's figures and owners.
fn ledger_json(s: &favlo_runtime::ledger::LedgerSnapshot) -> Value {
    let owners: Vec<Value> = s
        .owners
        .iter()
        .map(|o| {
            let kinds: serde_json::Map<String, Value> = o
                .kinds
                .iter()
                .map(|(k, b)| (k.as_str().to_owned(), json!(b)))
                .collect();
            json!({"owner": o.owner, "bytes": o.bytes, "spans": o.spans, "kinds": kinds})
        })
        .collect();
    json!({
        "device": s.device.to_string(), "budget": s.budget, "cap": s.cap, "live": s.live,
        "pending": s.pending, "room": s.room, "owners": owners,
    })
}

/// Completed jobs whose files are on disk, and the memory resource.
pub(super) fn list(state: &AppState) -> Result<ListResourcesResult, McpError> {
    let store = state.scheduler.store();
    let mut items = vec![json!({
        "uri": "favlo://memory", "name": "memory", "mimeType": "application/json",
        "description": "The memory ledger: budget, live bytes, owners, the resident model",
    })];
    for rec in state.scheduler.jobs().list() {
        if rec.status != JobStatus::Completed {
            continue;
        }
        if let Ok((_, mime)) = store.served_path(rec.kind, &rec.id, rec.response_format.as_deref())
        {
            items.push(json!({
                "uri": format!("favlo://{}/{}", kind_dir(rec.kind), rec.id),
                "name": rec.id, "mimeType": mime,
            }));
        }
    }
    wire(json!({"resources": items}))
}

/// One template per media kind.
pub(super) fn templates() -> Result<ListResourceTemplatesResult, McpError> {
    let t: Vec<Value> = [
        ("images", "image/png", "A generated image"),
        ("videos", "video/mp4", "A generated video (MP4)"),
        ("music", "audio/wav", "Generated music (WAV)"),
        ("voice", "audio/wav", "Generated speech (WAV)"),
    ]
    .iter()
    .map(|(dir, mime, about)| {
        json!({"uriTemplate": format!("favlo://{dir}/{{id}}"), "name": dir,
               "mimeType": mime, "description": about})
    })
    .collect();
    wire(json!({"resourceTemplates": t}))
}

/// `resources/read`.
pub(super) fn read(state: &AppState, uri: &str) -> Result<ReadResourceResult, McpError> {
    if uri == "favlo://memory" {
        let text = memory_json(state).to_string();
        return wire(
            json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}),
        );
    }
    let rest = uri
        .strip_prefix("favlo://")
        .ok_or_else(|| McpError::invalid_params(format!("not a favlo:// uri: {uri}"), None))?;
    let (dir, id) = rest.split_once('/').ok_or_else(|| {
        McpError::invalid_params(format!("expected favlo://<kind>/<id>, got {uri}"), None)
    })?;
    let kind: MediaKind = kind_of_dir(dir).ok_or_else(|| {
        McpError::invalid_params(
            format!("unknown media kind `{dir}` (images, videos, music, voice)"),
            None,
        )
    })?;
    let want = state
        .scheduler
        .jobs()
        .get(id)
        .and_then(|r| r.response_format);
    match state.scheduler.store().read(kind, id, want.as_deref()) {
        Ok((bytes, mime)) => {
            let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
            wire(json!({"contents": [{"uri": uri, "mimeType": mime, "blob": blob}]}))
        }
        Err(e @ StoreError::BadId { .. }) => Err(McpError::invalid_params(e.to_string(), None)),
        Err(e @ StoreError::NotFound { .. }) => Err(McpError::resource_not_found(
            e.to_string(),
            Some(json!({"uri": uri})),
        )),
        Err(e) => {
            tracing::error!(error = %e, "reading a media file");
            Err(McpError::internal_error("cannot read the media file", None))
        }
    }
}
