//! What the server needs from the model registry, as a trait.
//!
//! Key design choice: the server sees rows through [`Catalog`] only, so it
//! builds and tests without the hub (and its download stack); the binary
//! implements it over `favlo_hub::{Registry, Home, is_pulled, pull}`. Lookups
//! are exact id matches in the registry, never paths, so a path-like `model`
//! (`../x`, `/etc/passwd`) can only ever be a 404.

use favlo_pipeline::{ModelKind, ModelSpec};

/// One registry row as `/v1/models` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogRow {
    /// Registry id.
    pub id: String,
    /// What it serves.
    pub kind: ModelKind,
    /// Pipeline family.
    pub family: String,
    /// Whether its files are in the store.
    pub pulled: bool,
    /// One line for people.
    pub description: String,
}

/// The registry and store, as the server uses them. Methods may block (they
/// are called from blocking threads).
pub trait Catalog: Send + Sync {
    /// Every row that can be served (tokenizer-only rows left out).
    fn rows(&self) -> Vec<CatalogRow>;

    /// The row with exactly this id.
    fn row(&self, id: &str) -> Option<CatalogRow> {
        self.rows().into_iter().find(|r| r.id == id)
    }

    /// The spec to open a pulled row with. `Err` carries a message for a 500.
    fn spec(&self, id: &str) -> Result<ModelSpec, String>;

    /// Pull the row's files (blocking; progress goes to the log). `Err` is a
    /// message for the client (503).
    fn pull(&self, id: &str) -> Result<(), String>;

    /// The default row for a kind, used when a request omits nothing but the
    /// registry wants one (e.g. a UI); `None` when there is none.
    fn default_for(&self, kind: ModelKind) -> Option<String> {
        self.rows()
            .into_iter()
            .find(|r| r.kind == kind)
            .map(|r| r.id)
    }
}
