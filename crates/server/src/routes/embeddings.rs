//! `POST /v1/embeddings`: the OpenAI list object around the embeddings worker.
//!
//! Key design choice: the pipeline returns raw vectors and token counts; this
//! route owns validation, `dimensions` (truncate, then L2-normalize as OpenAI
//! does), base64 encoding (little-endian f32) and `usage`.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use base64::Engine as _;
use favlo_pipeline::ModelKind;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::fields::{get, int_opt, model, object, str_opt};
use super::resolve_model;
use crate::AppState;
use crate::RequestId;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::metrics::Metrics;
use crate::scheduler::{EmbedInput, EmbedJob, SubmitError};

const MAX_INPUTS: usize = 2048;

fn parse_input(body: &serde_json::Map<String, Value>) -> Result<EmbedInput, ApiError> {
    let bad = || ApiError::invalid("input must be a string", Some("input"));
    match get(body, "input") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(EmbedInput::Texts(vec![s.clone()])),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_INPUTS => {
            if a.iter().all(Value::is_string) {
                let texts: Vec<String> = a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                if texts.iter().any(|t| t.trim().is_empty()) {
                    return Err(bad());
                }
                Ok(EmbedInput::Texts(texts))
            } else if a.iter().all(Value::is_u64) {
                Ok(EmbedInput::Tokens(vec![ids(a).ok_or_else(bad)?]))
            } else if a.iter().all(Value::is_array) {
                let all: Option<Vec<Vec<u32>>> = a
                    .iter()
                    .map(|x| x.as_array().and_then(|x| ids(x)))
                    .collect();
                all.filter(|v| v.iter().all(|x| !x.is_empty()))
                    .map(EmbedInput::Tokens)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "input token arrays must hold non-negative integers",
                            Some("input"),
                        )
                    })
            } else {
                Err(ApiError::invalid(
                    "input must be a string, an array of strings, or token arrays",
                    Some("input"),
                ))
            }
        }
        Some(Value::Array(a)) if a.len() > MAX_INPUTS => Err(ApiError::invalid(
            format!("input may hold at most {MAX_INPUTS} items"),
            Some("input"),
        )),
        _ => Err(bad()),
    }
}

fn ids(a: &[Value]) -> Option<Vec<u32>> {
    if a.is_empty() {
        return None;
    }
    a.iter()
        .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect()
}

/// The handler.
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    Extension(_rid): Extension<RequestId>,
    ApiJson(body): ApiJson,
) -> Result<Json<Value>, ApiError> {
    Metrics::add(&state.metrics.embeddings_requests, 1);
    let o = object(&body)?;
    let model_id = model(o)?;
    let input = parse_input(o)?;
    let base64 = match str_opt(o, "encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "encoding_format must be \"float\" or \"base64\"",
                Some("encoding_format"),
            ));
        }
    };
    let dims = int_opt(o, "dimensions", 1, 1 << 20)?.map(|d| d as usize);
    let spec = resolve_model(&state, &model_id, ModelKind::Embeddings).await?;
    let row_id = spec.id.clone();
    let (tx, rx) = oneshot::channel();
    state
        .scheduler
        .submit_embed(EmbedJob {
            spec,
            input,
            reply: tx,
        })
        .map_err(|e| match e {
            SubmitError::Full => ApiError::queue_full(state.scheduler.capacity()),
            SubmitError::Closed | SubmitError::Locked(_) => {
                ApiError::unavailable("the server is shutting down", "shutting_down")
            }
        })?;
    let (embs, full, truncatable) = rx
        .await
        .map_err(|_| ApiError::internal("the embeddings worker dropped a request"))??;
    if let Some(d) = dims
        && (d > full || (d < full && !truncatable))
    {
        {
            return Err(ApiError::invalid(
                format!(
                    "model {row_id} produces {full} dimensions and does not support dimensions={d}"
                ),
                Some("dimensions"),
            ));
        }
    }
    let mut total = 0usize;
    let data: Vec<Value> = embs
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            total += e.tokens;
            let mut v = e.vector;
            if let Some(d) = dims.filter(|&d| d < v.len()) {
                v.truncate(d);
                let norm = v
                    .iter()
                    .map(|x| (*x as f64) * (*x as f64))
                    .sum::<f64>()
                    .sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
                }
            }
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Metrics::add(&state.metrics.embedding_tokens, total as u64);
    Ok(Json(json!({
        "object": "list", "data": data, "model": row_id,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    })))
}
