//! Where the tensors come from: a GGUF file or a Hugging Face safetensors checkpoint.
//!
//! Key design choice: the forward pass names tensors by [`Role`] (+ layer), and
//! this module maps a role to the GGUF (`blk.N.attn_q.weight`) or HF
//! (`model.layers.N.self_attn.q_proj.weight`) name. Tensors are decoded to f32
//! one at a time (GGUF blocks dequantized by formats) and handed to the loader,
//! which re-encodes them into the runtime's storage; GGUF q/k rows are used as
//! stored (their llama.cpp rope permutation is matched by the interleaved rope).

use std::path::{Path, PathBuf};

use favlo_formats::gguf::{GgmlType, GgufFile};
use favlo_formats::safetensors::SafeTensors;

use crate::error::LlamaError;

/// A decoded tensor: f32 values and the PyTorch shape.
pub(crate) type Decoded = (Vec<f32>, Vec<usize>);

/// One logical tensor of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Embed,
    OutputNorm,
    Head,
    RopeFreqs,
    AttnNorm,
    Q,
    K,
    V,
    O,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
}

/// An opened checkpoint.
pub(crate) enum Checkpoint {
    Gguf { file: GgufFile, path: PathBuf },
    Safetensors { st: SafeTensors, path: PathBuf },
}

impl Checkpoint {
    pub(crate) fn open_gguf(path: &Path) -> Result<Self, LlamaError> {
        let file = GgufFile::open(path).map_err(|e| read_err(path, e))?;
        Ok(Checkpoint::Gguf {
            file,
            path: path.to_path_buf(),
        })
    }

    pub(crate) fn open_safetensors(path: &Path) -> Result<Self, LlamaError> {
        let st = SafeTensors::open(path).map_err(|e| read_err(path, e))?;
        Ok(Checkpoint::Safetensors {
            st,
            path: path.to_path_buf(),
        })
    }

    /// The tensor name of `role` in layer `layer` for this checkpoint kind.
    pub(crate) fn name(&self, role: Role, layer: usize) -> String {
        match self {
            Checkpoint::Gguf { .. } => gguf_name(role, layer),
            Checkpoint::Safetensors { .. } => hf_name(role, layer),
        }
    }

    /// Whether the tensor exists.
    pub(crate) fn has(&self, role: Role, layer: usize) -> bool {
        let name = self.name(role, layer);
        match self {
            Checkpoint::Gguf { file, .. } => file.tensor(&name).is_some(),
            Checkpoint::Safetensors { st, .. } => st.info(&name).is_some(),
        }
    }

    /// The tensor as f32 with its PyTorch shape, or `None` when absent.
    pub(crate) fn load(&self, role: Role, layer: usize) -> Result<Option<Decoded>, LlamaError> {
        if !self.has(role, layer) {
            return Ok(None);
        }
        let name = self.name(role, layer);
        let got = match self {
            Checkpoint::Gguf { file, path } => {
                file.tensor_f32(&name).map_err(|e| read_err(path, e))?
            }
            Checkpoint::Safetensors { st, path } => {
                st.tensor_f32(&name).map_err(|e| read_err(path, e))?
            }
        };
        Ok(Some(got))
    }

    /// The stored GGUF blocks of a tensor (type, bytes, PyTorch shape); `None` for
    /// safetensors checkpoints and absent tensors.
    pub(crate) fn raw(&self, role: Role, layer: usize) -> Option<(GgmlType, &[u8], Vec<usize>)> {
        match self {
            Checkpoint::Gguf { file, .. } => {
                let info = file.tensor(&gguf_name(role, layer))?;
                Some((info.ggml_type, file.tensor_bytes(info), info.shape()))
            }
            Checkpoint::Safetensors { .. } => None,
        }
    }

    /// Like [`Checkpoint::load`] but the tensor must exist and have `shape`.
    pub(crate) fn need(
        &self,
        role: Role,
        layer: usize,
        shape: &[usize],
    ) -> Result<Vec<f32>, LlamaError> {
        let name = self.name(role, layer);
        let (v, got) = self
            .load(role, layer)?
            .ok_or_else(|| LlamaError::tensor(&name, "missing"))?;
        check_shape(&name, &got, shape)?;
        Ok(v)
    }

    /// Like [`Checkpoint::need`] but absent is fine.
    pub(crate) fn maybe(
        &self,
        role: Role,
        layer: usize,
        shape: &[usize],
    ) -> Result<Option<Vec<f32>>, LlamaError> {
        let name = self.name(role, layer);
        match self.load(role, layer)? {
            None => Ok(None),
            Some((v, got)) => {
                check_shape(&name, &got, shape)?;
                Ok(Some(v))
            }
        }
    }
}

fn check_shape(name: &str, got: &[usize], want: &[usize]) -> Result<(), LlamaError> {
    // A 1-D tensor may be stored as [n] or [1, n]; compare element layouts.
    let squeeze = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    if squeeze(got) != squeeze(want) {
        return Err(LlamaError::tensor(
            name,
            format!("shape {got:?}, expected {want:?}"),
        ));
    }
    Ok(())
}

fn read_err(path: &Path, e: impl std::fmt::Display) -> LlamaError {
    LlamaError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn gguf_name(role: Role, l: usize) -> String {
    let layer = |s: &str| format!("blk.{l}.{s}");
    match role {
        Role::Embed => "token_embd.weight".into(),
        Role::OutputNorm => "output_norm.weight".into(),
        Role::Head => "output.weight".into(),
        Role::RopeFreqs => "rope_freqs.weight".into(),
        Role::AttnNorm => layer("attn_norm.weight"),
        Role::Q => layer("attn_q.weight"),
        Role::K => layer("attn_k.weight"),
        Role::V => layer("attn_v.weight"),
        Role::O => layer("attn_output.weight"),
        Role::QBias => layer("attn_q.bias"),
        Role::KBias => layer("attn_k.bias"),
        Role::VBias => layer("attn_v.bias"),
        Role::QNorm => layer("attn_q_norm.weight"),
        Role::KNorm => layer("attn_k_norm.weight"),
        Role::FfnNorm => layer("ffn_norm.weight"),
        Role::Gate => layer("ffn_gate.weight"),
        Role::Up => layer("ffn_up.weight"),
        Role::Down => layer("ffn_down.weight"),
    }
}

fn hf_name(role: Role, l: usize) -> String {
    let layer = |s: &str| format!("model.layers.{l}.{s}");
    match role {
        Role::Embed => "model.embed_tokens.weight".into(),
        Role::OutputNorm => "model.norm.weight".into(),
        Role::Head => "lm_head.weight".into(),
        Role::RopeFreqs => "model.rope_freqs".into(),
        Role::AttnNorm => layer("input_layernorm.weight"),
        Role::Q => layer("self_attn.q_proj.weight"),
        Role::K => layer("self_attn.k_proj.weight"),
        Role::V => layer("self_attn.v_proj.weight"),
        Role::O => layer("self_attn.o_proj.weight"),
        Role::QBias => layer("self_attn.q_proj.bias"),
        Role::KBias => layer("self_attn.k_proj.bias"),
        Role::VBias => layer("self_attn.v_proj.bias"),
        Role::QNorm => layer("self_attn.q_norm.weight"),
        Role::KNorm => layer("self_attn.k_norm.weight"),
        Role::FfnNorm => layer("post_attention_layernorm.weight"),
        Role::Gate => layer("mlp.gate_proj.weight"),
        Role::Up => layer("mlp.up_proj.weight"),
        Role::Down => layer("mlp.down_proj.weight"),
    }
}
