//! `<model dir>/manifest.json`: what was pulled, from where, with which digests. It is written last
//! (inside the staging directory, before the final rename), so a model directory with a manifest
//! is complete by construction; [`is_pulled`] still re-checks sizes to catch later damage.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::registry::{ModelKind, ModelRow};
use crate::{Home, HubError};

/// File name of the manifest inside a model directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// One stored file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

/// The record of one pull.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Registry id, or the directory name for a pull by source.
    pub id: String,
    /// Canonical source string.
    pub source: String,
    pub files: Vec<ManifestFile>,
    pub license: String,
    pub kind: Option<ModelKind>,
    pub family: Option<String>,
    /// The commit an `hf:` revision resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// RFC 3339 UTC time of the pull.
    pub pulled_at: String,
}

impl Manifest {
    /// Reads `<dir>/manifest.json`.
    pub fn read(dir: &Path) -> Result<Manifest, HubError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| HubError::io("read", &path, e))?;
        serde_json::from_str(&text).map_err(|e| HubError::BadResponse {
            url: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Writes `<dir>/manifest.json` (pretty JSON, synced).
    pub fn write(&self, dir: &Path) -> Result<(), HubError> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| HubError::BadResponse {
            url: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut file = crate::verify::HashingFile::create(&path)?;
        file.write_all(text.as_bytes())?;
        file.write_all(b"\n")?;
        file.finish().map(|_| ())
    }

    /// True when every listed file exists with its recorded size.
    pub fn files_present(&self, dir: &Path) -> bool {
        self.files.iter().all(|f| {
            std::fs::metadata(dir.join(&f.path)).is_ok_and(|m| m.is_file() && m.len() == f.size)
        })
    }
}

/// True when the row's directory has a manifest for the row's source and every pinned file (or,
/// for unpinned rows, every manifest file) is present with the right size.
pub fn is_pulled(home: &Home, row: &ModelRow) -> bool {
    let Ok(dir) = home.model_dir(row.store_name()) else {
        return false;
    };
    let Ok(manifest) = Manifest::read(&dir) else {
        return false;
    };
    if manifest.source != row.source.to_string() || !manifest.files_present(&dir) {
        return false;
    }
    row.files.iter().all(|pin| {
        manifest
            .files
            .iter()
            .any(|f| f.path == pin.path && f.sha256 == pin.sha256 && f.size == pin.size)
    })
}

/// Every model directory under `<home>/models` that has a readable manifest, sorted by name.
pub fn list_pulled(home: &Home) -> Result<Vec<(String, Manifest)>, HubError> {
    let dir = home.models_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(HubError::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| HubError::io("list", &dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(m) = Manifest::read(&entry.path()) {
            out.push((name, m));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Deletes `<home>/models/<name>`. Returns `false` when it did not exist.
pub fn remove_model(home: &Home, name: &str) -> Result<bool, HubError> {
    let dir = home.model_dir(name)?;
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(HubError::io("remove", dir, e)),
    }
}

/// Formats a UNIX time as RFC 3339 UTC (`2025-01-31T12:00:00Z`).
pub fn rfc3339_utc(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    // Civil-from-days (proleptic Gregorian), counting eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339_utc(secs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        // Reference values from `date -u -d @<secs> +%FT%TZ`.
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339_utc(4_102_444_800), "2100-01-01T00:00:00Z");
    }
}
