//! The media store: `<home>/<kind>/<id>.<ext>` on disk, written before it is served.
//!
//! Key design choice: the file is the result. A job's output is saved (a
//! sibling `.tmp`, then a rename, so a reader never sees half a file), the
//! served download is derived from that saved file (MP4 from the saved AVI,
//! FLAC beside the saved WAV), and every read goes to the disk. Ids are
//! checked before any path is built: only `[A-Za-z0-9_-]`, so a separator,
//! `.` or `..` can never reach the filesystem.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use favlo_pipeline::{MediaFile, MediaKind};

/// Default lifetime of a kept file: one day.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The key in `<home>/settings.json` that sets the lifetime, in seconds.
pub const TTL_KEY: &str = "media_ttl_seconds";

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The id is not a plain token.
    #[error("invalid media id `{id}`: use letters, digits, `-` and `_` only")]
    BadId {
        /// The id as given (for the message).
        id: String,
    },
    /// No file for this id.
    #[error("no {kind} with id `{id}`")]
    NotFound {
        /// Kind directory name.
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// The disk said no.
    #[error("media store I/O on {path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The directory name of a kind.
pub fn kind_dir(kind: MediaKind) -> &'static str {
    match kind {
        MediaKind::Image => "images",
        MediaKind::Video => "videos",
        MediaKind::Music => "music",
        MediaKind::Voice => "voice",
    }
}

/// The kind of a directory name (`favlo://<dir>/<id>`).
pub fn kind_of_dir(dir: &str) -> Option<MediaKind> {
    match dir {
        "images" => Some(MediaKind::Image),
        "videos" => Some(MediaKind::Video),
        "music" => Some(MediaKind::Music),
        "voice" => Some(MediaKind::Voice),
        _ => None,
    }
}

/// MIME type of a stored extension.
pub fn mime_of(ext: &str) -> &'static str {
    match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "mp4" => "video/mp4",
        "avi" => "video/x-msvideo",
        "wav" => "audio/wav",
        "flac" => "audio/flac",
        _ => "application/octet-stream",
    }
}

/// Refuse anything but a short plain token.
pub fn check_id(id: &str) -> Result<(), StoreError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadId {
            id: id.chars().take(64).collect(),
        })
    }
}

/// The store rooted at the Favlo home.
#[derive(Clone, Debug)]
pub struct MediaStore {
    root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `bytes` to `path` through a sibling `.tmp` and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    })
}

/// A compressed or served form derived from the saved file.
fn derive(saved: &MediaFile) -> Vec<(&'static str, Vec<u8>)> {
    match saved.extension.as_str() {
        "avi" => match favlo_codec::mp4_from_avi(&saved.bytes) {
            Ok(mp4) => vec![("mp4", mp4)],
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the MP4; the AVI stays the only download");
                vec![]
            }
        },
        "wav" => match favlo_codec::flac_from_wav(&saved.bytes) {
            Ok(flac) => vec![("flac", flac)],
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the FLAC; the WAV stays the only download");
                vec![]
            }
        },
        _ => vec![],
    }
}

/// What a kind serves by default, best first.
fn preference(kind: MediaKind) -> &'static [&'static str] {
    match kind {
        MediaKind::Image => &["png", "jpg"],
        MediaKind::Video => &["mp4", "avi"],
        MediaKind::Music | MediaKind::Voice => &["wav", "flac"],
    }
}

impl MediaStore {
    /// A store under `root` (the Favlo home; kind directories are made on write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        MediaStore { root: root.into() }
    }

    /// The home it lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, kind: MediaKind, id: &str, ext: &str) -> PathBuf {
        self.root.join(kind_dir(kind)).join(format!("{id}.{ext}"))
    }

    /// Save a job's file, then derive its downloads. Returns the extensions
    /// now on disk (saved first).
    pub fn save(
        &self,
        kind: MediaKind,
        id: &str,
        file: &MediaFile,
    ) -> Result<Vec<String>, StoreError> {
        check_id(id)?;
        if file.extension.is_empty() || !file.extension.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(StoreError::BadId {
                id: format!("{id}.{}", file.extension),
            });
        }
        let dir = self.root.join(kind_dir(kind));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let saved = self.path(kind, id, &file.extension);
        write_atomic(&saved, &file.bytes)?;
        let mut exts = vec![file.extension.clone()];
        for (ext, bytes) in derive(file) {
            write_atomic(&self.path(kind, id, ext), &bytes)?;
            exts.push(ext.to_string());
        }
        Ok(exts)
    }

    /// The extensions stored for an id.
    pub fn extensions(&self, kind: MediaKind, id: &str) -> Result<Vec<String>, StoreError> {
        check_id(id)?;
        let mut out = Vec::new();
        for ext in ["png", "jpg", "mp4", "avi", "wav", "flac"] {
            if self.path(kind, id, ext).is_file() {
                out.push(ext.to_string());
            }
        }
        Ok(out)
    }

    /// The served file: `want` when it exists, else the kind's preferred one.
    pub fn served_path(
        &self,
        kind: MediaKind,
        id: &str,
        want: Option<&str>,
    ) -> Result<(PathBuf, &'static str), StoreError> {
        let have = self.extensions(kind, id)?;
        let pick = want
            .filter(|w| have.iter().any(|h| h == w))
            .or_else(|| {
                preference(kind)
                    .iter()
                    .copied()
                    .find(|p| have.iter().any(|h| h == p))
            })
            .or_else(|| have.first().map(String::as_str));
        match pick {
            Some(ext) => Ok((self.path(kind, id, ext), mime_of(ext))),
            None => Err(StoreError::NotFound {
                kind: kind_dir(kind),
                id: id.to_string(),
            }),
        }
    }

    /// Read the served file's bytes and its MIME type.
    pub fn read(
        &self,
        kind: MediaKind,
        id: &str,
        want: Option<&str>,
    ) -> Result<(Vec<u8>, &'static str), StoreError> {
        let (path, mime) = self.served_path(kind, id, want)?;
        match std::fs::read(&path) {
            Ok(b) => Ok((b, mime)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::NotFound {
                kind: kind_dir(kind),
                id: id.to_string(),
            }),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// Remove every file of an id (cancel or expiry).
    pub fn remove(&self, kind: MediaKind, id: &str) -> Result<(), StoreError> {
        for ext in self.extensions(kind, id)? {
            let p = self.path(kind, id, &ext);
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
        Ok(())
    }

    /// The lifetime of a kept file: `settings.json`'s [`TTL_KEY`] in seconds,
    /// else [`DEFAULT_TTL`]. A malformed file is logged and ignored.
    pub fn ttl(&self) -> Duration {
        let path = self.root.join("settings.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return DEFAULT_TTL;
        };
        match serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get(TTL_KEY).map(|x| x.as_u64()))
        {
            Some(Some(s)) => Duration::from_secs(s),
            None => DEFAULT_TTL,
            Some(None) => {
                tracing::warn!(path = %path.display(), key = TTL_KEY, "not a non-negative integer; using one day");
                DEFAULT_TTL
            }
        }
    }

    /// Delete files whose age has reached `ttl`; returns the `(kind, id)`
    /// pairs that lost a file, so the job table can drop them.
    pub fn sweep(&self, ttl: Duration, now: SystemTime) -> Vec<(MediaKind, String)> {
        let mut gone = Vec::new();
        for kind in [
            MediaKind::Image,
            MediaKind::Video,
            MediaKind::Music,
            MediaKind::Voice,
        ] {
            let dir = self.root.join(kind_dir(kind));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                    continue;
                };
                let stem = stem.split('.').next().unwrap_or(stem).to_string();
                if check_id(&stem).is_err() {
                    continue;
                }
                let age = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| now.duration_since(m).ok());
                if age.is_some_and(|a| a >= ttl) {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {
                            tracing::info!(path = %path.display(), "expired media file removed");
                            if !gone.iter().any(|(k, i)| *k == kind && *i == stem) {
                                gone.push((kind, stem));
                            }
                        }
                        Err(e) => {
                            tracing::warn!(path = %path.display(), error = %e, "cannot remove an expired file")
                        }
                    }
                }
            }
        }
        gone
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn png() -> MediaFile {
        MediaFile {
            mime: "image/png".into(),
            extension: "png".into(),
            bytes: b"\x89PNG fake".to_vec(),
        }
    }

    #[test]
    fn ids_that_could_escape_are_refused() {
        for bad in [
            "", ".", "..", "../x", "a/b", "a\\b", "a.b", "/etc", "x\0", "é",
        ] {
            assert!(check_id(bad).is_err(), "{bad:?} accepted");
        }
        let long = "a".repeat(129);
        assert!(check_id(&long).is_err());
        for good in ["abc", "img_01-x", "0"] {
            check_id(good).unwrap();
        }
    }

    #[test]
    fn save_read_remove_round_trip() {
        let home = tempfile::tempdir().unwrap();
        let s = MediaStore::new(home.path());
        let exts = s.save(MediaKind::Image, "j1", &png()).unwrap();
        assert_eq!(exts, vec!["png"]);
        assert!(home.path().join("images/j1.png").is_file());
        assert!(!home.path().join("images/j1.png.tmp").exists());
        let (bytes, mime) = s.read(MediaKind::Image, "j1", None).unwrap();
        assert_eq!(
            (bytes.as_slice(), mime),
            (png().bytes.as_slice(), "image/png")
        );
        assert!(matches!(
            s.read(MediaKind::Image, "nope", None),
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.read(MediaKind::Image, "../j1", None),
            Err(StoreError::BadId { .. })
        ));
        s.remove(MediaKind::Image, "j1").unwrap();
        assert!(s.read(MediaKind::Image, "j1", None).is_err());
    }

    #[test]
    fn ttl_from_settings_and_sweep() {
        let home = tempfile::tempdir().unwrap();
        let s = MediaStore::new(home.path());
        assert_eq!(s.ttl(), DEFAULT_TTL);
        std::fs::write(
            home.path().join("settings.json"),
            r#"{"media_ttl_seconds": 5}"#,
        )
        .unwrap();
        assert_eq!(s.ttl(), Duration::from_secs(5));
        std::fs::write(
            home.path().join("settings.json"),
            r#"{"media_ttl_seconds": -1}"#,
        )
        .unwrap();
        assert_eq!(s.ttl(), DEFAULT_TTL);
        s.save(MediaKind::Image, "old", &png()).unwrap();
        let now = SystemTime::now();
        assert!(s.sweep(Duration::from_secs(3600), now).is_empty());
        let later = now + Duration::from_secs(7200);
        let gone = s.sweep(Duration::from_secs(3600), later);
        assert_eq!(gone, vec![(MediaKind::Image, "old".to_string())]);
        assert!(!home.path().join("images/old.png").exists());
    }
}
