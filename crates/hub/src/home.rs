//! The Favlo home directory (`FAVLO_HOME`, else `~/.favlo`) and the layout of the model store
//! under it. Model names are validated here, once, so no caller can build a path that escapes
//! `<home>/models/`.

use std::path::{Path, PathBuf};

use crate::HubError;

/// The root of Favlo's on-disk state. Models live in `<root>/models/<name>/`, user registry rows
/// in `<root>/models.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// `FAVLO_HOME` if set and non-empty, else `$HOME/.favlo`.
    pub fn from_env() -> Result<Home, HubError> {
        if let Some(dir) = std::env::var_os("FAVLO_HOME").filter(|v| !v.is_empty()) {
            return Ok(Home::new(dir));
        }
        match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => Ok(Home::new(Path::new(&home).join(".favlo"))),
            None => Err(HubError::NoHome),
        }
    }

    /// A home rooted at an explicit directory (tests, `--home`).
    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/models`.
    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    /// `<root>/models.toml`, the user's extra registry rows.
    pub fn registry_path(&self) -> PathBuf {
        self.root.join("models.toml")
    }

    /// `<root>/models/<name>`, after checking that `name` is a plain directory name.
    pub fn model_dir(&self, name: &str) -> Result<PathBuf, HubError> {
        validate_name(name)?;
        Ok(self.models_dir().join(name))
    }
}

/// Accepts names made of ASCII letters, digits, `.`, `_`, `-` that do not start with `.` or `-`
/// (no hidden directories: the store keeps its staging directories hidden) and are at most 128
/// bytes. Everything path-like (`/`, `\`, `..`, `~`, empty) is refused.
pub fn validate_name(name: &str) -> Result<(), HubError> {
    let bad = |reason: &str| {
        Err(HubError::BadName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 128 {
        return bad("it is longer than 128 bytes");
    }
    if name.contains(['/', '\\']) {
        return bad("it must not contain path separators");
    }
    if name.starts_with('.') || name.starts_with('-') {
        return bad("it must not start with `.` or `-`");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!(
            "character `{c}` is not allowed (use letters, digits, `.`, `_`, `-`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn path_like_names_are_refused() {
        let home = Home::new("/tmp/favlo-home");
        for name in [
            "", ".", "..", "../x", "a/b", "a\\b", "/abs", ".hidden", "-flag", "~", "a b", "x:y",
        ] {
            assert!(
                matches!(home.model_dir(name), Err(HubError::BadName { .. })),
                "{name:?} accepted"
            );
        }
        let err = home.model_dir("../etc").unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid model name `../etc`: it must not contain path separators"
        );
        assert_eq!(
            home.model_dir("smollm2-135m-instruct").unwrap(),
            Path::new("/tmp/favlo-home/models/smollm2-135m-instruct")
        );
        assert!(home.model_dir("Qwen2.5-0.5B_x").is_ok());
        assert!(home.model_dir(&"a".repeat(129)).is_err());
    }
}
