//! Request bodies (MCP `generate_speech` arguments, or OpenAI's
//! `/v1/audio/speech` body) to validated job parameters.
//!
//! Key design choice: everything that decides the output bytes is resolved here
//! and stored in the job's params — the text, the three scales after the
//! voice's defaults and `speed` are applied, the seed (drawn from the clock and
//! the job id when absent) and the format — so a resumed job can only ever
//! reproduce the same output. Unknown keys (`model`, `voice`) are ignored.

use std::time::{SystemTime, UNIX_EPOCH};

use favlo_pipeline::PipelineError;
use serde_json::{Map, Value, json};

use crate::config::Scales;

/// Longest accepted text, in characters.
pub const MAX_TEXT_CHARS: usize = 20_000;
/// Output formats, the default first.
pub const FORMATS: [&str; 2] = ["wav", "flac"];

/// A validated speech request.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeechParams {
    /// The text to speak.
    pub text: String,
    /// Scales after defaults and `speed`.
    pub scales: Scales,
    /// Noise seed.
    pub seed: u64,
    /// `wav` or `flac`.
    pub format: String,
}

fn object(body: &Value) -> Result<&Map<String, Value>, PipelineError> {
    body.as_object()
        .ok_or_else(|| PipelineError::invalid("the request body must be a JSON object", None))
}

fn text(m: &Map<String, Value>) -> Result<String, PipelineError> {
    let (key, v) = match (m.get("text"), m.get("input")) {
        (Some(v), _) if !v.is_null() => ("text", v),
        (_, Some(v)) if !v.is_null() => ("input", v),
        _ => {
            return Err(PipelineError::invalid(
                "text is required: the words to speak, as a non-empty string",
                Some("text"),
            ));
        }
    };
    match v {
        Value::String(s) if !s.trim().is_empty() => {
            if s.chars().count() > MAX_TEXT_CHARS {
                Err(PipelineError::invalid(
                    format!("{key} must be at most {MAX_TEXT_CHARS} characters"),
                    Some(key),
                ))
            } else {
                Ok(s.clone())
            }
        }
        _ => Err(PipelineError::invalid(
            format!("{key} must be a non-empty string"),
            Some(key),
        )),
    }
}

/// An optional finite number in `(lo, hi]` (`open_lo`) or `[lo, hi]`.
fn number(
    m: &Map<String, Value>,
    key: &'static str,
    lo: f64,
    open_lo: bool,
    hi: f64,
) -> Result<Option<f32>, PipelineError> {
    let Some(v) = m.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let ok = |x: f64| x.is_finite() && (if open_lo { x > lo } else { x >= lo }) && x <= hi;
    match v.as_f64() {
        Some(x) if ok(x) => Ok(Some(x as f32)),
        _ => {
            let low = if open_lo { "greater than" } else { "at least" };
            Err(PipelineError::invalid(
                format!("{key} must be a number {low} {lo} and at most {hi}"),
                Some(key),
            ))
        }
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
            // Below 2^53 so JSON clients that use doubles can send it back.
            Ok((nanos ^ h) & ((1 << 53) - 1))
        }
    }
}

fn format(m: &Map<String, Value>) -> Result<String, PipelineError> {
    match m.get("response_format") {
        None | Some(Value::Null) => Ok(FORMATS[0].to_string()),
        Some(Value::String(s)) if FORMATS.contains(&s.as_str()) => Ok(s.clone()),
        Some(_) => Err(PipelineError::invalid(
            format!("response_format must be one of {}", FORMATS.join(", ")),
            Some("response_format"),
        )),
    }
}

/// `{text | input, speed?, noise_scale?, length_scale?, noise_w?, seed?,
/// response_format?}` with `defaults` from the voice config; `speed` (> 0)
/// divides the length scale.
pub fn speech_params(
    id: &str,
    body: &Value,
    defaults: Scales,
) -> Result<SpeechParams, PipelineError> {
    let m = object(body)?;
    let text = text(m)?;
    let speed = number(m, "speed", 0.0, true, 10.0)?.unwrap_or(1.0);
    let length_scale = number(m, "length_scale", 0.0, true, 10.0)?.unwrap_or(defaults.length_scale);
    Ok(SpeechParams {
        text,
        scales: Scales {
            noise_scale: number(m, "noise_scale", 0.0, false, 10.0)?
                .unwrap_or(defaults.noise_scale),
            length_scale: length_scale / speed,
            noise_w: number(m, "noise_w", 0.0, false, 10.0)?.unwrap_or(defaults.noise_w),
        },
        seed: seed(m, id)?,
        format: format(m)?,
    })
}

impl SpeechParams {
    /// The job's params object.
    pub fn to_json(&self) -> Value {
        json!({
            "text": self.text,
            "noise_scale": self.scales.noise_scale,
            "length_scale": self.scales.length_scale,
            "noise_w": self.scales.noise_w,
            "seed": self.seed,
            "response_format": self.format,
        })
    }

    /// Back from a job's params object (written by [`SpeechParams::to_json`]).
    pub fn from_json(v: &Value) -> Result<Self, PipelineError> {
        let bad = |k: &str| PipelineError::internal(format!("vits job params lack {k}"));
        let f = |k: &'static str| {
            v.get(k)
                .and_then(Value::as_f64)
                .map(|x| x as f32)
                .ok_or_else(|| bad(k))
        };
        Ok(SpeechParams {
            text: v
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("text"))?
                .to_string(),
            scales: Scales {
                noise_scale: f("noise_scale")?,
                length_scale: f("length_scale")?,
                noise_w: f("noise_w")?,
            },
            seed: v
                .get("seed")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("seed"))?,
            format: v
                .get("response_format")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("response_format"))?
                .to_string(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use favlo_pipeline::ErrorKind;

    fn field(e: PipelineError) -> Option<String> {
        match e {
            PipelineError::InvalidRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn defaults_speed_and_round_trip() {
        let d = Scales::default();
        let p = speech_params(
            "j",
            &json!({"input": "Hi there.", "speed": 2.0, "seed": 9}),
            d,
        )
        .unwrap();
        assert_eq!(p.text, "Hi there.");
        assert_eq!(p.scales.length_scale, 0.5);
        assert_eq!(p.scales.noise_scale, d.noise_scale);
        assert_eq!((p.seed, p.format.as_str()), (9, "wav"));
        assert_eq!(SpeechParams::from_json(&p.to_json()).unwrap(), p);
        let q = speech_params(
            "j",
            &json!({"text": "x", "length_scale": 1.5, "noise_w": 0, "response_format": "flac"}),
            d,
        )
        .unwrap();
        assert_eq!(
            (q.scales.length_scale, q.scales.noise_w, q.format.as_str()),
            (1.5, 0.0, "flac")
        );
        assert!(q.seed < 1 << 53);
    }

    #[test]
    fn bad_bodies_name_their_field() {
        let d = Scales::default();
        for (body, f) in [
            (json!({}), "text"),
            (json!({"text": "  "}), "text"),
            (json!({"input": 3}), "input"),
            (json!({"text": "a", "speed": 0}), "speed"),
            (json!({"text": "a", "speed": -1}), "speed"),
            (json!({"text": "a", "speed": "fast"}), "speed"),
            (json!({"text": "a", "noise_scale": -0.1}), "noise_scale"),
            (json!({"text": "a", "length_scale": 0}), "length_scale"),
            (json!({"text": "a", "noise_w": 100}), "noise_w"),
            (json!({"text": "a", "seed": -3}), "seed"),
            (
                json!({"text": "a", "response_format": "mp3"}),
                "response_format",
            ),
        ] {
            let e = speech_params("j", &body, d).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidRequest, "{body}");
            assert_eq!(field(e).as_deref(), Some(f), "{body}");
        }
        assert!(speech_params("j", &json!("text"), d).is_err());
    }
}
