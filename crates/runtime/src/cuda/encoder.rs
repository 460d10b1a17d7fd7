//! The generic steps of a bidirectional encoder (BERT / RoBERTa family) on the GPU
//! (`kernels/encoder.cu`): embedding gather + LayerNorm, residual add + bias +
//! LayerNorm, bias + activation, attention over packed sequences, pooling with optional
//! L2 normalisation. The dense layers are [`super::BlasLt::gemm_f32`].
//!
//! Key design choice: a batch is *packed* (sequences end to end, every row a real
//! token), as on the CPU; attention is told where each sequence starts by a small table
//! of query tiles ([`attention_tiles`], uploaded per batch), so no padding is computed
//! and no mask exists. Every kernel computes in exact f32 (precise `expf`/`erff`), so a
//! pipeline built on them agrees with the CPU's exact-f32 path to rounding.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};

const SRC: &str = include_str!("../../kernels/encoder.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "encoder",
    src: SRC,
};
/// Query rows per attention tile (`ENC_BQ` in the kernel).
pub const ENC_QUERY_TILE: usize = 32;
/// The largest head dimension the attention kernel takes.
pub const ENC_MAX_HEAD_DIM: usize = 128;
/// Threads per block of the row kernels.
const ROW_THREADS: u32 = 256;

/// The activation after a linear's bias (`enc_bias_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncAct {
    /// Bias only.
    None,
    /// `0.5·v·(1 + erf(v/√2))` (HF `gelu`).
    GeluErf,
    /// `0.5·v·(1 + tanh(√(2/π)(v + 0.044715 v³)))` (HF `gelu_new`).
    GeluTanh,
    Relu,
}

impl EncAct {
    fn code(self) -> i32 {
        match self {
            EncAct::None => 0,
            EncAct::GeluErf => 1,
            EncAct::GeluTanh => 2,
            EncAct::Relu => 3,
        }
    }
}

/// How a sequence's rows become one vector (`enc_pool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncPool {
    /// Mean over the rows (summed in f64).
    Mean,
    /// The first row (`[CLS]`).
    First,
    /// The last row.
    Last,
    /// Element-wise max.
    Max,
}

impl EncPool {
    fn code(self) -> i32 {
        match self {
            EncPool::Mean => 0,
            EncPool::First => 1,
            EncPool::Last => 2,
            EncPool::Max => 3,
        }
    }
}

fn shape(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

fn int(n: usize, op: &'static str) -> Result<i32, CudaError> {
    i32::try_from(n).map_err(|_| shape(op, format!("{n} exceeds i32")))
}

fn rows_u32(n: usize, op: &'static str) -> Result<u32, CudaError> {
    u32::try_from(n).map_err(|_| shape(op, format!("{n} blocks")))
}

/// Dynamic shared memory of one `h`-float row (the row kernels keep a row there).
fn row_smem(h: usize, op: &'static str) -> Result<u32, CudaError> {
    const LIMIT: usize = 40 << 10;
    if h == 0 || h * 4 > LIMIT {
        return Err(shape(op, format!("hidden size {h} (1..={})", LIMIT / 4)));
    }
    Ok((h * 4) as u32)
}

/// The attention tiles of a packed batch whose sequence `i` is rows
/// `offsets[i]..offsets[i+1]`: `(first row, length, first query)` per tile of
/// [`ENC_QUERY_TILE`] queries, flattened.
pub fn attention_tiles(offsets: &[usize]) -> Result<Vec<i32>, CudaError> {
    let op = "attention_tiles";
    let mut t = Vec::new();
    for w in offsets.windows(2) {
        let (start, len) = (w[0], w[1].saturating_sub(w[0]));
        let mut q0 = 0;
        while q0 < len {
            t.extend([int(start, op)?, int(len, op)?, int(q0, op)?]);
            q0 += ENC_QUERY_TILE;
        }
    }
    Ok(t)
}

/// The encoder kernels of one context.
pub struct EncoderOps {
    ctx: Arc<CudaContext>,
    embed_ln: CudaFunction,
    add_ln: CudaFunction,
    bias_act: CudaFunction,
    /// Head dims ≤ 32, ≤ 64, ≤ 128.
    attn: [CudaFunction; 3],
    pool: CudaFunction,
}

impl std::fmt::Debug for EncoderOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderOps").finish_non_exhaustive()
    }
}

impl EncoderOps {
    /// Compiles (or reads from the disk cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<EncoderOps, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = |n: &str| m.function(n);
        Ok(EncoderOps {
            embed_ln: f("enc_embed_ln")?,
            add_ln: f("enc_add_ln")?,
            bias_act: f("enc_bias_act")?,
            attn: [f("enc_attn_d32")?, f("enc_attn_d64")?, f("enc_attn_d128")?],
            pool: f("enc_pool")?,
            ctx: Arc::clone(ctx),
        })
    }

    /// The kernel source (for NVRTC compile checks).
    pub fn source() -> &'static str {
        SRC
    }

    /// `out[r] = LayerNorm(word[ids[r]] + position[pos[r]] + token_type[0..h])·gamma + beta`
    /// for `rows` rows of `h`. Ids and positions must index inside their tables (checked
    /// by the caller against the host copies; the kernel does not bound them).
    #[allow(clippy::too_many_arguments)]
    pub fn embed_layer_norm(
        &self,
        ids: &DeviceBuffer<i32>,
        pos: &DeviceBuffer<i32>,
        rows: usize,
        word: &DeviceBuffer<f32>,
        position: &DeviceBuffer<f32>,
        token_type: &DeviceBuffer<f32>,
        gamma: &DeviceBuffer<f32>,
        beta: &DeviceBuffer<f32>,
        eps: f32,
        out: &mut DeviceBuffer<f32>,
        h: usize,
    ) -> Result<(), CudaError> {
        let op = "enc_embed_ln";
        let smem = row_smem(h, op)?;
        if ids.len() < rows
            || pos.len() < rows
            || out.len() < rows * h
            || word.len() < h
            || position.len() < h
            || token_type.len() < h
            || gamma.len() < h
            || beta.len() < h
        {
            return Err(shape(op, format!("{rows} rows of {h}: a buffer is short")));
        }
        if rows == 0 {
            return Ok(());
        }
        let hi = int(h, op)?;
        let cfg = LaunchConfig {
            grid_dim: (rows_u32(rows, op)?, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        let mut b = self.ctx.stream().launch_builder(&self.embed_ln);
        b.arg(&ids.slice)
            .arg(&pos.slice)
            .arg(&word.slice)
            .arg(&position.slice)
            .arg(&token_type.slice)
            .arg(&gamma.slice)
            .arg(&beta.slice)
            .arg(&eps)
            .arg(&mut out.slice)
            .arg(&hi);
        // SAFETY: argument order and types match `enc_embed_ln`; rows · h values written
        // (checked); table rows read at the given ids/positions (the caller's contract).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(enc_embed_ln)"))?;
        Ok(())
    }

    /// `x[r] = LayerNorm(x[r] + delta[r] (+ bias))·gamma + beta` for `rows` rows of `h`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm(
        &self,
        x: &mut DeviceBuffer<f32>,
        delta: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        gamma: &DeviceBuffer<f32>,
        beta: &DeviceBuffer<f32>,
        eps: f32,
        rows: usize,
        h: usize,
    ) -> Result<(), CudaError> {
        let op = "enc_add_ln";
        let smem = row_smem(h, op)?;
        if x.len() < rows * h
            || delta.len() < rows * h
            || bias.is_some_and(|b| b.len() < h)
            || gamma.len() < h
            || beta.len() < h
        {
            return Err(shape(op, format!("{rows} rows of {h}: a buffer is short")));
        }
        if rows == 0 {
            return Ok(());
        }
        let (hi, has_bias) = (int(h, op)?, i32::from(bias.is_some()));
        let cfg = LaunchConfig {
            grid_dim: (rows_u32(rows, op)?, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        let mut b = self.ctx.stream().launch_builder(&self.add_ln);
        b.arg(&mut x.slice)
            .arg(&delta.slice)
            .arg(&bias.unwrap_or(gamma).slice)
            .arg(&has_bias)
            .arg(&gamma.slice)
            .arg(&beta.slice)
            .arg(&eps)
            .arg(&hi);
        // SAFETY: argument order and types match `enc_add_ln`; rows · h values read and
        // written (checked); `bias` is read only when `has_bias` is 1.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(enc_add_ln)"))?;
        Ok(())
    }

    /// `y[rows, n] = act(y + bias[n])` in place.
    pub fn bias_act(
        &self,
        y: &mut DeviceBuffer<f32>,
        bias: &DeviceBuffer<f32>,
        rows: usize,
        n: usize,
        act: EncAct,
    ) -> Result<(), CudaError> {
        let op = "enc_bias_act";
        if n == 0 || bias.len() < n || y.len() < rows * n {
            return Err(shape(
                op,
                format!("{rows}×{n} into y {} with bias {}", y.len(), bias.len()),
            ));
        }
        let total = rows * n;
        if total == 0 {
            return Ok(());
        }
        let blocks = total.div_ceil(256).min(65_536) as u32;
        let (ni, code, tot) = (int(n, op)?, act.code(), total as i64);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.ctx.stream().launch_builder(&self.bias_act);
        b.arg(&mut y.slice)
            .arg(&bias.slice)
            .arg(&tot)
            .arg(&ni)
            .arg(&code);
        // SAFETY: argument order and types match `enc_bias_act`; `total` values of y and
        // n of bias (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(enc_bias_act)"))?;
        Ok(())
    }

    /// Bidirectional attention: for each sequence of the packed batch described by
    /// `tiles` ([`attention_tiles`], uploaded; `n_tiles` of them) and each head,
    /// `out[r, head·d..] = softmax(scale · q_r Kᵀ) V` over the sequence's own rows, where
    /// row r of `qkv` is `[q | k | v]` (each `heads × head_dim`, row stride `3·h`) and
    /// `out` has row stride `h` = `heads · head_dim`. `rows` is the batch's token count.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        qkv: &DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f32>,
        tiles: &DeviceBuffer<i32>,
        n_tiles: usize,
        rows: usize,
        heads: usize,
        head_dim: usize,
        scale: f32,
    ) -> Result<(), CudaError> {
        let op = "enc_attention";
        let variant = match head_dim {
            1..=32 => 0,
            33..=64 => 1,
            65..=ENC_MAX_HEAD_DIM => 2,
            _ => {
                return Err(shape(
                    op,
                    format!("head_dim {head_dim} (1..={ENC_MAX_HEAD_DIM})"),
                ));
            }
        };
        let h = heads * head_dim;
        if heads == 0
            || qkv.len() < rows * 3 * h
            || out.len() < rows * h
            || tiles.len() < 3 * n_tiles
        {
            return Err(shape(
                op,
                format!(
                    "{rows} rows × {heads} heads × {head_dim}: qkv {}, out {}, tiles {}",
                    qkv.len(),
                    out.len(),
                    tiles.len()
                ),
            ));
        }
        if n_tiles == 0 {
            return Ok(());
        }
        let (hi, di) = (int(heads, op)?, int(head_dim, op)?);
        let cfg = LaunchConfig {
            grid_dim: (rows_u32(n_tiles, op)?, rows_u32(heads, op)?, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.ctx.stream().launch_builder(&self.attn[variant]);
        b.arg(&qkv.slice)
            .arg(&mut out.slice)
            .arg(&tiles.slice)
            .arg(&hi)
            .arg(&di)
            .arg(&scale);
        // SAFETY: argument order and types match `enc_attn_*`; every tile's rows lie
        // inside `rows` when the tiles come from `attention_tiles` of offsets ending at
        // `rows` (the caller's contract); qkv and out hold `rows` rows (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(enc_attn)"))?;
        Ok(())
    }

    /// Pools each sequence `offsets[s]..offsets[s+1]` (uploaded, `n_seqs + 1` values,
    /// within x's rows) of `x[rows, h]` into `out[s, h]`, L2-normalised when `normalize`.
    #[allow(clippy::too_many_arguments)]
    pub fn pool(
        &self,
        x: &DeviceBuffer<f32>,
        offsets: &DeviceBuffer<i32>,
        n_seqs: usize,
        h: usize,
        mode: EncPool,
        normalize: bool,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "enc_pool";
        let smem = row_smem(h, op)?;
        if offsets.len() < n_seqs + 1 || out.len() < n_seqs * h {
            return Err(shape(
                op,
                format!(
                    "{n_seqs} sequences of {h}: offsets {}, out {}",
                    offsets.len(),
                    out.len()
                ),
            ));
        }
        if n_seqs == 0 {
            return Ok(());
        }
        let (hi, code, norm) = (int(h, op)?, mode.code(), i32::from(normalize));
        let cfg = LaunchConfig {
            grid_dim: (rows_u32(n_seqs, op)?, 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        let mut b = self.ctx.stream().launch_builder(&self.pool);
        b.arg(&x.slice)
            .arg(&offsets.slice)
            .arg(&mut out.slice)
            .arg(&hi)
            .arg(&code)
            .arg(&norm);
        // SAFETY: argument order and types match `enc_pool`; the offsets index rows of x
        // (the caller's contract); n_seqs · h values written (checked).
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(enc_pool)"))?;
        Ok(())
    }
}
