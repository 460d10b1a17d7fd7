//! Request bodies (the MCP tool arguments) to validated job parameters.
//!
//! Key design choice: everything that decides the output bytes is resolved here
//! and stored in the job's params, the seed included (drawn from the clock when
//! absent), so a resumed job can only ever reproduce the same output. Unknown
//! keys are ignored; `prompt` is accepted and recorded but does not steer the
//! output (this generator is unconditional).

use std::time::{SystemTime, UNIX_EPOCH};

use favlo_pipeline::PipelineError;
use serde_json::{Map, Value, json};

use crate::generator::SIDE;

/// Images per request.
pub const MAX_IMAGES: u64 = 8;
/// Video length bounds, seconds.
pub const SECONDS: (u64, u64) = (1, 10);
/// Video rate bounds, frames per second.
pub const FPS: (u64, u64) = (8, 24);
/// Defaults for a video body.
pub const DEFAULT_SECONDS: u64 = 2;
/// Default frames per second.
pub const DEFAULT_FPS: u64 = 12;

fn object(body: &Value) -> Result<&Map<String, Value>, PipelineError> {
    body.as_object()
        .ok_or_else(|| PipelineError::invalid("the request body must be a JSON object", None))
}

/// An optional non-negative integer in `lo..=hi` (an integral float such as
/// `2.0` counts).
fn int_in(
    m: &Map<String, Value>,
    key: &str,
    lo: u64,
    hi: u64,
    default: u64,
) -> Result<u64, PipelineError> {
    let Some(v) = m.get(key).filter(|v| !v.is_null()) else {
        return Ok(default);
    };
    let n = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    });
    match n {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(PipelineError::invalid(
            format!("{key} must be an integer from {lo} to {hi}"),
            Some(key),
        )),
    }
}

fn seed(m: &Map<String, Value>, id: &str) -> Result<u64, PipelineError> {
    match m.get("seed").filter(|v| !v.is_null()) {
        Some(v) => v.as_u64().ok_or_else(|| {
            PipelineError::invalid("seed must be a non-negative integer", Some("seed"))
        }),
        None => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            let mut h = 0xcbf2_9ce4_8422_2325u64; // FNV-1a of the id, mixed with the clock
            for b in id.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            // Kept below 2^53 so JSON clients that use doubles can send it back.
            Ok((nanos ^ h) & ((1 << 53) - 1))
        }
    }
}

fn text(m: &Map<String, Value>, key: &str) -> Result<String, PipelineError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(PipelineError::invalid(
            format!("{key} must be a string"),
            Some(key),
        )),
    }
}

fn size(m: &Map<String, Value>) -> Result<String, PipelineError> {
    let want = format!("{SIDE}x{SIDE}");
    match m.get("size") {
        None | Some(Value::Null) => Ok(want),
        Some(Value::String(s)) if *s == want => Ok(want),
        Some(_) => Err(PipelineError::invalid(
            format!("size must be \"{want}\" (the generator's only size)"),
            Some("size"),
        )),
    }
}

fn format(m: &Map<String, Value>, allowed: &[&str]) -> Result<String, PipelineError> {
    match m.get("response_format") {
        None | Some(Value::Null) => Ok(allowed[0].to_string()),
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(s.clone()),
        Some(_) => Err(PipelineError::invalid(
            format!("response_format must be one of {}", allowed.join(", ")),
            Some("response_format"),
        )),
    }
}

/// `{prompt?, n?: 1..=8 (1), seed?, size?: "64x64", response_format?: "png"}`.
pub fn image_params(id: &str, body: &Value) -> Result<Value, PipelineError> {
    let m = object(body)?;
    Ok(json!({
        "prompt": text(m, "prompt")?,
        "n": int_in(m, "n", 1, MAX_IMAGES, 1)?,
        "seed": seed(m, id)?,
        "size": size(m)?,
        "response_format": format(m, &["png"])?,
    }))
}

/// `{prompt?, seconds?: 1..=10 (2), fps?: 8..=24 (12), seed?, size?: "64x64",
/// response_format?: "mp4" | "avi"}`; adds `frames = seconds · fps`.
pub fn video_params(id: &str, body: &Value) -> Result<Value, PipelineError> {
    let m = object(body)?;
    let seconds = int_in(m, "seconds", SECONDS.0, SECONDS.1, DEFAULT_SECONDS)?;
    let fps = int_in(m, "fps", FPS.0, FPS.1, DEFAULT_FPS)?;
    Ok(json!({
        "prompt": text(m, "prompt")?,
        "seconds": seconds,
        "fps": fps,
        "frames": seconds * fps,
        "seed": seed(m, id)?,
        "size": size(m)?,
        "response_format": format(m, &["mp4", "avi"])?,
    }))
}

/// A stored job parameter as usize (params were validated by `parse`).
pub fn param(params: &Value, key: &str) -> Result<u64, PipelineError> {
    params
        .get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| PipelineError::internal(format!("job params lack {key}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use favlo_pipeline::ErrorKind;

    fn param_of(e: PipelineError) -> Option<String> {
        match e {
            PipelineError::InvalidRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn image_defaults_and_errors() {
        let p = image_params("a", &json!({"seed": 7, "prompt": "a face"})).unwrap();
        assert_eq!(p["n"], 1);
        assert_eq!(p["seed"], 7);
        assert_eq!(p["size"], "64x64");
        assert_eq!(p["prompt"], "a face");
        // An absent seed is drawn and recorded.
        assert!(image_params("a", &json!({})).unwrap()["seed"].is_u64());
        for (body, field) in [
            (json!({"n": 0}), "n"),
            (json!({"n": 9}), "n"),
            (json!({"n": 1.5}), "n"),
            (json!({"seed": -1}), "seed"),
            (json!({"size": "512x512"}), "size"),
            (json!({"prompt": 3}), "prompt"),
            (json!({"response_format": "jpeg"}), "response_format"),
        ] {
            let e = image_params("a", &body).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidRequest);
            assert_eq!(param_of(e).as_deref(), Some(field), "{body}");
        }
        assert!(image_params("a", &json!([1])).is_err());
    }

    #[test]
    fn video_defaults_and_bounds() {
        let p = video_params("v", &json!({"seed": 1, "seconds": 3.0})).unwrap();
        assert_eq!(
            (p["seconds"].as_u64(), p["fps"].as_u64()),
            (Some(3), Some(12))
        );
        assert_eq!(p["frames"], 36);
        assert_eq!(p["response_format"], "mp4");
        for body in [
            json!({"seconds": 11}),
            json!({"fps": 7}),
            json!({"fps": 25}),
        ] {
            assert!(video_params("v", &body).is_err(), "{body}");
        }
    }
}
