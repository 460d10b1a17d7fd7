//! The encoder forward pass on a CUDA GPU (feature `cuda`, `OpenOptions::device`).
//!
//! Key design choices:
//! - The same packed batches as the CPU ([`crate::model`]): sequences end to end, no
//!   padding row; attention per sequence from a small tile table uploaded per batch.
//! - Exact f32 throughout, so a GPU embedding agrees with the CPU's exact-f32 path to
//!   rounding: the linears are cuBLASLt `gemm_f32` (`CUBLAS_COMPUTE_32F`, no TF32), the
//!   other steps the runtime's encoder kernels (`favlo_runtime::cuda::EncoderOps`).
//! - Weights are uploaded once ([`upload`]); activations are `Scratch` spans of the
//!   CUDA context's ledger taken per batch and returned when it ends. Only the pooled
//!   (and normalised) vectors come back to the host.
//! - One forward at a time: the cuBLASLt handle sits behind a mutex, every launch goes
//!   on the context's one stream.

mod upload;

use std::path::Path;
use std::sync::{Arc, Mutex};

use favlo_runtime::cuda::{
    BlasLt, CudaContext, CudaError, DeviceBuffer, EncAct, EncPool, EncoderOps, attention_tiles,
};
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};

use crate::config::{Activation, EncoderConfig, Pooling};
use crate::error::BertError;
use crate::model::packed_offsets;
use crate::weights::{self, Reader, WeightFormat};

/// A CUDA error as the crate's error: a ledger refusal stays a ledger refusal (it maps
/// to "does not fit"), anything else is a device error.
pub(crate) fn dev_err(e: CudaError) -> BertError {
    match e {
        CudaError::Ledger(l) => BertError::ledger("GPU memory", l),
        other => BertError::Device {
            message: other.to_string(),
        },
    }
}

/// Whether `ordinal` can be opened here (driver, NVRTC, cuBLASLt, the device): `Ok(())`
/// or the reason ("CUDA is unavailable: …").
pub(crate) fn probe(ordinal: usize) -> Result<(), BertError> {
    let count = CudaContext::probe().map_err(dev_err)?;
    BlasLt::available().map_err(dev_err)?;
    if ordinal >= count {
        return Err(BertError::Device {
            message: format!(
                "CUDA is unavailable: no device cuda:{ordinal} (the driver reports {count})"
            ),
        });
    }
    Ok(())
}

/// A BERT / RoBERTa encoder resident on one GPU.
pub struct CudaEncoder {
    ctx: Arc<CudaContext>,
    ops: EncoderOps,
    blas: Mutex<BlasLt>,
    owner: Owner,
    cfg: EncoderConfig,
    w: upload::DevWeights,
}

impl std::fmt::Debug for CudaEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEncoder")
            .field("device", &self.ctx)
            .field("weight_bytes", &self.w.bytes)
            .finish_non_exhaustive()
    }
}

fn act(a: Activation) -> EncAct {
    match a {
        Activation::Gelu => EncAct::GeluErf,
        Activation::GeluTanh => EncAct::GeluTanh,
        Activation::Relu => EncAct::Relu,
    }
}

fn pool_mode(p: Pooling) -> EncPool {
    match p {
        Pooling::Mean => EncPool::Mean,
        Pooling::Cls => EncPool::First,
        Pooling::LastToken => EncPool::Last,
        Pooling::Max => EncPool::Max,
    }
}

fn i32s(v: impl IntoIterator<Item = usize>, what: &str) -> Result<Vec<i32>, BertError> {
    v.into_iter()
        .map(|x| {
            i32::try_from(x).map_err(|_| BertError::Device {
                message: format!("{what} {x} exceeds i32"),
            })
        })
        .collect()
}

impl CudaEncoder {
    /// Opens cuda:`ordinal`, loads the kernels and cuBLASLt and uploads the weights of
    /// `dir` (config.json + model.safetensors) under `owner`.
    pub fn open(
        dir: &Path,
        ordinal: usize,
        owner: Owner,
        format: WeightFormat,
    ) -> Result<CudaEncoder, BertError> {
        let cfg = EncoderConfig::load(dir)?;
        if cfg.head_dim() > favlo_runtime::cuda::ENC_MAX_HEAD_DIM {
            return Err(BertError::Device {
                message: format!(
                    "{} cannot run on CUDA: head_dim {} (at most {})",
                    dir.display(),
                    cfg.head_dim(),
                    favlo_runtime::cuda::ENC_MAX_HEAD_DIM
                ),
            });
        }
        let reader = Reader::open(&weights::checkpoint_file(dir))?;
        let ctx = CudaContext::open(ordinal, None).map_err(dev_err)?;
        let need = upload::device_bytes(&cfg);
        let room = ctx.ledger().room();
        if need > room {
            return Err(BertError::Ledger {
                what: format!("{} weights on cuda:{ordinal}", dir.display()),
                reason: format!("need {need} bytes, {room} bytes of room left"),
            });
        }
        let ops = EncoderOps::load(&ctx).map_err(dev_err)?;
        let blas = BlasLt::new(&ctx, &owner).map_err(dev_err)?;
        let w = upload::upload(&ctx, &owner, &reader, &cfg, format)?;
        ctx.synchronize().map_err(dev_err)?;
        Ok(CudaEncoder {
            ctx,
            ops,
            blas: Mutex::new(blas),
            owner,
            cfg,
            w,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// The device's ledger (for sizing batches against its room).
    pub fn ledger(&self) -> &Arc<Ledger> {
        self.ctx.ledger()
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> u32 {
        u32::try_from(self.ctx.ordinal()).unwrap_or(u32::MAX)
    }

    /// The device name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        self.ctx.name()
    }

    /// Device bytes of the uploaded weights.
    pub fn weight_bytes(&self) -> u64 {
        self.w.bytes
    }

    /// Device scratch bytes of one forward over `tokens` packed tokens in `seqs` sequences.
    pub fn scratch_bytes(&self, tokens: usize, seqs: usize) -> u64 {
        let (h, i) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        // x, tmp, qkv (3h), context, up (i); ids and positions; tiles; offsets; pooled.
        let floats = tokens * (6 * h + i) + seqs * h;
        let ints = 2 * tokens + 3 * (tokens + seqs) + seqs + 1;
        ((floats + ints) * 4) as u64
    }

    fn scratch(&self, len: usize) -> Result<DeviceBuffer<f32>, BertError> {
        self.ctx
            .alloc::<f32>(&self.owner, SpanKind::Scratch, len.max(1))
            .map_err(dev_err)
    }

    fn upload_i32(&self, v: &[i32]) -> Result<DeviceBuffer<i32>, BertError> {
        let v: &[i32] = if v.is_empty() { &[0] } else { v };
        self.ctx
            .upload(&self.owner, SpanKind::Scratch, v)
            .map_err(dev_err)
    }

    /// Runs the encoder over `seqs` (token ids, special tokens included) and pools each
    /// sequence's last hidden states as `pooling` says, L2-normalised when `normalize`.
    pub fn forward_pooled(
        &self,
        seqs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, BertError> {
        let cfg = &self.cfg;
        let h = cfg.hidden_size;
        let offsets = packed_offsets(cfg, seqs)?;
        let t = offsets[seqs.len()];
        let n = seqs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if t == 0 {
            return Ok(vec![vec![0.0; h]; n]);
        }
        let ids = i32s(
            seqs.iter().flat_map(|s| s.iter().map(|&i| i as usize)),
            "token id",
        )?;
        let pos = i32s(
            seqs.iter()
                .flat_map(|s| (0..s.len()).map(|p| cfg.position_offset + p)),
            "position",
        )?;
        let tiles = attention_tiles(&offsets).map_err(dev_err)?;
        let offs = i32s(offsets.iter().copied(), "offset")?;

        let d_ids = self.upload_i32(&ids)?;
        let d_pos = self.upload_i32(&pos)?;
        let d_tiles = self.upload_i32(&tiles)?;
        let d_offs = self.upload_i32(&offs)?;
        let mut x = self.scratch(t * h)?;
        let mut tmp = self.scratch(t * h)?;
        let mut qkv = self.scratch(t * 3 * h)?;
        let mut ctxb = self.scratch(t * h)?;
        let mut up = self.scratch(t * cfg.intermediate_size)?;
        let mut pooled = self.scratch(n * h)?;

        let w = &self.w;
        let eps = cfg.layer_norm_eps;
        let ops = &self.ops;
        let mut blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        let mut run = |blas: &mut BlasLt| -> Result<(), CudaError> {
            ops.embed_layer_norm(
                &d_ids,
                &d_pos,
                t,
                &w.word,
                &w.position,
                &w.token_type,
                &w.emb_norm.weight,
                &w.emb_norm.bias,
                eps,
                &mut x,
                h,
            )?;
            let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
            for l in &w.layers {
                blas.gemm_f32(&x, &l.qkv.w, &mut qkv, t, l.qkv.n, l.qkv.k, false)?;
                ops.bias_act(&mut qkv, &l.qkv.bias, t, l.qkv.n, EncAct::None)?;
                ops.attention(
                    &qkv,
                    &mut ctxb,
                    &d_tiles,
                    tiles.len() / 3,
                    t,
                    cfg.num_heads,
                    cfg.head_dim(),
                    scale,
                )?;
                let o = &l.attn_out;
                blas.gemm_f32(&ctxb, &o.w, &mut tmp, t, o.n, o.k, false)?;
                let nrm = &l.attn_norm;
                ops.add_layer_norm(
                    &mut x,
                    &tmp,
                    Some(&o.bias),
                    &nrm.weight,
                    &nrm.bias,
                    eps,
                    t,
                    h,
                )?;
                let f = &l.ffn_up;
                blas.gemm_f32(&x, &f.w, &mut up, t, f.n, f.k, false)?;
                ops.bias_act(&mut up, &f.bias, t, f.n, act(cfg.activation))?;
                let d = &l.ffn_down;
                blas.gemm_f32(&up, &d.w, &mut tmp, t, d.n, d.k, false)?;
                let nrm = &l.ffn_norm;
                ops.add_layer_norm(
                    &mut x,
                    &tmp,
                    Some(&d.bias),
                    &nrm.weight,
                    &nrm.bias,
                    eps,
                    t,
                    h,
                )?;
            }
            ops.pool(
                &x,
                &d_offs,
                n,
                h,
                pool_mode(pooling),
                normalize,
                &mut pooled,
            )
        };
        run(&mut blas).map_err(dev_err)?;
        drop(blas);
        let host = self.ctx.download(&pooled).map_err(dev_err)?;
        Ok(host.chunks_exact(h).take(n).map(<[f32]>::to_vec).collect())
    }
}
