//! The one error type of the hub. Every variant carries the structured facts (path, source text,
//! expected vs actual digest, ...) so the CLI can print a precise message and callers can match.

use std::path::PathBuf;

/// Everything that can go wrong while resolving, listing or pulling a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Neither `FAVLO_HOME` nor `HOME` is set.
    #[error("cannot find the Favlo home: set FAVLO_HOME (or HOME)")]
    NoHome,
    /// A model name that could escape the models directory or is otherwise unusable.
    #[error("invalid model name `{name}`: {reason}")]
    BadName { name: String, reason: String },
    /// A source string that does not parse.
    #[error("invalid model source `{input}`: {reason}")]
    BadSource { input: String, reason: String },
    /// `models.toml` (or another registry text) is malformed.
    #[error("{path}: {message}")]
    BadRegistry { path: PathBuf, message: String },
    /// A pull was asked for a model id that no registry row names.
    #[error("unknown model `{id}` (see `favlo models`)")]
    UnknownModel { id: String },
    /// A filesystem operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// An external client (python3, pip, npm) is not installed.
    #[error("`{tool}` is needed for this source but was not found: {hint}")]
    ToolMissing { tool: String, hint: String },
    /// An external client ran but failed.
    #[error("`{command}` failed ({status}): {stderr_tail}")]
    ToolFailed {
        command: String,
        status: String,
        stderr_tail: String,
    },
    /// A package archive could not be read, or lacks a file we need.
    #[error("package archive {archive}: {reason}")]
    Archive { archive: PathBuf, reason: String },
    /// Downloaded or extracted bytes do not match the pinned digest or size.
    #[error(
        "{file}: expected sha256 {expected} ({expected_size} bytes), got {actual} ({actual_size} bytes)"
    )]
    Mismatch {
        file: String,
        expected: String,
        expected_size: u64,
        actual: String,
        actual_size: u64,
    },
    /// An HTTP request failed at the transport level.
    #[error("request to {url} failed: {reason}")]
    Http { url: String, reason: String },
    /// The server answered with an unexpected status.
    #[error("{url} answered HTTP {status}{hint}")]
    HttpStatus {
        url: String,
        status: u16,
        hint: String,
    },
    /// A response body (e.g. the hub's JSON listing) is not what we expect.
    #[error("unexpected response from {url}: {reason}")]
    BadResponse { url: String, reason: String },
    /// A registry row is inconsistent with its source (e.g. several parts but several files).
    #[error("model `{id}`: {reason}")]
    BadRow { id: String, reason: String },
}

impl HubError {
    /// Shorthand for [`HubError::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HubError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
