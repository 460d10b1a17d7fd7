//! Resolution of ONNX external data (`data_location = EXTERNAL` with
//! `location`/`offset`/`length` entries).
//!
//! Key design choice: a location is accepted only as a relative path of plain
//! components inside the model's folder, and after resolving symlinks it must
//! still lie inside that folder; the byte range is checked against the file size
//! at open, so later reads cannot run short or escape the model folder.

use std::path::{Component, Path, PathBuf};

use super::error::OnnxError;
use super::types::TensorData;

/// Validates one tensor's external-data entries; `need` is the payload size its
/// shape and data type require.
pub fn resolve_external(
    model: &Path,
    base_dir: Option<&Path>,
    tensor: &str,
    entries: &[(String, String)],
    need: u64,
) -> Result<TensorData, OnnxError> {
    let fail = |reason: String| OnnxError::ExternalData {
        path: model.to_path_buf(),
        tensor: tensor.to_string(),
        reason,
    };
    let get = |key: &str| entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
    let number = |key: &str| -> Result<Option<u64>, OnnxError> {
        match get(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| fail(format!("{key} '{v}' is not a non-negative integer"))),
        }
    };
    let location = get("location").ok_or_else(|| fail("no 'location' entry".into()))?;
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?;
    if let Some(len) = length
        && len != need
    {
        return Err(fail(format!(
            "length {len} but the tensor's shape and type need {need} bytes"
        )));
    }
    let Some(base_dir) = base_dir else {
        return Err(fail(
            "the model was not opened from a file, so external data cannot be located".into(),
        ));
    };
    let rel = Path::new(location);
    let plain = !location.is_empty()
        && rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain {
        return Err(fail(format!(
            "location '{location}' must be a relative path inside the model's folder"
        )));
    }
    let joined = base_dir.join(rel);
    let io = |path: &Path, e: std::io::Error| OnnxError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let real = joined.canonicalize().map_err(|e| io(&joined, e))?;
    let real_base = base_dir.canonicalize().map_err(|e| io(base_dir, e))?;
    if !real.starts_with(&real_base) {
        return Err(fail(format!(
            "location '{location}' resolves outside the model's folder"
        )));
    }
    let meta = std::fs::metadata(&real).map_err(|e| io(&real, e))?;
    if !meta.is_file() {
        return Err(fail(format!("location '{location}' is not a regular file")));
    }
    let end = offset
        .checked_add(need)
        .ok_or_else(|| fail("offset + length overflows".into()))?;
    if end > meta.len() {
        return Err(fail(format!(
            "bytes {offset}..{end} lie beyond the end of '{location}' ({} bytes)",
            meta.len()
        )));
    }
    Ok(TensorData::External {
        path: PathBuf::from(&real),
        offset,
        length: need,
    })
}
