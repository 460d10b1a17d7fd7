//! The zip side of a `torch.save` checkpoint: `<prefix>/data.pkl`,
//! `<prefix>/byteorder` and the storages `<prefix>/data/<key>`.
//!
//! Key design choice: torch writes storages uncompressed, so a stored entry is
//! kept as a byte range of the memory-mapped file (checked against the file
//! length); only a compressed entry (rare, e.g. re-zipped by hand) is inflated
//! into memory at open.

use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::ops::Range;
use std::path::Path;

use zip::CompressionMethod;

use super::error::TorchError;

/// Where one storage's bytes are.
pub enum StorageBytes {
    Range(Range<usize>),
    Owned(Vec<u8>),
}

/// The parsed archive.
pub struct Container {
    pub pickle_entry: String,
    pub pickle: Vec<u8>,
    pub storages: HashMap<String, StorageBytes>,
}

/// Largest `data.pkl` accepted (the pickle only describes tensors).
const MAX_PICKLE: u64 = 256 << 20;

pub fn read_container(path: &Path, bytes: &[u8]) -> Result<Container, TorchError> {
    let zerr = |reason: String| TorchError::Zip {
        path: path.to_path_buf(),
        reason,
    };
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| zerr(e.to_string()))?;
    let names: Vec<String> = archive
        .file_names_raw()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    let pickles: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .collect();
    let [pickle_entry] = pickles.as_slice() else {
        return Err(zerr(format!(
            "expected exactly one '<prefix>/data.pkl', found {}",
            pickles.len()
        )));
    };
    let pickle_entry = (*pickle_entry).clone();
    let prefix = pickle_entry.trim_end_matches("data.pkl").to_string();
    let read_whole = |archive: &mut zip::ZipArchive<Cursor<&[u8]>>,
                      name: &str,
                      limit: u64|
     -> Result<Vec<u8>, TorchError> {
        let mut f = archive
            .by_name(name)
            .map_err(|e| zerr(format!("{name}: {e}")))?;
        if f.size() > limit {
            return Err(zerr(format!("{name}: {} bytes is too large", f.size())));
        }
        let mut out = Vec::with_capacity(f.size() as usize);
        f.read_to_end(&mut out)
            .map_err(|e| zerr(format!("{name}: {e}")))?;
        Ok(out)
    };
    let pickle = read_whole(&mut archive, &pickle_entry, MAX_PICKLE)?;
    let byteorder = format!("{prefix}byteorder");
    if names.contains(&byteorder) {
        let order = read_whole(&mut archive, &byteorder, 16)?;
        if order.trim_ascii() != b"little" {
            return Err(zerr(format!(
                "{byteorder}: byte order '{}' is not supported (only little)",
                String::from_utf8_lossy(&order)
            )));
        }
    }
    let data_prefix = format!("{prefix}data/");
    let mut storages = HashMap::new();
    for (i, name) in names.iter().enumerate() {
        let Some(key) = name.strip_prefix(&data_prefix) else {
            continue;
        };
        if key.is_empty() || key.contains('/') {
            continue;
        }
        let f = archive
            .by_index_raw(i)
            .map_err(|e| zerr(format!("{name}: {e}")))?;
        let stored = f.compression() == CompressionMethod::Stored
            && f.compressed_size() == f.size()
            && !f.encrypted();
        let range = f.data_start().and_then(|s| {
            let s = usize::try_from(s).ok()?;
            let e = s.checked_add(usize::try_from(f.size()).ok()?)?;
            (e <= bytes.len()).then_some(s..e)
        });
        let entry = match (stored, range) {
            (true, Some(r)) => StorageBytes::Range(r),
            _ => {
                drop(f);
                StorageBytes::Owned(read_whole(&mut archive, name, bytes.len() as u64 * 1032)?)
            }
        };
        storages.insert(key.to_string(), entry);
    }
    Ok(Container {
        pickle_entry,
        pickle,
        storages,
    })
}
