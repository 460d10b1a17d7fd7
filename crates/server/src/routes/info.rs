//! `GET /health`, `/v1/models`, `/v1/models/{id}`, `/v1/memory`, `/metrics`.
//!
//! Key design choice: these read state only; registry lookups that may touch
//! the disk run on a blocking thread.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::AppState;
use crate::catalog::CatalogRow;
use crate::error::ApiError;

/// `GET /health`.
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let r = state.scheduler.residency();
    let locked = state.scheduler.locked();
    Json(json!({
        "status": "ok",
        "resident": r.resident,
        "embeddings": r.embeddings,
        "open_requests": state.scheduler.open_requests(),
        "locked": locked.map(|h| json!({"pid": h.pid, "command": h.command, "pipeline": h.pipeline})),
        "uptime_s": state.started.elapsed().as_secs(),
    }))
}

fn row_json(row: &CatalogRow, state: &AppState) -> Value {
    let r = state.scheduler.residency();
    let resident = r.resident.as_deref() == Some(row.id.as_str())
        || r.embeddings.as_deref() == Some(row.id.as_str());
    json!({
        "id": row.id, "object": "model", "created": 0, "owned_by": "favlo",
        "kind": row.kind.as_str(), "family": row.family, "pulled": row.pulled,
        "resident": resident, "description": row.description,
    })
}

async fn rows(state: &Arc<AppState>) -> Result<Vec<CatalogRow>, ApiError> {
    let catalog = state.catalog.clone();
    tokio::task::spawn_blocking(move || catalog.rows())
        .await
        .map_err(ApiError::internal)
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let data: Vec<Value> = rows(&state)
        .await?
        .iter()
        .map(|r| row_json(r, &state))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{id}`.
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    rows(&state)
        .await?
        .iter()
        .find(|r| r.id == id)
        .map(|r| Json(row_json(r, &state)))
        .ok_or_else(|| ApiError::model_not_found(&id))
}

/// `GET /v1/memory`: the ledger.
pub async fn memory(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(crate::mcp::memory_json(&state))
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&state.ledger),
    )
}
