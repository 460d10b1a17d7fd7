//! Registry rows: what a model id means (kind, family, source, pinned files, license, defaults).
//!
//! The registry is the built-in table ([`crate::builtin`]) overlaid with the user's
//! `<home>/models.toml`; a user row with the id of a built-in row replaces it. Every row, built-in
//! or user, goes through the same validation, and user errors name the file, line and field.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::source::{Source, check_rel_path, parse_source};
use crate::{Home, HubError, validate_name};

/// What a model is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Chat,
    Embeddings,
    Image,
    Video,
    Music,
    Voice,
    Tokenizer,
}

impl ModelKind {
    /// Every kind, in display order.
    pub const ALL: [ModelKind; 7] = [
        ModelKind::Chat,
        ModelKind::Embeddings,
        ModelKind::Image,
        ModelKind::Video,
        ModelKind::Music,
        ModelKind::Voice,
        ModelKind::Tokenizer,
    ];

    /// The lowercase name used in `models.toml`, manifests and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Chat => "chat",
            ModelKind::Embeddings => "embeddings",
            ModelKind::Image => "image",
            ModelKind::Video => "video",
            ModelKind::Music => "music",
            ModelKind::Voice => "voice",
            ModelKind::Tokenizer => "tokenizer",
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ModelKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown kind `{s}` (known: {})", names.join(", "))
            })
    }
}

/// Model families a pipeline exists (or is planned) for. `-` is "no family" (tokenizer rows).
pub const KNOWN_FAMILIES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "qwen3next",
    "bert",
    "xlm-roberta",
    "dcgan",
    "vits",
    "z-image",
    "wan",
    "ace-step",
    "voxcpm",
    "-",
];

/// Id of the default chat model.
pub const DEFAULT_CHAT: &str = "smollm2-135m-instruct";
/// Id of the default embeddings model.
pub const DEFAULT_EMBEDDINGS: &str = "all-minilm-l6-v2";

/// One file of a model, pinned by digest and size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedFile {
    /// Where the file lives inside the model directory (`/`-separated, relative).
    pub path: String,
    /// Lowercase hex sha256 of the whole file.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Path inside the package/repository it is taken from, when it differs from `path`
    /// (package sources without `#path` need it on every file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// Per-model defaults the pipelines and the server start from. All optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// Embedding width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
    /// Square image side in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<usize>,
    /// Audio sample rate in Hz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_rate: Option<u32>,
}

/// One model the registry knows how to fetch.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRow {
    pub id: String,
    pub kind: ModelKind,
    /// Architecture family (`llama`, `bert`, `dcgan`, `vits`, ...; `-` for tokenizers).
    pub family: String,
    pub source: Source,
    /// Pinned files. Empty means "whatever the source has", recorded at first pull.
    /// The first file is the main weights file.
    pub files: Vec<PinnedFile>,
    pub license: String,
    pub defaults: RowDefaults,
    pub description: String,
    /// Store the files under another row's directory (rows that share weights).
    pub store: Option<String>,
}

impl ModelRow {
    /// The directory name under `<home>/models/` holding this row's files.
    pub fn store_name(&self) -> &str {
        self.store.as_deref().unwrap_or(&self.id)
    }

    /// Checks the row is self-consistent; `Err` carries `(field, reason)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        validate_name(&self.id).map_err(|e| ("id", e.to_string()))?;
        if let Some(store) = &self.store {
            validate_name(store).map_err(|e| ("store", e.to_string()))?;
        }
        check_family(self.kind, &self.family)?;
        for f in &self.files {
            check_rel_path(&f.path).map_err(|e| ("files.path", e))?;
            if let Some(from) = &f.from {
                check_rel_path(from).map_err(|e| ("files.from", e))?;
            }
            if f.sha256.len() != 64
                || !f
                    .sha256
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            {
                return Err((
                    "files.sha256",
                    format!("`{}` is not 64 lowercase hex digits", f.sha256),
                ));
            }
        }
        let mut paths: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        paths.sort_unstable();
        if let Some(w) = paths.windows(2).find(|w| w[0] == w[1]) {
            return Err(("files.path", format!("`{}` is listed twice", w[0])));
        }
        if let Source::Packages(parts) = &self.source {
            let all_have_path = parts.iter().all(|p| p.path.is_some());
            if parts.len() > 1 && !all_have_path {
                return Err((
                    "source",
                    "every part of a multi-part source needs a `#<path>`".into(),
                ));
            }
            if all_have_path && self.files.len() > 1 {
                return Err((
                    "files",
                    "a source with `#<path>` produces one file; list at most one".into(),
                ));
            }
            if !all_have_path
                && (self.files.is_empty() || self.files.iter().any(|f| f.from.is_none()))
            {
                return Err((
                    "files",
                    "a package source without `#<path>` needs files with `from` (the path inside the package)".into(),
                ));
            }
        }
        Ok(())
    }
}

fn check_family(kind: ModelKind, family: &str) -> Result<(), (&'static str, String)> {
    if !KNOWN_FAMILIES.contains(&family) {
        return Err((
            "family",
            format!(
                "unknown family `{family}` (known: {})",
                KNOWN_FAMILIES.join(", ")
            ),
        ));
    }
    if (kind == ModelKind::Tokenizer) != (family == "-") {
        return Err((
            "family",
            "family `-` is for tokenizer rows only, and tokenizer rows use `-`".into(),
        ));
    }
    Ok(())
}

/// The set of known model rows.
#[derive(Clone, Debug)]
pub struct Registry {
    rows: Vec<ModelRow>,
}

impl Registry {
    /// The rows compiled into Favlo.
    pub fn builtin() -> Registry {
        Registry {
            rows: crate::builtin::rows(),
        }
    }

    /// Built-in rows overlaid with `<home>/models.toml` when that file exists.
    pub fn load(home: &Home) -> Result<Registry, HubError> {
        let mut reg = Registry::builtin();
        let path = home.registry_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => reg.merge(parse_rows_toml(&text, &path)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(HubError::io("read", path, e)),
        }
        Ok(reg)
    }

    /// Adds rows, replacing rows with the same id.
    pub fn merge(&mut self, rows: Vec<ModelRow>) {
        for row in rows {
            match self.rows.iter_mut().find(|r| r.id == row.id) {
                Some(slot) => *slot = row,
                None => self.rows.push(row),
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<&ModelRow> {
        self.rows.iter().find(|r| r.id == id)
    }

    pub fn rows(&self) -> &[ModelRow] {
        &self.rows
    }

    /// The default row for a kind (chat, embeddings), if the registry has it.
    pub fn default_for(&self, kind: ModelKind) -> Option<&ModelRow> {
        match kind {
            ModelKind::Chat => self.get(DEFAULT_CHAT),
            ModelKind::Embeddings => self.get(DEFAULT_EMBEDDINGS),
            _ => self.rows.iter().find(|r| r.kind == kind),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDoc {
    #[serde(default)]
    model: Vec<toml::Spanned<RawRow>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRow {
    id: String,
    kind: toml::Spanned<String>,
    family: Option<toml::Spanned<String>>,
    source: toml::Spanned<String>,
    #[serde(default)]
    files: Vec<PinnedFile>,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    defaults: RowDefaults,
    #[serde(default)]
    description: String,
    #[serde(default)]
    store: Option<String>,
}

/// Parses `[[model]]` rows (the `models.toml` format, see the crate README). `path` is only used
/// in error messages.
pub fn parse_rows_toml(text: &str, path: &Path) -> Result<Vec<ModelRow>, HubError> {
    let err = |message: String| HubError::BadRegistry {
        path: path.to_path_buf(),
        message,
    };
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let doc: RawDoc =
        toml::from_str(text).map_err(|e| err(e.to_string().trim_end().to_string()))?;
    let mut rows: Vec<ModelRow> = Vec::new();
    for spanned in doc.model {
        let row_line = line_of(spanned.span().start);
        let raw = spanned.into_inner();
        let at = |line: usize, field: &str, reason: String| {
            err(format!(
                "line {line}: model `{}`: field `{field}`: {reason}",
                raw.id
            ))
        };
        let kind: ModelKind = raw
            .kind
            .get_ref()
            .parse()
            .map_err(|e| at(line_of(raw.kind.span().start), "kind", e))?;
        let (family, family_line) = match &raw.family {
            Some(f) => (f.get_ref().clone(), line_of(f.span().start)),
            None if kind == ModelKind::Tokenizer => ("-".to_string(), row_line),
            None => {
                return Err(at(
                    row_line,
                    "family",
                    "missing (required unless kind = \"tokenizer\")".into(),
                ));
            }
        };
        let source = parse_source(raw.source.get_ref())
            .map_err(|e| at(line_of(raw.source.span().start), "source", e.to_string()))?;
        let row = ModelRow {
            id: raw.id.clone(),
            kind,
            family,
            source,
            files: raw.files.clone(),
            license: raw.license.clone().unwrap_or_else(|| "unknown".into()),
            defaults: raw.defaults.clone(),
            description: raw.description.clone(),
            store: raw.store.clone(),
        };
        if let Err((field, reason)) = row.check() {
            let line = if field == "family" {
                family_line
            } else {
                row_line
            };
            return Err(at(line, field, reason));
        }
        if rows.iter().any(|r| r.id == row.id) {
            return Err(at(row_line, "id", "defined twice in this file".into()));
        }
        rows.push(row);
    }
    Ok(rows)
}
