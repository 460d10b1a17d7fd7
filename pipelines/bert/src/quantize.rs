//! `quantize_int8`: write an int8 copy of a BERT/RoBERTa checkpoint (what
//! `favlo quantize --format int8` runs).
//!
//! Format (version 2): the same safetensors names as the source; every encoder linear weight
//! (`encoder.layer.N.{attention.self.query,key,value, attention.output.dense,
//! intermediate.dense, output.dense}.weight`) is stored as `I8 [n, k]` beside a new
//! `<name>_scale` (`…weight_scale`, `F32 [n, ceil(k/64)]`, one symmetric scale per output row and
//! group of 64 input columns, see [`crate::int8`]); every other tensor (embeddings, norms,
//! biases) is kept as f32. The header metadata carries `favlo.quantization = int8-group`,
//! `favlo.int8.group_size = 64` and `favlo.int8.version = 2`, and `config.json` gains a
//! `favlo_quantization` entry saying the same. Every other file of the directory (tokenizer,
//! sentence-transformers configs) is copied unchanged. Version 1 files (`int8-per-channel`,
//! scales `F32 [n]`) still load: one group of `k`. Key choice: plain safetensors, so the file
//! stays inspectable with any safetensors reader, and the loader detects int8 purely by the
//! `_scale` tensors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use favlo_formats::safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};

use crate::config::read_json;
use crate::error::BertError;
use crate::int8::{GROUP, effective_group, quantize_groups};
use crate::weights::checkpoint_file;

/// What [`quantize_int8`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizeReport {
    /// The written safetensors file.
    pub checkpoint: PathBuf,
    /// Linear weights quantized.
    pub quantized: usize,
    /// Tensors kept in f32.
    pub kept: usize,
    /// Size of the source and written checkpoint files.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Input columns per scale (of the widest linear; narrower ones use one group of `k`).
    pub group_size: usize,
}

/// The safetensors metadata keys and values the writer records.
pub mod meta {
    /// Scheme name: `int8-group` (version 2) or `int8-per-channel` (version 1, per-row scales).
    pub const QUANTIZATION_KEY: &str = "favlo.quantization";
    pub const QUANTIZATION: &str = "int8-group";
    /// Input columns per scale (decimal).
    pub const GROUP_SIZE_KEY: &str = "favlo.int8.group_size";
    /// Format version (decimal): 2 = group-wise scales.
    pub const VERSION_KEY: &str = "favlo.int8.version";
    pub const VERSION: u32 = 2;
}

/// Whether `name` is an encoder linear weight that int8 applies to.
pub fn is_quantized_linear(name: &str) -> bool {
    let Some(rest) = name.split("encoder.layer.").nth(1) else {
        return false;
    };
    let Some((_, tail)) = rest.split_once('.') else {
        return false;
    };
    matches!(
        tail,
        "attention.self.query.weight"
            | "attention.self.key.weight"
            | "attention.self.value.weight"
            | "attention.output.dense.weight"
            | "intermediate.dense.weight"
            | "output.dense.weight"
    )
}

/// Quantize the checkpoint in `checkpoint_dir` into `out_dir` (created if missing) with
/// [`GROUP`] = 64 input columns per scale.
pub fn quantize_int8(checkpoint_dir: &Path, out_dir: &Path) -> Result<QuantizeReport, BertError> {
    quantize_int8_grouped(checkpoint_dir, out_dir, GROUP)
}

/// [`quantize_int8`] with `group` input columns per scale (≥ 1; groups wider than a linear's
/// `k` become one group of `k`).
pub fn quantize_int8_grouped(
    checkpoint_dir: &Path,
    out_dir: &Path,
    group: usize,
) -> Result<QuantizeReport, BertError> {
    let group = group.max(1);
    let src = checkpoint_file(checkpoint_dir);
    let st = SafeTensors::open(&src).map_err(|e| BertError::Checkpoint {
        path: src.clone(),
        reason: e.to_string(),
    })?;
    std::fs::create_dir_all(out_dir).map_err(|e| BertError::io(out_dir, e))?;

    // Owned bytes per output tensor: (name, dtype, shape, bytes).
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let (mut quantized, mut kept) = (0, 0);
    let mut names: Vec<String> = st.names().iter().map(|s| s.to_string()).collect();
    names.sort();
    for name in names {
        if name.ends_with("position_ids") {
            continue; // a buffer, not a weight: positions are computed
        }
        let (data, shape) = st.tensor_f32(&name).map_err(|e| BertError::Checkpoint {
            path: src.clone(),
            reason: format!("{name}: {e}"),
        })?;
        if is_quantized_linear(&name) && shape.len() == 2 {
            let (n, k) = (shape[0], shape[1]);
            let (q, scales) = quantize_groups(&data, n, k, group);
            let groups = k.div_ceil(effective_group(k, group));
            tensors.push((
                name.clone(),
                Dtype::I8,
                shape,
                q.iter().map(|&v| v as u8).collect(),
            ));
            tensors.push((
                format!("{name}_scale"),
                Dtype::F32,
                vec![n, groups],
                scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
            ));
            quantized += 1;
        } else {
            tensors.push((
                name,
                Dtype::F32,
                shape,
                data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ));
            kept += 1;
        }
    }
    let mut views = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, bytes) in &tensors {
        let view = TensorView::new(*dtype, shape.clone(), bytes)
            .map_err(|e| BertError::tensor(name, e.to_string()))?;
        views.push((name.clone(), view));
    }
    let meta = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        (
            meta::QUANTIZATION_KEY.to_string(),
            meta::QUANTIZATION.to_string(),
        ),
        (meta::GROUP_SIZE_KEY.to_string(), group.to_string()),
        (meta::VERSION_KEY.to_string(), meta::VERSION.to_string()),
    ]);
    let dst = out_dir.join("model.safetensors");
    safetensors::tensor::serialize_to_file(views, Some(meta), &dst).map_err(|e| {
        BertError::Checkpoint {
            path: dst.clone(),
            reason: e.to_string(),
        }
    })?;

    if checkpoint_dir.is_dir() {
        copy_tree(checkpoint_dir, out_dir, &src)?;
    }
    let cfg_path = out_dir.join("config.json");
    if cfg_path.is_file() {
        let mut cfg = read_json(&cfg_path)?;
        if let Some(obj) = cfg.as_object_mut() {
            obj.insert(
                "favlo_quantization".into(),
                serde_json::json!({
                    "format": "int8",
                    "version": meta::VERSION,
                    "scheme": "symmetric, one scale per output row and group of input columns",
                    "group_size": group,
                    "activations": "f32",
                }),
            );
        }
        let text = serde_json::to_string_pretty(&cfg).map_err(|source| BertError::Json {
            path: cfg_path.clone(),
            source,
        })?;
        std::fs::write(&cfg_path, text).map_err(|e| BertError::io(&cfg_path, e))?;
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    Ok(QuantizeReport {
        bytes_in: size(&src),
        bytes_out: size(&dst),
        checkpoint: dst,
        quantized,
        kept,
        group_size: group,
    })
}

/// Copy every file under `from` to `to`, except the source checkpoint and other weight files.
fn copy_tree(from: &Path, to: &Path, skip: &Path) -> Result<(), BertError> {
    let entries = std::fs::read_dir(from).map_err(|e| BertError::io(from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BertError::io(from, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let target = to.join(&name);
        if path == skip || path == to || name.to_string_lossy().starts_with('.') {
            continue;
        }
        let lossy = name.to_string_lossy();
        if lossy.ends_with(".safetensors") || lossy.ends_with(".bin") || lossy.ends_with(".onnx") {
            continue;
        }
        if path.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| BertError::io(&target, e))?;
            copy_tree(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| BertError::io(&target, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_only_encoder_linears() {
        assert!(is_quantized_linear(
            "encoder.layer.3.attention.self.query.weight"
        ));
        assert!(is_quantized_linear(
            "bert.encoder.layer.0.output.dense.weight"
        ));
        assert!(!is_quantized_linear("encoder.layer.0.output.dense.bias"));
        assert!(!is_quantized_linear(
            "encoder.layer.0.output.LayerNorm.weight"
        ));
        assert!(!is_quantized_linear("embeddings.word_embeddings.weight"));
        assert!(!is_quantized_linear("pooler.dense.weight"));
    }
}
