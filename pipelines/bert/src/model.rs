//! The encoder forward pass over a packed batch.
//!
//! Key choice: a batch is *packed*, not padded: the sequences are laid end to end
//! (`offsets[i]..offsets[i+1]` are sequence `i`'s rows), every linear, norm and activation runs
//! once over all real tokens, and attention runs per sequence over its own length, reading Q, K
//! and V in place from the fused QKV rows ([`crate::attention`]). This is the
//! per-batch padding of Hugging Face with the padding removed: the attention mask would zero the
//! pad keys anyway, so the result is the same and no pad token is ever computed. Scratch for a
//! batch is taken from the ledger (`Scratch` spans) and returned when the batch ends.

use std::path::Path;
use std::sync::Arc;

use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu;
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};

use crate::attention::{PackedShape, attend_packed};
use crate::config::EncoderConfig;
use crate::epilogue::Epilogue;
use crate::error::BertError;
use crate::residual_norm::add_layer_norm;
use crate::weights::{self, Loader, Reader, WeightFormat, Weights};

/// Last hidden states of a packed batch: `data[offsets[i]*h .. offsets[i+1]*h]` is sequence `i`.
pub struct Hidden {
    pub data: Buffer<f32>,
    pub offsets: Vec<usize>,
    pub hidden_size: usize,
}

impl Hidden {
    /// Rows of sequence `i` (`[len, hidden]`).
    pub fn sequence(&self, i: usize) -> &[f32] {
        let h = self.hidden_size;
        &self.data[self.offsets[i] * h..self.offsets[i + 1] * h]
    }
}

/// A loaded BERT / RoBERTa encoder.
pub struct Encoder {
    cfg: EncoderConfig,
    weights: Weights,
    ledger: Arc<Ledger>,
    owner: Owner,
    int8: bool,
}

impl Encoder {
    /// Load `dir/config.json` + `dir/model.safetensors` into `ledger` for `owner`.
    pub fn open(
        dir: &Path,
        ledger: Arc<Ledger>,
        owner: Owner,
        format: WeightFormat,
    ) -> Result<Self, BertError> {
        let cfg = EncoderConfig::load(dir)?;
        let reader = Reader::open(&weights::checkpoint_file(dir))?;
        let stored_int8 = reader.has("encoder.layer.0.attention.self.query.weight_scale");
        let int8 = stored_int8 || format == WeightFormat::Int8;
        let need = weights::resident_bytes(&cfg, int8);
        if need > ledger.room() {
            return Err(BertError::Ledger {
                what: format!("{} weights", dir.display()),
                reason: format!("need {need} bytes, {} bytes of room left", ledger.room()),
            });
        }
        let weights = Loader {
            reader: &reader,
            ledger: &ledger,
            owner: &owner,
            format,
        }
        .load(&cfg)?;
        Ok(Encoder {
            cfg,
            weights,
            ledger,
            owner,
            int8,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// Whether the linear layers run in int8.
    pub fn is_int8(&self) -> bool {
        self.int8 && self.weights.layers.iter().all(|l| l.qkv.is_int8())
    }

    /// What the linear layers run as (`"f32"`, `"int8"`, `"amx-bf16"`, `"amx-bf16x3"`).
    pub fn weights_kind(&self) -> &'static str {
        self.weights.layers.first().map_or("f32", |l| l.qkv.kind())
    }

    /// Scratch bytes one forward over `tokens` packed tokens takes (for sizing batches).
    pub fn scratch_bytes(&self, tokens: usize) -> u64 {
        let h = self.cfg.hidden_size;
        let per_token = 9 * h + self.cfg.intermediate_size;
        let panel = if self.int8 { self.panel_len() } else { 0 };
        ((tokens * per_token + panel) * 4) as u64
    }

    /// Floats of the int8 widening panel: the largest packed linear.
    fn panel_len(&self) -> usize {
        let (h, i) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        [(3 * h, h), (h, h), (i, h), (h, i)]
            .iter()
            .map(|&(n, k)| crate::dense::packed_len(n, k))
            .max()
            .unwrap_or(0)
    }

    fn scratch(&self, len: usize) -> Result<Buffer<f32>, BertError> {
        self.ledger
            .alloc(&self.owner, SpanKind::Scratch, len)
            .map_err(|e| BertError::ledger("encoder scratch", e))
    }

    /// Run the encoder over `seqs` (token ids, special tokens included, each at most
    /// `config().max_positions()` long) and return the last hidden states.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Hidden, BertError> {
        let cfg = &self.cfg;
        let h = cfg.hidden_size;
        let offsets = packed_offsets(cfg, seqs)?;
        let t = offsets[seqs.len()];
        let mut x = self.scratch(t * h)?;
        let mut tmp = self.scratch(t * h)?;
        self.embed(seqs, &mut tmp, &mut x);
        if t == 0 {
            return Ok(Hidden {
                data: x,
                offsets,
                hidden_size: h,
            });
        }
        let mut qkv = self.scratch(t * 3 * h)?;
        let mut kt = self.scratch(t * h)?;
        let mut ctx = self.scratch(t * h)?;
        let mut up = self.scratch(t * cfg.intermediate_size)?;
        let panel_len = if self.int8 && t >= crate::int8::GEMM_MIN_ROWS {
            self.panel_len()
        } else {
            0
        };
        let mut panel = self.scratch(panel_len)?;
        let shape = PackedShape {
            heads: cfg.num_heads,
            head_dim: cfg.head_dim(),
        };
        let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
        for layer in &self.weights.layers {
            layer.qkv.forward(&x, &mut qkv, &mut panel, Epilogue::Bias);
            attend_packed(&qkv, &mut kt, &mut ctx, &offsets, shape, scale);
            layer
                .attn_out
                .forward(&ctx, &mut tmp, &mut panel, Epilogue::Bias);
            add_layer_norm(
                &mut x,
                &tmp,
                &layer.attn_norm.weight,
                &layer.attn_norm.bias,
                cfg.layer_norm_eps,
            );
            layer
                .ffn_up
                .forward(&x, &mut up, &mut panel, Epilogue::BiasAct(cfg.activation));
            layer
                .ffn_down
                .forward(&up, &mut tmp, &mut panel, Epilogue::Bias);
            add_layer_norm(
                &mut x,
                &tmp,
                &layer.ffn_norm.weight,
                &layer.ffn_norm.bias,
                cfg.layer_norm_eps,
            );
        }
        Ok(Hidden {
            data: x,
            offsets,
            hidden_size: h,
        })
    }

    /// Word + position + token-type embeddings (summed in `sum`), then LayerNorm, into `x`.
    fn embed(&self, seqs: &[&[u32]], sum: &mut [f32], x: &mut [f32]) {
        let h = self.cfg.hidden_size;
        let w = &self.weights;
        let mut row = 0;
        for s in seqs {
            for (p, &id) in s.iter().enumerate() {
                let pos = self.cfg.position_offset + p;
                let dst = &mut sum[row * h..(row + 1) * h];
                let word = &w.word[id as usize * h..(id as usize + 1) * h];
                let position = &w.position[pos * h..(pos + 1) * h];
                let ty = &w.token_type[..h];
                for c in 0..h {
                    dst[c] = word[c] + position[c] + ty[c];
                }
                row += 1;
            }
        }
        cpu::layer_norm(
            sum,
            &w.emb_norm.weight,
            &w.emb_norm.bias,
            self.cfg.layer_norm_eps,
            x,
        );
    }
}

/// Row offsets of `seqs` laid end to end (`offsets[i]..offsets[i+1]` is sequence `i`),
/// after checking every sequence fits the position table and every id the vocabulary.
pub(crate) fn packed_offsets(
    cfg: &EncoderConfig,
    seqs: &[&[u32]],
) -> Result<Vec<usize>, BertError> {
    let mut offsets = Vec::with_capacity(seqs.len() + 1);
    offsets.push(0usize);
    for s in seqs {
        if s.len() > cfg.max_positions() {
            return Err(BertError::Config {
                field: "max_position_embeddings",
                reason: format!(
                    "a sequence of {} tokens exceeds {}",
                    s.len(),
                    cfg.max_positions()
                ),
            });
        }
        if let Some(bad) = s.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(BertError::Tokenizer {
                reason: format!(
                    "token id {bad} is outside the vocabulary of {}",
                    cfg.vocab_size
                ),
            });
        }
        offsets.push(offsets[offsets.len() - 1] + s.len());
    }
    Ok(offsets)
}
