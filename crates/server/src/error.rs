//! OpenAI-shaped errors for every route, and the errors `serve` itself returns.
//!
//! Key design choice: one [`ApiError`] type carries status, message, type, param
//! and code, and renders `{"error":{"message","type","param","code"}}`. A 500
//! never shows its detail: [`ApiError::internal`] logs the detail with the
//! request id and replies with a generic message.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use favlo_pipeline::PipelineError;
use serde_json::json;

/// An error reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Shown to the client.
    pub message: String,
    /// OpenAI `type` (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// Machine-readable code (`model_not_found`, `queue_full`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 invalid_request_error naming `param`.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// 401 for a missing or wrong API key.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key; send `Authorization: Bearer <key>`".into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 404 for a model id the registry does not have.
    pub fn model_not_found(id: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model `{id}` does not exist; GET /v1/models lists the models"),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// 404 for an unknown route.
    pub fn route_not_found(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no route for {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// 413 for a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("request body is larger than the limit of {limit} bytes"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        }
    }

    /// 429 when the queue is full.
    pub fn queue_full(capacity: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!("the request queue is full ({capacity} waiting); retry shortly"),
            kind: "rate_limit_error",
            param: None,
            code: Some("queue_full"),
        }
    }

    /// 503: loading, locked, does not fit, or not pulled under `--pull never`.
    pub fn unavailable(message: impl Into<String>, code: &'static str) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some(code),
        }
    }

    /// 500: `detail` goes to the log only.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(detail = %detail, "internal error");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "internal server error; the server log has the details".into(),
            kind: "server_error",
            param: None,
            code: Some("internal_error"),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<PipelineError> for ApiError {
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::InvalidRequest { message, param } => {
                ApiError::invalid(message, param.as_deref())
            }
            PipelineError::DoesNotFit { .. } => {
                ApiError::unavailable(e.to_string(), "insufficient_memory")
            }
            PipelineError::Closed => ApiError::invalid("request closed", None),
            PipelineError::Internal { .. } => ApiError::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// Why `serve` could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is unsafe or invalid.
    #[error("{message}")]
    Config {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Binding the listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// host:port.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server loop failed.
    #[error("server error: {source}")]
    Io {
        /// The OS error.
        #[from]
        source: std::io::Error,
    },
}
