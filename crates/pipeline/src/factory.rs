//! How the server gets an opened pipeline for a registry row.
//!
//! Key design choice: the binary implements [`PipelineFactory`] (it is the only
//! crate that links every pipeline family), and the server receives it as
//! `Arc<dyn PipelineFactory>`. [`ModelSpec`] is a plain copy of the row the
//! server resolved, so this crate does not depend on the hub. This is
//! design.md's `Pipeline::open(owner, ledger, device, checkpoint)`; the
//! device is the ledger's.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::embeddings::EmbeddingsPipeline;
use crate::error::PipelineError;
use crate::language::LanguagePipeline;
use crate::media::MediaPipeline;
use favlo_runtime::ledger::{Ledger, Owner};

/// What a model row serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Chat completions.
    Chat,
    /// Embeddings.
    Embeddings,
    /// Image generation.
    Image,
    /// Video generation.
    Video,
    /// Music generation.
    Music,
    /// Speech synthesis.
    Voice,
}

impl ModelKind {
    /// The lowercase name (`"chat"`, `"embeddings"`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            ModelKind::Chat => "chat",
            ModelKind::Embeddings => "embeddings",
            ModelKind::Image => "image",
            ModelKind::Video => "video",
            ModelKind::Music => "music",
            ModelKind::Voice => "voice",
        }
    }
}

/// The model row a pipeline opens, as plain data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Registry id (what clients send as `model`).
    pub id: String,
    /// Pipeline family (`"llama"`, `"bert"`, ...): picks the crate.
    pub family: String,
    /// What it serves.
    pub kind: ModelKind,
    /// The pulled model's directory.
    pub dir: PathBuf,
    /// Its files, relative to `dir` (the checkpoint, tokenizer, config ...).
    pub files: Vec<PathBuf>,
    /// Context length to ask for (`None`: the checkpoint's own).
    pub context_length: Option<usize>,
    /// Row defaults (e.g. `{"temperature":0.2,"top_p":0.9}`), free-form.
    pub defaults: serde_json::Value,
}

/// Opens pipelines for model rows. Implemented by the binary.
///
/// Every `open_*` runs on a blocking thread, allocates only through `ledger`
/// with `owner`, must fit before its first allocation (shrinking its one knob)
/// and otherwise returns [`PipelineError::DoesNotFit`]. An unknown `family`
/// is `InvalidRequest` naming the model.
pub trait PipelineFactory: Send + Sync {
    /// Open a chat model.
    fn open_language(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn LanguagePipeline>, PipelineError>;

    /// Open an embedding model.
    fn open_embeddings(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Arc<dyn EmbeddingsPipeline>, PipelineError>;

    /// Validate a media request body for `spec` without opening anything:
    /// the job the pipeline's own `parse` would make (seed resolved), or
    /// `InvalidRequest` naming the field. The default: no media families.
    fn parse_media(
        &self,
        spec: &ModelSpec,
        id: &str,
        body: &serde_json::Value,
    ) -> Result<crate::media::MediaJob, PipelineError> {
        let _ = (id, body);
        Err(PipelineError::invalid(
            format!(
                "model {} ({}) has no media pipeline in this build",
                spec.id, spec.family
            ),
            Some("model"),
        ))
    }

    /// Open a media model. The default: no media families are linked.
    fn open_media(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn MediaPipeline>, PipelineError> {
        let _ = (ledger, owner);
        Err(PipelineError::invalid(
            format!(
                "model {} ({}) has no media pipeline in this build",
                spec.id, spec.family
            ),
            Some("model"),
        ))
    }
}
