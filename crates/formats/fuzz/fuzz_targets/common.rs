//! Shared helper of the file-path fuzz targets: one scratch file per process.
//!
//! Key design choice: the readers under test take a path (that is the entry
//! point users hit), so each input is written to the same per-process file.

use std::path::PathBuf;

/// Writes `data` to this process's scratch file (with `ext`) and returns its path.
pub fn scratch_file(data: &[u8], ext: &str) -> Option<PathBuf> {
    let path = std::env::temp_dir().join(format!("favlo-fuzz-{}.{ext}", std::process::id()));
    std::fs::write(&path, data).ok()?;
    Some(path)
}

/// Decoding bigger tensors only slows the fuzzer down without testing more code.
pub const MAX_DECODE_ELEMS: u64 = 1 << 20;
