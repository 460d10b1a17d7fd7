//! A JSON body extractor whose rejections are OpenAI-shaped.
//!
//! Key design choice: axum's own `Json` does the work; only its rejection is
//! mapped — malformed JSON and a wrong content type become 400s with a clear
//! message, a body over the limit stays 413.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ApiError;

/// The request body as a JSON value.
pub struct ApiJson(pub Value);

impl<S: Send + Sync> FromRequest<S> for ApiJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<Value>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(map_rejection(&rejection)),
        }
    }
}

fn map_rejection(r: &JsonRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        let mut e = ApiError::too_large(0);
        e.message = "request body is larger than the server's limit".into();
        return e;
    }
    match r {
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::invalid("Content-Type must be application/json", None)
        }
        JsonRejection::JsonSyntaxError(e) => ApiError::invalid(
            format!("the body is not valid JSON: {}", source_text(e)),
            None,
        ),
        JsonRejection::JsonDataError(e) => ApiError::invalid(
            format!("the body is not valid JSON: {}", source_text(e)),
            None,
        ),
        other => ApiError::invalid(
            format!("could not read the body: {}", other.body_text()),
            None,
        ),
    }
}

fn source_text(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s = inner.to_string();
        cur = inner.source();
    }
    s
}
