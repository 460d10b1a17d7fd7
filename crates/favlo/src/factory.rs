//! The one place that links model families to the server: a registry row's
//! `family` picks a pipeline crate, and the hub's store becomes the server's
//! catalog.
//!
//! Key design choice: the server and the pipelines never see each other; a new
//! family is one match arm here plus its registry row.

use std::sync::Arc;

use favlo_hub::{Home, ModelKind as HubKind, Progress, Registry, is_pulled};
use favlo_pipeline::{
    EmbeddingsPipeline, LanguagePipeline, Ledger, MediaPipeline, ModelKind, ModelSpec, Owner,
    PipelineError, PipelineFactory,
};
use favlo_server::{Catalog, CatalogRow};

/// Opens the families this build links.
pub struct Factory {
    /// Storage of language-model matrices.
    pub llama_format: favlo_llama::WeightFormat,
    /// How a CUDA chat prefill computes its projections (`--prefill`).
    pub llama_prefill: favlo_llama::PrefillMode,
    /// Prompt tokens per CUDA chat prefill chunk (`--prefill-chunk`; `None`: the pipeline's
    /// default for the prefill mode).
    pub llama_prefill_chunk: Option<usize>,
    /// Chats of the resident model decoded together on CUDA (`--parallel`).
    pub llama_sequences: usize,
    /// Where language, embeddings, DCGAN image/video models and the voice decoder run (`--device`).
    pub device: favlo_runtime::device::Device,
}

impl PipelineFactory for Factory {
    fn open_language(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn LanguagePipeline>, PipelineError> {
        match spec.family.as_str() {
            "llama" => {
                let opts = favlo_llama::OpenOptions {
                    format: self.llama_format,
                    max_context: spec.context_length,
                    name: Some(spec.id.clone()),
                    device: self.device,
                    prefill: self.llama_prefill,
                    prefill_chunk: self.llama_prefill_chunk,
                    sequences: self.llama_sequences,
                    ..Default::default()
                };
                let rt = favlo_llama::open(&spec.dir, ledger, owner, &opts)
                    .map_err(favlo_llama::LlamaError::into_pipeline)?;
                Ok(Box::new(rt))
            }
            other => Err(unknown_family(spec, other)),
        }
    }

    fn open_embeddings(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Arc<dyn EmbeddingsPipeline>, PipelineError> {
        match spec.family.as_str() {
            "bert" => {
                let p = favlo_bert::open_embeddings(
                    spec,
                    Arc::clone(ledger),
                    owner.clone(),
                    self.device,
                )?;
                Ok(Arc::from(p))
            }
            other => Err(unknown_family(spec, other)),
        }
    }

    fn parse_media(
        &self,
        spec: &ModelSpec,
        id: &str,
        body: &serde_json::Value,
    ) -> Result<favlo_pipeline::MediaJob, PipelineError> {
        use favlo_pipeline::{MediaJob, MediaKind};
        let (kind, params) = match (spec.family.as_str(), spec.kind) {
            ("dcgan", ModelKind::Image) => (
                MediaKind::Image,
                favlo_dcgan::request::image_params(id, body)?,
            ),
            ("dcgan", ModelKind::Video) => (
                MediaKind::Video,
                favlo_dcgan::request::video_params(id, body)?,
            ),
            ("vits", ModelKind::Voice) => return favlo_vits::parse_job(spec, id, body),
            (other, _) => return Err(unknown_family(spec, other)),
        };
        Ok(MediaJob {
            id: id.to_string(),
            kind,
            params,
        })
    }

    fn open_media(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn MediaPipeline>, PipelineError> {
        match (spec.family.as_str(), spec.kind) {
            ("dcgan", ModelKind::Image) => {
                favlo_dcgan::open_image(spec, ledger, owner, self.device)
            }
            ("dcgan", ModelKind::Video) => {
                favlo_dcgan::open_video(spec, ledger, owner, self.device)
            }
            ("vits", ModelKind::Voice) => favlo_vits::open_voice(spec, ledger, owner, self.device),
            (other, _) => Err(unknown_family(spec, other)),
        }
    }
}

fn unknown_family(spec: &ModelSpec, family: &str) -> PipelineError {
    PipelineError::invalid(
        format!(
            "model {} has family {family:?}, which this build cannot serve as {}",
            spec.id,
            spec.kind.as_str()
        ),
        Some("model"),
    )
}

/// The hub's registry and store as the server's catalog.
pub struct HubCatalog {
    pub home: Home,
    pub registry: Registry,
}

fn kind(k: HubKind) -> Option<ModelKind> {
    Some(match k {
        HubKind::Chat => ModelKind::Chat,
        HubKind::Embeddings => ModelKind::Embeddings,
        HubKind::Image => ModelKind::Image,
        HubKind::Video => ModelKind::Video,
        HubKind::Music => ModelKind::Music,
        HubKind::Voice => ModelKind::Voice,
        HubKind::Tokenizer => return None,
    })
}

impl Catalog for HubCatalog {
    fn rows(&self) -> Vec<CatalogRow> {
        self.registry
            .rows()
            .iter()
            .filter_map(|r| {
                Some(CatalogRow {
                    id: r.id.clone(),
                    kind: kind(r.kind)?,
                    family: r.family.clone(),
                    pulled: is_pulled(&self.home, r),
                    description: r.description.clone(),
                })
            })
            .collect()
    }

    fn spec(&self, id: &str) -> Result<ModelSpec, String> {
        let row = self
            .registry
            .get(id)
            .ok_or_else(|| format!("unknown model {id}"))?;
        let kind =
            kind(row.kind).ok_or_else(|| format!("{id} is a tokenizer, not a servable model"))?;
        let dir = self
            .home
            .model_dir(row.store_name())
            .map_err(|e| e.to_string())?;
        let defaults = serde_json::to_value(&row.defaults).unwrap_or(serde_json::Value::Null);
        Ok(ModelSpec {
            id: row.id.clone(),
            family: row.family.clone(),
            kind,
            files: row.files.iter().map(|f| f.path.clone().into()).collect(),
            dir,
            context_length: row.defaults.context_length,
            defaults,
        })
    }

    fn pull(&self, id: &str) -> Result<(), String> {
        let row = self
            .registry
            .get(id)
            .ok_or_else(|| format!("unknown model {id}"))?;
        let progress = favlo_hub::LogProgress::default();
        favlo_hub::pull(
            &self.home,
            favlo_hub::PullTarget::Row(row),
            &progress as &dyn Progress,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}
