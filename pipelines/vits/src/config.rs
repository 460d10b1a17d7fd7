//! The Piper voice config (`<voice>.onnx.json`): sample rate, espeak-ng voice,
//! inference defaults and the phoneme → id map.
//!
//! Key design choice: only the fields synthesis needs are read (serde ignores
//! the rest), and every default that decides the output is taken from the file,
//! never assumed: a voice without an `inference` section gets Piper's own
//! defaults (0.667, 1.0, 0.8).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::VitsError;

/// `noise_scale`, `length_scale`, `noise_w` (the graph's `scales` input order).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct Scales {
    /// Spread of the prior sample (`z_p = m_p + ε·exp(logs_p)·noise_scale`).
    #[serde(default = "default_noise_scale")]
    pub noise_scale: f32,
    /// Duration multiplier (> 1 is slower speech).
    #[serde(default = "default_length_scale")]
    pub length_scale: f32,
    /// Spread of the stochastic duration predictor's noise.
    #[serde(default = "default_noise_w")]
    pub noise_w: f32,
}

fn default_noise_scale() -> f32 {
    0.667
}
fn default_length_scale() -> f32 {
    1.0
}
fn default_noise_w() -> f32 {
    0.8
}

impl Default for Scales {
    fn default() -> Self {
        Scales {
            noise_scale: default_noise_scale(),
            length_scale: default_length_scale(),
            noise_w: default_noise_w(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Audio {
    sample_rate: u32,
}

#[derive(Debug, Deserialize)]
struct Espeak {
    voice: String,
}

#[derive(Debug, Deserialize)]
struct Raw {
    audio: Audio,
    espeak: Espeak,
    #[serde(default)]
    inference: Option<Scales>,
    #[serde(default)]
    phoneme_type: Option<String>,
    phoneme_id_map: HashMap<String, Vec<i64>>,
    #[serde(default)]
    num_speakers: Option<u32>,
}

/// What synthesis needs from the voice config.
#[derive(Clone, Debug, PartialEq)]
pub struct VoiceConfig {
    /// Output rate in Hz.
    pub sample_rate: u32,
    /// espeak-ng voice name (`en-us`).
    pub espeak_voice: String,
    /// Default scales.
    pub scales: Scales,
    /// Phoneme (one or more code points) → ids.
    pub phoneme_id_map: HashMap<String, Vec<i64>>,
}

impl VoiceConfig {
    /// Reads and checks `<voice>.onnx.json`.
    pub fn open(path: &Path) -> Result<Self, VitsError> {
        let bad = |reason: String| VitsError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::parse(&text).map_err(bad)
    }

    /// Parses the JSON text of a voice config.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: Raw = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if let Some(t) = raw.phoneme_type.as_deref().filter(|t| *t != "espeak") {
            return Err(format!("phoneme_type {t:?} is not supported (only espeak)"));
        }
        if raw.num_speakers.unwrap_or(1) > 1 {
            return Err("multi-speaker voices are not supported yet".into());
        }
        for key in ["_", "^", "$"] {
            if !raw.phoneme_id_map.contains_key(key) {
                return Err(format!("phoneme_id_map lacks {key:?}"));
            }
        }
        Ok(VoiceConfig {
            sample_rate: raw.audio.sample_rate,
            espeak_voice: raw.espeak.voice,
            scales: raw.inference.unwrap_or_default(),
            phoneme_id_map: raw.phoneme_id_map,
        })
    }
}
