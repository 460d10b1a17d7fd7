//! Typed reads of request fields with OpenAI-shaped 400s naming the field.
//!
//! Key design choice: bodies are read as `serde_json::Value` and checked field
//! by field, so every wrong type gets a message that names the field and what
//! it should be, instead of a serde path dump.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// The body as an object, or a 400.
pub fn object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::invalid("the body must be a JSON object", None))
}

/// A present, non-null field.
pub fn get<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

/// The `model` field: a non-empty string.
pub fn model(o: &Map<String, Value>) -> Result<String, ApiError> {
    match get(o, "model") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(ApiError::invalid("model must not be empty", Some("model"))),
        Some(_) => Err(ApiError::invalid("model must be a string", Some("model"))),
        None => Err(ApiError::invalid("model is required", Some("model"))),
    }
}

/// An optional boolean.
pub fn bool_opt(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid(
            format!("{key} must be a boolean"),
            Some(key),
        )),
    }
}

/// An optional number in `[lo, hi]`.
pub fn num_opt(
    o: &Map<String, Value>,
    key: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            Some(_) => Err(ApiError::invalid(
                format!("{key} must be between {lo} and {hi}"),
                Some(key),
            )),
            None => Err(ApiError::invalid(
                format!("{key} must be a number"),
                Some(key),
            )),
        },
    }
}

/// An optional integer in `[lo, hi]`.
pub fn int_opt(
    o: &Map<String, Value>,
    key: &str,
    lo: i64,
    hi: i64,
) -> Result<Option<i64>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            Some(_) => Err(ApiError::invalid(
                format!("{key} must be between {lo} and {hi}"),
                Some(key),
            )),
            None => Err(ApiError::invalid(
                format!("{key} must be an integer"),
                Some(key),
            )),
        },
    }
}

/// An optional string.
pub fn str_opt<'a>(o: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match get(o, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid(
            format!("{key} must be a string"),
            Some(key),
        )),
    }
}
