//! A minimal blocking client for the Hugging Face hub HTTP API: list a revision's files (with LFS
//! sha256 and sizes) and download files with resume.
//!
//! Downloads stream into `<dest>.part`; an interrupted download keeps its `.part` and the next
//! attempt asks for the rest with `Range: bytes=<len>-`. A `200` answer to a ranged request
//! restarts from zero. The digest is computed while writing (resumed bytes are re-hashed from
//! disk first), checked, and only then is the `.part` renamed into place; a mismatching `.part`
//! is deleted.

use std::path::Path;

use crate::source::HfSource;
use crate::verify::{Hashed, HashingFile, check};
use crate::{HubError, Progress};

/// The hub's own documented default for `HF_ENDPOINT`.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

/// One file of a repository revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfFile {
    pub path: String,
    pub size: Option<u64>,
    /// Known for LFS files.
    pub sha256: Option<String>,
}

/// A resolved revision: the commit it points at and its files.
#[derive(Clone, Debug)]
pub struct HfListing {
    pub commit: String,
    pub files: Vec<HfFile>,
    /// `cardData.license` when the model card declares one.
    pub license: Option<String>,
}

/// Blocking hub client (ureq with rustls; honours the usual proxy environment variables).
pub struct HfClient {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<String>,
}

impl HfClient {
    /// Endpoint from `HF_ENDPOINT` (default [`DEFAULT_HF_ENDPOINT`]), token from `HF_TOKEN`.
    pub fn from_env() -> HfClient {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string());
        let token = std::env::var("HF_TOKEN")
            .ok()
            .filter(|s| !s.trim().is_empty());
        HfClient::new(&endpoint, token)
    }

    /// A client for an explicit endpoint (tests use a local server).
    pub fn new(endpoint: &str, token: Option<String>) -> HfClient {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .user_agent(concat!("favlo/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        HfClient {
            agent,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token,
        }
    }

    fn get(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let req = self.agent.get(url);
        match &self.token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    /// Resolves the revision (default `main`) and lists its files.
    pub fn list(&self, src: &HfSource) -> Result<HfListing, HubError> {
        let rev = src.revision.as_deref().unwrap_or("main");
        let url = format!(
            "{}/api/models/{}/revision/{}?blobs=true",
            self.endpoint,
            src.repo,
            encode_segment(rev)
        );
        let resp = self.get(&url).call().map_err(|e| http_err(&url, e))?;
        status_ok(&url, resp.status().as_u16(), false)?;
        let body = resp
            .into_body()
            .read_to_string()
            .map_err(|e| http_err(&url, e))?;
        parse_listing(&body).map_err(|reason| HubError::BadResponse { url, reason })
    }

    /// The download URL of a file at a commit.
    pub fn file_url(&self, repo: &str, commit: &str, path: &str) -> String {
        let path: Vec<String> = path.split('/').map(encode_segment).collect();
        format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.endpoint,
            path.join("/")
        )
    }

    /// Downloads `file` to `dest` (through `dest.part`, resuming it if present) and verifies it
    /// against `expected` (`(sha256, size)`, from a pin or the LFS metadata) when given.
    pub fn download(
        &self,
        repo: &str,
        commit: &str,
        file: &HfFile,
        expected: Option<(&str, u64)>,
        dest: &Path,
        progress: &dyn Progress,
    ) -> Result<Hashed, HubError> {
        let url = self.file_url(repo, commit, &file.path);
        let part = dest.with_file_name(format!(
            "{}.part",
            dest.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        if let Some(parent) = part.parent() {
            std::fs::create_dir_all(parent).map_err(|e| HubError::io("create", parent, e))?;
        }
        let total = expected.map(|(_, s)| s).or(file.size);
        let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if total.is_some_and(|t| have > t) {
            have = 0;
        }
        let hashed = if have > 0 && total == Some(have) {
            // A previous attempt got every byte but did not finish; just verify.
            HashingFile::resume(&part)?.finish()?
        } else {
            self.fetch_into(&url, &part, have, total, &file.path, progress)?
        };
        let verdict = match expected {
            Some((sha, size)) => check(&file.path, sha, size, &hashed),
            None => match (&file.sha256, file.size) {
                (Some(sha), Some(size)) => check(&file.path, sha, size, &hashed),
                (None, Some(size)) if size != hashed.size => {
                    check(&file.path, "(unknown)", size, &hashed)
                }
                _ => Ok(()),
            },
        };
        if let Err(e) = verdict {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        std::fs::rename(&part, dest).map_err(|e| HubError::io("rename", &part, e))?;
        Ok(hashed)
    }

    fn fetch_into(
        &self,
        url: &str,
        part: &Path,
        have: u64,
        total: Option<u64>,
        label: &str,
        progress: &dyn Progress,
    ) -> Result<Hashed, HubError> {
        let mut req = self.get(url);
        if have > 0 {
            req = req.header("Range", &format!("bytes={have}-"));
        }
        let resp = req.call().map_err(|e| http_err(url, e))?;
        let status = resp.status().as_u16();
        if status == 416 && have > 0 {
            // Our .part is not a prefix the server can continue; start over.
            std::fs::remove_file(part).map_err(|e| HubError::io("remove", part, e))?;
            return self.fetch_into(url, part, 0, total, label, progress);
        }
        status_ok(url, status, true)?;
        let mut out = if status == 206 {
            HashingFile::resume(part)?
        } else {
            HashingFile::create(part)?
        };
        let resumed = out.size();
        progress.start(&format!("download {label}"), total);
        if resumed > 0 {
            progress.note(&format!("resuming {label} at {resumed} bytes"));
            progress.set_position(resumed);
        }
        let mut reader = resp.into_body().into_reader();
        out.copy_from(&mut reader, Path::new(url), progress)?;
        progress.finish();
        out.finish()
    }
}

fn http_err(url: &str, e: ureq::Error) -> HubError {
    HubError::Http {
        url: url.to_string(),
        reason: e.to_string(),
    }
}

fn status_ok(url: &str, status: u16, partial_ok: bool) -> Result<(), HubError> {
    if status == 200 || (partial_ok && status == 206) {
        return Ok(());
    }
    let hint = match status {
        401 | 403 => " (gated or private repository: accept its terms and set HF_TOKEN)",
        404 => " (no such repository, revision or file)",
        429 => " (rate limited: retry later or set HF_TOKEN)",
        _ => "",
    };
    Err(HubError::HttpStatus {
        url: url.to_string(),
        status,
        hint: hint.to_string(),
    })
}

/// Parses the JSON of `GET /api/models/{repo}/revision/{rev}?blobs=true`.
pub fn parse_listing(body: &str) -> Result<HfListing, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let commit = v
        .get("sha")
        .and_then(|s| s.as_str())
        .ok_or("no `sha` field")?
        .to_string();
    if commit.is_empty() || !commit.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("`sha` `{commit}` is not a commit id"));
    }
    let siblings = v
        .get("siblings")
        .and_then(|s| s.as_array())
        .ok_or("no `siblings` array")?;
    let mut files = Vec::with_capacity(siblings.len());
    for s in siblings {
        let path = s
            .get("rfilename")
            .and_then(|p| p.as_str())
            .ok_or("a sibling without `rfilename`")?;
        crate::source::check_rel_path(path).map_err(|e| format!("file name: {e}"))?;
        let lfs = s.get("lfs");
        let sha256 = lfs
            .and_then(|l| l.get("sha256"))
            .and_then(|h| h.as_str())
            .map(str::to_ascii_lowercase);
        let size = lfs
            .and_then(|l| l.get("size"))
            .or_else(|| s.get("size"))
            .and_then(|n| n.as_u64());
        files.push(HfFile {
            path: path.to_string(),
            size,
            sha256,
        });
    }
    let license = v
        .get("cardData")
        .and_then(|c| c.get("license"))
        .and_then(|l| l.as_str())
        .map(str::to_string);
    Ok(HfListing {
        commit,
        files,
        license,
    })
}

/// Percent-encodes one URL path segment (everything but RFC 3986 unreserved characters).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
