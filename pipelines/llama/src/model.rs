//! The decoder forward pass over a KV cache, in chunks of at most [`CHUNK`] tokens.
//!
//! Key design choice: every working buffer (KV cache, per-chunk activations) is
//! allocated once from the ledger when the model opens, sized for the chosen
//! context and the chunk; a forward call allocates nothing. Prefill and decode
//! are the same code path (decode is a chunk of one token), which is what makes
//! "step-by-step logits == prefill logits" a meaningful cache test.

use std::sync::Arc;

use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::{self, AttnShape};
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};
use half::f16;

use crate::attention::{attention_ggml, rms_norm_ggml, store_f16, swiglu_ggml};
use crate::config::LlamaConfig;
use crate::dump;
use crate::error::LlamaError;
use crate::rotary::{GgmlRope, Rotary};
use crate::weights::Weights;

/// Most tokens one forward chunk processes (prefill is split into chunks of this).
pub const CHUNK: usize = 64;

/// Per-chunk activations.
struct Scratch {
    x: Buffer<f32>,
    h: Buffer<f32>,
    qkv: Buffer<f32>,
    q: Buffer<f32>,
    att: Buffer<f32>,
    gu: Buffer<f32>,
    act: Buffer<f32>,
    /// The chunk's new key / value rows before they are stored in the cache.
    kn: Buffer<f32>,
    vn: Buffer<f32>,
}

/// The KV cache, `[n_layers, capacity, kv_dim]` each.
enum KvStore {
    /// Reference numerics (safetensors, f16/MX weights).
    F32 { k: Buffer<f32>, v: Buffer<f32> },
    /// llama.cpp numerics (native GGUF): what ggml stores, at half the bytes.
    F16 { k: Buffer<f16>, v: Buffer<f16> },
}

/// Whether the cache holds f16 (ggml numerics with head_dim a multiple of 8, the
/// f16 attention kernels' lane width).
pub(crate) fn f16_kv(ggml_numerics: bool, cfg: &LlamaConfig) -> bool {
    ggml_numerics && cfg.head_dim.is_multiple_of(8)
}

/// Bytes of KV cache per token of context.
pub(crate) fn kv_bytes_per_token(cfg: &LlamaConfig, f16: bool) -> u64 {
    (2 * cfg.n_layers * cfg.kv_dim() * if f16 { 2 } else { 4 }) as u64
}

/// Bytes of the per-chunk activations.
pub(crate) fn scratch_bytes(cfg: &LlamaConfig) -> u64 {
    let w = cfg.q_dim() + 2 * cfg.kv_dim();
    (CHUNK
        * (2 * cfg.hidden
            + w
            + 2 * cfg.q_dim().max(cfg.kv_dim())
            + 3 * cfg.intermediate
            + 2 * cfg.kv_dim())
        * 4) as u64
}

/// One token choice made where the logits are ([`LlamaModel::forward_choose`]): the host
/// sampler's parameters without penalties and the draw in [0, 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceChoice {
    /// `<= 0`: greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub uniform: f64,
}

impl DeviceChoice {
    /// The argmax.
    pub const GREEDY: DeviceChoice = DeviceChoice {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        uniform: 0.0,
    };
}

/// A loaded model with its KV cache.
pub struct LlamaModel {
    cfg: LlamaConfig,
    w: Weights,
    rotary: Rotary,
    /// ggml's RoPE arithmetic (native GGUF weights), with its per-chunk (cos, sin) table.
    ggml_rope: Option<GgmlRope>,
    rope_table: Vec<(f32, f32)>,
    kv: KvStore,
    capacity: usize,
    s: Scratch,
    /// Feature `cuda`: the model resident on a GPU; `forward` runs there and the host
    /// keeps only the embedding table (KV cache and scratch above are empty).
    #[cfg(feature = "cuda")]
    cuda: Option<Box<crate::cuda::CudaLlama>>,
}

impl LlamaModel {
    pub(crate) fn new(
        cfg: LlamaConfig,
        w: Weights,
        ledger: &Arc<Ledger>,
        owner: &Owner,
        capacity: usize,
    ) -> Result<Self, LlamaError> {
        let kv = cfg.n_layers * capacity * cfg.kv_dim();
        let qkv_w = cfg.q_dim() + 2 * cfg.kv_dim();
        let qmax = cfg.q_dim().max(cfg.kv_dim());
        let a = |n: usize| ledger.alloc::<f32>(owner, SpanKind::Scratch, n);
        let s = Scratch {
            x: a(CHUNK * cfg.hidden)?,
            h: a(CHUNK * cfg.hidden)?,
            qkv: a(CHUNK * qkv_w)?,
            q: a(CHUNK * qmax)?,
            att: a(CHUNK * qmax)?,
            gu: a(CHUNK * 2 * cfg.intermediate)?,
            act: a(CHUNK * cfg.intermediate)?,
            kn: a(CHUNK * cfg.kv_dim())?,
            vn: a(CHUNK * cfg.kv_dim())?,
        };
        let kv_store = if f16_kv(w.ggml_numerics, &cfg) {
            let h = |n: usize| ledger.alloc::<f16>(owner, SpanKind::Scratch, n);
            KvStore::F16 {
                k: h(kv)?,
                v: h(kv)?,
            }
        } else {
            KvStore::F32 {
                k: a(kv)?,
                v: a(kv)?,
            }
        };
        Ok(LlamaModel {
            rotary: Rotary::new(&cfg),
            ggml_rope: if w.ggml_numerics {
                GgmlRope::new(&cfg)
            } else {
                None
            },
            rope_table: Vec::with_capacity(CHUNK * cfg.rope_dim / 2),
            kv: kv_store,
            capacity,
            cfg,
            w,
            s,
            #[cfg(feature = "cuda")]
            cuda: None,
        })
    }

    /// A model whose forward pass runs on `dev`: the host keeps the embedding table
    /// (one row is looked up per token) and frees the layers, which live on the device.
    #[cfg(feature = "cuda")]
    pub(crate) fn with_cuda(
        cfg: LlamaConfig,
        mut w: Weights,
        ledger: &Arc<Ledger>,
        owner: &Owner,
        dev: crate::cuda::CudaLlama,
    ) -> Result<Self, LlamaError> {
        w.layers.clear();
        w.head = None;
        let mut m = Self::new(cfg, w, ledger, owner, 0)?;
        m.capacity = dev.capacity();
        m.cuda = Some(Box::new(dev));
        Ok(m)
    }

    /// Where the forward pass runs: `cpu`, or e.g. `cuda:0 (NVIDIA H200)`.
    pub fn device_name(&self) -> String {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return c.device_name();
        }
        "cpu".to_string()
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Tokens the KV cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Resident weight bytes (on the device when the model runs there).
    pub fn weight_bytes(&self) -> u64 {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return c.weight_bytes();
        }
        self.w.bytes()
    }

    /// Whether [`Self::forward_choose`] picks tokens on the device (a model on CUDA),
    /// so the caller need not copy logits back for a step without penalties.
    /// `FAVLO_CUDA_SAMPLE=host` at open says no (the logits come back to the host
    /// sampler; for comparisons).
    pub fn chooses_on_device(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return c.device_sampling;
        }
        false
    }

    /// Runs `ids` like [`Self::forward`] and returns the last token chosen where the
    /// logits are, by the host sampler's rule without penalties: the argmax (the
    /// largest logit, the lowest id among equals) when `choice` is greedy, else the
    /// temperature / top-k / top-p / min-p draw at `choice.uniform`. On the device for
    /// a model on CUDA (8 bytes come back); `None` on the CPU, where the caller runs
    /// [`Self::forward`] and its own sampler instead.
    pub fn forward_choose(
        &mut self,
        ids: &[u32],
        n_past: usize,
        choice: &DeviceChoice,
    ) -> Result<Option<u32>, LlamaError> {
        self.check_ids(ids, n_past)?;
        #[cfg(feature = "cuda")]
        if let Some(c) = self.cuda.as_mut() {
            let p = favlo_runtime::cuda::SampleParams {
                temperature: choice.temperature,
                top_k: choice.top_k,
                top_p: choice.top_p,
                min_p: choice.min_p,
            };
            return c
                .forward_choose(&self.w.embed, ids, n_past, &p, choice.uniform)
                .map(Some);
        }
        #[cfg(not(feature = "cuda"))]
        let _ = choice;
        Ok(None)
    }

    /// Sequences decoded together ([`Self::decode_batch`]): 1 on the CPU; on CUDA as
    /// opened (`OpenOptions::sequences`).
    pub fn sequences(&self) -> usize {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return c.sequences();
        }
        1
    }

    /// Most tokens one prefill chunk of the GPU path runs; `None` on the CPU (or without
    /// chunk buffers).
    pub fn prefill_chunk(&self) -> Option<usize> {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.cuda {
            return c.prefill_chunk();
        }
        None
    }

    /// Runs `ids` at positions `n_past..` of sequence `seq` (0..[`Self::sequences`]);
    /// `logits` gets the last token's. Sequence 0 is [`Self::forward`]'s.
    pub fn forward_seq(
        &mut self,
        seq: usize,
        ids: &[u32],
        n_past: usize,
        logits: &mut [f32],
    ) -> Result<(), LlamaError> {
        if seq == 0 {
            return self.forward(ids, n_past, logits, false);
        }
        self.check_ids(ids, n_past)?;
        self.check_seq(seq)?;
        let v = self.cfg.vocab_size;
        if logits.len() != v {
            return Err(LlamaError::Request {
                message: format!("logits buffer holds {}, need {v}", logits.len()),
            });
        }
        #[cfg(feature = "cuda")]
        if let Some(c) = self.cuda.as_mut() {
            return c.forward_seq(&self.w.embed, seq, ids, n_past, logits);
        }
        Err(LlamaError::Request {
            message: format!("sequence {seq}: this model decodes one sequence"),
        })
    }

    /// One decode step of each `(sequence, token id, position)` in `steps` (distinct
    /// sequences, each cache holding its positions before), the weights read once for
    /// all of them; `logits` gets each one's, in `steps`' order (`steps.len()` × vocab).
    /// On the CPU only sequence 0 exists and this is [`Self::forward`].
    pub fn decode_batch(
        &mut self,
        steps: &[(usize, u32, usize)],
        logits: &mut [f32],
    ) -> Result<(), LlamaError> {
        self.decode_batch_choose(steps, &[], logits).map(|_| ())
    }

    /// [`Self::decode_batch`] where step i with `choices[i] = Some(choice)` gets its
    /// next token picked where the logits are, by the host sampler's rule without
    /// penalties (as [`Self::forward_choose`]): `Some(token)` in the returned vector,
    /// its row of `logits` left as it was. On the CPU every step returns `None` and
    /// its logits.
    pub fn decode_batch_choose(
        &mut self,
        steps: &[(usize, u32, usize)],
        choices: &[Option<DeviceChoice>],
        logits: &mut [f32],
    ) -> Result<Vec<Option<u32>>, LlamaError> {
        let v = self.cfg.vocab_size;
        if logits.len() != steps.len() * v {
            return Err(LlamaError::Request {
                message: format!(
                    "logits buffer holds {}, need {}",
                    logits.len(),
                    steps.len() * v
                ),
            });
        }
        for &(seq, id, at) in steps {
            self.check_ids(&[id], at)?;
            self.check_seq(seq)?;
        }
        // Written by the device path only.
        #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
        let mut tokens = vec![None; steps.len()];
        #[cfg(feature = "cuda")]
        if let Some(c) = self.cuda.as_mut() {
            let picks: Vec<_> = choices
                .iter()
                .map(|c| {
                    c.map(|c| {
                        let p = favlo_runtime::cuda::SampleParams {
                            temperature: c.temperature,
                            top_k: c.top_k,
                            top_p: c.top_p,
                            min_p: c.min_p,
                        };
                        (p, c.uniform)
                    })
                })
                .collect();
            c.decode_batch(&self.w.embed, steps, &picks, logits, &mut tokens)?;
            return Ok(tokens);
        }
        #[cfg(not(feature = "cuda"))]
        let _ = choices;
        match steps {
            [] => Ok(tokens),
            [(_, id, at)] => self.forward(&[*id], *at, logits, false).map(|()| tokens),
            _ => Err(LlamaError::Request {
                message: format!("{} sequences: this model decodes one", steps.len()),
            }),
        }
    }

    fn check_seq(&self, seq: usize) -> Result<(), LlamaError> {
        let n = self.sequences();
        if seq >= n {
            return Err(LlamaError::Request {
                message: format!("sequence {seq}: this opening decodes {n}"),
            });
        }
        Ok(())
    }

    /// Refuses an empty run, one past the context, or ids outside the vocabulary.
    fn check_ids(&self, ids: &[u32], n_past: usize) -> Result<(), LlamaError> {
        let v = self.cfg.vocab_size;
        if ids.is_empty() {
            return Err(LlamaError::Request {
                message: "no tokens to run".into(),
            });
        }
        if n_past + ids.len() > self.capacity {
            return Err(LlamaError::Request {
                message: format!(
                    "{} tokens exceed the {}-token context",
                    n_past + ids.len(),
                    self.capacity
                ),
            });
        }
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= v) {
            return Err(LlamaError::Request {
                message: format!("token id {bad} is outside the vocabulary of {v}"),
            });
        }
        Ok(())
    }

    /// Run `ids` at positions `n_past..` (the cache must already hold `0..n_past`).
    /// With `all`, `logits` is `[ids.len(), vocab]`; otherwise `[vocab]` for the last token.
    pub fn forward(
        &mut self,
        ids: &[u32],
        n_past: usize,
        logits: &mut [f32],
        all: bool,
    ) -> Result<(), LlamaError> {
        let (v, d) = (self.cfg.vocab_size, self.cfg.hidden);
        self.check_ids(ids, n_past)?;
        let want = if all { ids.len() * v } else { v };
        if logits.len() != want {
            return Err(LlamaError::Request {
                message: format!("logits buffer holds {}, need {want}", logits.len()),
            });
        }
        #[cfg(feature = "cuda")]
        if let Some(c) = self.cuda.as_mut() {
            return c.forward(&self.w.embed, ids, n_past, logits, all);
        }
        let mut start = 0;
        let dump = dump::active();
        if let Some(dd) = dump {
            dd.next_call();
        }
        for chunk in ids.chunks(CHUNK) {
            let t = chunk.len();
            self.chunk(chunk, n_past + start)?;
            let head = self.w.head();
            let (ggml, eps) = (self.w.ggml_numerics, self.cfg.rms_eps);
            let norm = |x: &[f32], w: &[f32], out: &mut [f32]| {
                if ggml {
                    rms_norm_ggml(x, w, eps, out);
                } else {
                    cpu::rms_norm(x, w, eps, out);
                }
            };
            if all {
                norm(&self.s.x[..t * d], &self.w.out_norm, &mut self.s.h[..t * d]);
                head.linear(
                    &self.s.h[..t * d],
                    None,
                    &mut logits[start * v..(start + t) * v],
                );
                if let Some(dd) = dump {
                    dd.save("result_norm", &[t, d], &self.s.h[..t * d]);
                    dd.save(
                        "result_output",
                        &[t, v],
                        &logits[start * v..(start + t) * v],
                    );
                }
            } else if start + t == ids.len() {
                let last = &self.s.x[(t - 1) * d..t * d];
                norm(last, &self.w.out_norm, &mut self.s.h[..d]);
                head.linear(&self.s.h[..d], None, logits);
                if let Some(dd) = dump {
                    dd.save("result_norm", &[1, d], &self.s.h[..d]);
                    dd.save("result_output", &[1, v], logits);
                }
            }
            start += t;
        }
        Ok(())
    }

    /// One chunk (≤ CHUNK tokens) through every layer; leaves the residual in `s.x`.
    fn chunk(&mut self, ids: &[u32], n_past: usize) -> Result<(), LlamaError> {
        let c = &self.cfg;
        let t = ids.len();
        let (d, ff, qd, kvd, hd) = (c.hidden, c.intermediate, c.q_dim(), c.kv_dim(), c.head_dim);
        let w_qkv = qd + 2 * kvd;
        let cap_l = self.capacity * kvd;
        let positions: Vec<usize> = (n_past..n_past + t).collect();
        let shape = AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let ggml = self.w.ggml_numerics;
        let eps = c.rms_eps;
        let norm = |x: &[f32], w: &[f32], out: &mut [f32]| {
            if ggml {
                rms_norm_ggml(x, w, eps, out);
            } else {
                cpu::rms_norm(x, w, eps, out);
            }
        };
        if let Some(r) = &self.ggml_rope {
            r.table(&positions, &mut self.rope_table);
        }
        let s = &mut self.s;
        let (x, h) = (&mut s.x[..t * d], &mut s.h[..t * d]);
        self.w.embed.embed(ids, x);
        let dump = dump::active();
        let save = |name: &str, li: usize, cols: &[usize], data: &[f32]| {
            if let Some(dd) = dump {
                let shape: Vec<usize> = std::iter::once(t).chain(cols.iter().copied()).collect();
                dd.save(&format!("{name}-{li}"), &shape, data);
            }
        };
        for (li, layer) in self.w.layers.iter().enumerate() {
            // Attention block.
            norm(x, &layer.attn_norm, h);
            save("attn_norm", li, &[d], h);
            let qkv = &mut s.qkv[..t * w_qkv];
            layer.qkv.linear(h, layer.qkv_bias.as_deref(), qkv);
            let q = &mut s.q[..t * qd];
            let kn = &mut s.kn[..t * kvd];
            let vn = &mut s.vn[..t * kvd];
            for r in 0..t {
                let row = &qkv[r * w_qkv..(r + 1) * w_qkv];
                q[r * qd..(r + 1) * qd].copy_from_slice(&row[..qd]);
                kn[r * kvd..(r + 1) * kvd].copy_from_slice(&row[qd..qd + kvd]);
                vn[r * kvd..(r + 1) * kvd].copy_from_slice(&row[qd + kvd..]);
            }
            if let Some(qn) = &layer.q_norm {
                let tmp = &mut s.att[..t * qd];
                cpu::rms_norm(q, qn, c.rms_eps, tmp);
                q.copy_from_slice(tmp);
            }
            if let Some(kn_w) = &layer.k_norm {
                let tmp = &mut s.att[..t * kvd];
                cpu::rms_norm(kn, kn_w, c.rms_eps, tmp);
                kn.copy_from_slice(tmp);
            }
            if let Some(r) = &self.ggml_rope {
                r.apply(q, &self.rope_table, c.n_heads);
                r.apply(kn, &self.rope_table, c.n_kv_heads);
            } else {
                self.rotary.apply(q, &positions, c.n_heads);
                self.rotary.apply(kn, &positions, c.n_kv_heads);
            }
            save("Qcur", li, &[c.n_heads, hd], q);
            save("Kcur", li, &[c.n_kv_heads, hd], kn);
            save("Vcur", li, &[c.n_kv_heads, hd], vn);
            let att = &mut s.att[..t * qd];
            let layer_kv = li * cap_l..(li + 1) * cap_l;
            let new = n_past * kvd..(n_past + t) * kvd;
            match &mut self.kv {
                KvStore::F16 { k, v } => {
                    let (kc, vc) = (&mut k[layer_kv.clone()], &mut v[layer_kv]);
                    store_f16(kn, &mut kc[new.clone()]);
                    store_f16(vn, &mut vc[new]);
                    attention_ggml(q, kc, vc, att, shape, n_past, t, scale);
                }
                KvStore::F32 { k, v } => {
                    let (kc, vc) = (&mut k[layer_kv.clone()], &mut v[layer_kv]);
                    kc[new.clone()].copy_from_slice(kn);
                    vc[new].copy_from_slice(vn);
                    cpu::attention_causal(q, kc, vc, att, shape, n_past, t, scale);
                }
            }
            save("kqv_out", li, &[qd], att);
            layer.wo.linear(att, None, h);
            save("attn_out", li, &[d], h);
            cpu::add(x, h);
            save("ffn_inp", li, &[d], x);
            // Feed-forward block.
            norm(x, &layer.ffn_norm, h);
            save("ffn_norm", li, &[d], h);
            let gu = &mut s.gu[..t * 2 * ff];
            layer.gate_up.linear(h, None, gu);
            save("ffn_gate_up", li, &[2 * ff], gu);
            let act = &mut s.act[..t * ff];
            for r in 0..t {
                let row = &gu[r * 2 * ff..(r + 1) * 2 * ff];
                let o = &mut act[r * ff..(r + 1) * ff];
                if ggml {
                    swiglu_ggml(&row[..ff], &row[ff..], o);
                } else {
                    cpu::swiglu(&row[..ff], &row[ff..], o);
                }
            }
            save("ffn_swiglu", li, &[ff], act);
            layer.down.linear(act, None, h);
            save("ffn_out", li, &[d], h);
            cpu::add(x, h);
            save("l_out", li, &[d], x);
        }
        Ok(())
    }
}
