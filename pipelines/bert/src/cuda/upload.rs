//! The encoder's weights on the device: read from the checkpoint as f32 and uploaded
//! once, every buffer a `Resident` span of the CUDA context's ledger under the
//! pipeline's owner.
//!
//! Key choice: the GPU runs every linear in exact f32 (cuBLASLt `gemm_f32`), so int8
//! checkpoints are widened to `scale · q` at upload (the values the CPU's int8 kernels
//! multiply by) and bf16 / f16 checkpoints are read as f32 (as the CPU reads them);
//! `WeightFormat::Int8` quantizes and widens, so the GPU reproduces the CPU's int8
//! numerics. Q, K and V are fused into one `[3h, h]` matrix, as on the CPU.

use favlo_runtime::cuda::{CudaContext, DeviceBuffer};
use favlo_runtime::ledger::{Owner, SpanKind};

use crate::config::EncoderConfig;
use crate::error::BertError;
use crate::weights::{Reader, WeightFormat};

use super::dev_err;

/// `y = x Wᵀ + b` on the device: `w[n, k]` row-major.
pub(crate) struct DevLinear {
    pub w: DeviceBuffer<f32>,
    pub bias: DeviceBuffer<f32>,
    pub n: usize,
    pub k: usize,
}

/// LayerNorm weight and bias.
pub(crate) struct DevNorm {
    pub weight: DeviceBuffer<f32>,
    pub bias: DeviceBuffer<f32>,
}

/// One transformer layer.
pub(crate) struct DevLayer {
    pub qkv: DevLinear,
    pub attn_out: DevLinear,
    pub attn_norm: DevNorm,
    pub ffn_up: DevLinear,
    pub ffn_down: DevLinear,
    pub ffn_norm: DevNorm,
}

/// All weights of the encoder on the device.
pub(crate) struct DevWeights {
    pub word: DeviceBuffer<f32>,
    pub position: DeviceBuffer<f32>,
    pub token_type: DeviceBuffer<f32>,
    pub emb_norm: DevNorm,
    pub layers: Vec<DevLayer>,
    /// Bytes uploaded.
    pub bytes: u64,
}

/// Bytes the f32 weights take on the device (for the fit check before any upload).
pub(crate) fn device_bytes(cfg: &EncoderConfig) -> u64 {
    let (h, i) = (cfg.hidden_size as u64, cfg.intermediate_size as u64);
    let per_layer = 4 * h * h + 2 * h * i + 3 * h + h + i + h + 4 * h;
    let tables = (cfg.vocab_size + cfg.max_position_embeddings + 1) as u64 * h + 2 * h;
    (cfg.num_layers as u64 * per_layer + tables) * 4
}

struct Uploader<'a> {
    ctx: &'a CudaContext,
    owner: &'a Owner,
    bytes: u64,
}

impl Uploader<'_> {
    fn put(&mut self, data: &[f32]) -> Result<DeviceBuffer<f32>, BertError> {
        let buf = self
            .ctx
            .upload(self.owner, SpanKind::Resident, data)
            .map_err(dev_err)?;
        self.bytes += buf.bytes();
        Ok(buf)
    }

    fn norm(&mut self, reader: &Reader, base: &str, h: usize) -> Result<DevNorm, BertError> {
        let (w, b) = reader.read_norm(base, h)?;
        Ok(DevNorm {
            weight: self.put(&w)?,
            bias: self.put(&b)?,
        })
    }

    fn linear(
        &mut self,
        reader: &Reader,
        bases: &[String],
        n_each: usize,
        k: usize,
        quantize: bool,
    ) -> Result<DevLinear, BertError> {
        let host = reader.read_linear(bases, n_each, k)?;
        let n = host.n;
        let bias = self.put(&host.bias)?;
        let w = self.put(&host.widened(quantize))?;
        Ok(DevLinear { w, bias, n, k })
    }
}

/// Reads every tensor of `cfg`'s encoder from `reader` and uploads it.
pub(crate) fn upload(
    ctx: &CudaContext,
    owner: &Owner,
    reader: &Reader,
    cfg: &EncoderConfig,
    format: WeightFormat,
) -> Result<DevWeights, BertError> {
    let quantize = format == WeightFormat::Int8;
    let h = cfg.hidden_size;
    let mut up = Uploader {
        ctx,
        owner,
        bytes: 0,
    };
    let e = "embeddings";
    let word =
        up.put(&reader.f32(&format!("{e}.word_embeddings.weight"), &[cfg.vocab_size, h])?)?;
    let position = up.put(&reader.f32(
        &format!("{e}.position_embeddings.weight"),
        &[cfg.max_position_embeddings, h],
    )?)?;
    let type_name = format!("{e}.token_type_embeddings.weight");
    // Every token is of type 0: only the first row is uploaded.
    let token_type = if reader.has(&type_name) {
        let table = reader.f32(&type_name, &[cfg.type_vocab_size, h])?;
        up.put(&table[..h.min(table.len())])?
    } else {
        up.put(&vec![0f32; h])?
    };
    let emb_norm = up.norm(reader, &format!("{e}.LayerNorm"), h)?;
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for l in 0..cfg.num_layers {
        let p = format!("encoder.layer.{l}");
        let qkv_names: Vec<String> = ["query", "key", "value"]
            .iter()
            .map(|s| format!("{p}.attention.self.{s}"))
            .collect();
        let ff = cfg.intermediate_size;
        layers.push(DevLayer {
            qkv: up.linear(reader, &qkv_names, h, h, quantize)?,
            attn_out: up.linear(
                reader,
                &[format!("{p}.attention.output.dense")],
                h,
                h,
                quantize,
            )?,
            attn_norm: up.norm(reader, &format!("{p}.attention.output.LayerNorm"), h)?,
            ffn_up: up.linear(
                reader,
                &[format!("{p}.intermediate.dense")],
                ff,
                h,
                quantize,
            )?,
            ffn_down: up.linear(reader, &[format!("{p}.output.dense")], h, ff, quantize)?,
            ffn_norm: up.norm(reader, &format!("{p}.output.LayerNorm"), h)?,
        });
    }
    Ok(DevWeights {
        word,
        position,
        token_type,
        emb_norm,
        layers,
        bytes: up.bytes,
    })
}
