//! The HTTP routes and the model resolution they share.
//!
//! Key design choice: a `model` field is resolved by exact registry id only
//! (never as a path), then checked for kind and pulled state under the pull
//! policy, all before anything is queued.

pub mod chat;
mod chat_parse;
pub mod embeddings;
mod fields;
pub mod info;
pub mod speech;

use std::sync::Arc;

use favlo_pipeline::{ModelKind, ModelSpec};

use crate::AppState;
use crate::config::PullPolicy;
use crate::error::ApiError;

/// Resolve `id` to an openable spec of `kind`, pulling it when the policy allows.
pub async fn resolve_model(
    state: &Arc<AppState>,
    id: &str,
    kind: ModelKind,
) -> Result<ModelSpec, ApiError> {
    let catalog = state.catalog.clone();
    let key = id.to_owned();
    let row = tokio::task::spawn_blocking(move || catalog.row(&key))
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::model_not_found(id))?;
    if row.kind != kind {
        let route = match row.kind {
            ModelKind::Chat => "/v1/chat/completions",
            ModelKind::Embeddings => "/v1/embeddings",
            _ => "the MCP tools at /mcp",
        };
        return Err(ApiError::invalid(
            format!(
                "model {id} is a {} model; use it through {route}",
                row.kind.as_str()
            ),
            Some("model"),
        ));
    }
    if !row.pulled {
        match state.config.pull {
            PullPolicy::Never => {
                return Err(ApiError::unavailable(
                    format!(
                        "model {id} is not pulled; run `favlo pull {id}` or serve with --pull auto"
                    ),
                    "model_not_pulled",
                ));
            }
            PullPolicy::Auto => {
                let _guard = state.pull_lock.lock().await;
                let catalog = state.catalog.clone();
                let key = id.to_owned();
                tracing::info!(model = %id, "pulling on first use");
                let pulled = tokio::task::spawn_blocking(move || {
                    if catalog.row(&key).is_some_and(|r| r.pulled) {
                        Ok(())
                    } else {
                        catalog.pull(&key)
                    }
                })
                .await
                .map_err(ApiError::internal)?;
                if let Err(message) = pulled {
                    return Err(ApiError::unavailable(
                        format!("pulling model {id} failed: {message}"),
                        "pull_failed",
                    ));
                }
            }
        }
    }
    let catalog = state.catalog.clone();
    let key = id.to_owned();
    tokio::task::spawn_blocking(move || catalog.spec(&key))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}
