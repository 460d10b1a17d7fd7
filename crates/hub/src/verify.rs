//! Hashing while writing, and checking results against pinned digests. Every byte the hub stores
//! passes through [`HashingFile`], so the digest is computed in the same pass as the write.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{HubError, Progress};

/// Digest and size of a written file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashed {
    /// Lowercase hex sha256.
    pub sha256: String,
    pub size: u64,
}

/// Lowercase hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// sha256 of a whole file.
pub fn sha256_file(path: &Path) -> Result<Hashed, HubError> {
    let mut f = File::open(path).map_err(|e| HubError::io("open", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| HubError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Hashed {
        sha256: hex(&h.finalize()),
        size,
    })
}

/// Fails with [`HubError::Mismatch`] unless `actual` has the expected digest and size.
pub fn check(
    file: &str,
    expected_sha256: &str,
    expected_size: u64,
    actual: &Hashed,
) -> Result<(), HubError> {
    if actual.sha256 == expected_sha256 && actual.size == expected_size {
        return Ok(());
    }
    Err(HubError::Mismatch {
        file: file.to_string(),
        expected: expected_sha256.to_string(),
        expected_size,
        actual: actual.sha256.clone(),
        actual_size: actual.size,
    })
}

/// A file being written with a running sha256 (optionally continuing from existing content).
pub struct HashingFile {
    path: PathBuf,
    out: BufWriter<File>,
    hasher: Sha256,
    size: u64,
}

impl HashingFile {
    /// Creates (truncates) `path`, creating parent directories.
    pub fn create(path: &Path) -> Result<HashingFile, HubError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| HubError::io("create", parent, e))?;
        }
        let f = File::create(path).map_err(|e| HubError::io("create", path, e))?;
        Ok(HashingFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, f),
            hasher: Sha256::new(),
            size: 0,
        })
    }

    /// Opens `path` for appending after hashing its current content (resumed downloads).
    pub fn resume(path: &Path) -> Result<HashingFile, HubError> {
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut f = File::open(path).map_err(|e| HubError::io("open", path, e))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| HubError::io("read", path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| HubError::io("open", path, e))?;
        Ok(HashingFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, f),
            hasher,
            size,
        })
    }

    /// Bytes written so far (including resumed content).
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends bytes.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), HubError> {
        self.out
            .write_all(bytes)
            .map_err(|e| HubError::io("write", &self.path, e))?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Copies a reader to the end of the file, reporting progress. `what` names the reader in
    /// errors; read errors become [`HubError::Io`] on `what`.
    pub fn copy_from(
        &mut self,
        reader: &mut dyn Read,
        what: &Path,
        progress: &dyn Progress,
    ) -> Result<u64, HubError> {
        let mut buf = vec![0u8; 1 << 20];
        let mut copied = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HubError::io("read", what, e)),
            };
            self.write_all(&buf[..n])?;
            copied += n as u64;
            progress.advance(n as u64);
        }
        Ok(copied)
    }

    /// Flushes and syncs the file; returns its digest and size.
    pub fn finish(self) -> Result<Hashed, HubError> {
        let HashingFile {
            path,
            out,
            hasher,
            size,
        } = self;
        let f = out
            .into_inner()
            .map_err(|e| HubError::io("write", &path, e.into_error()))?;
        f.sync_all().map_err(|e| HubError::io("sync", &path, e))?;
        Ok(Hashed {
            sha256: hex(&hasher.finalize()),
            size,
        })
    }
}
