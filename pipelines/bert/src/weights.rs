//! Encoder weights: read from safetensors, laid out for the forward pass, held in ledger buffers.
//!
//! Key choices: Q, K and V are fused into one `[3h, h]` linear at load time (one GEMM per layer
//! instead of three, which matters at batch 1); every buffer is a `Resident` span of the ledger;
//! a linear is either f32 or group-wise int8 ([`crate::int8`]), chosen at load (an int8
//! checkpoint written by [`crate::quantize_int8`] is detected by its `*.weight_scale` tensors:
//! `[n, G]` group scales, group size from the file's `favlo.int8.group_size` metadata, or the old
//! per-row `[n]`; an f32 checkpoint can be quantized on the fly), or, for the serving default on
//! a CPU with AMX, packed once into the runtime's AMX tile layout ([`DEFAULT_AMX`] precision).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_formats::safetensors::SafeTensors;
use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::amx::{self, BLayout, GemmOpts, PackedB, Precision};
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};

use crate::config::{Activation, EncoderConfig};
use crate::dense;
use crate::epilogue::{self, Epilogue};
use crate::error::BertError;
use crate::int8::{self, Int8View};
use crate::quantize::meta as int8_meta;

/// The AMX precision [`WeightFormat::AsStored`] serves f32 checkpoints with when the CPU has
/// AMX: the one that keeps all-MiniLM-L6-v2 at cosine ≥ 0.9999 against sentence-transformers
/// (README: cosines per precision).
pub const DEFAULT_AMX: Precision = Precision::Bf16;

/// How the linear layers are stored in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// The serving default: an int8 checkpoint stays int8; f32 weights run on AMX tiles at
    /// [`DEFAULT_AMX`] precision when the CPU has AMX, else as [`WeightFormat::F32`].
    #[default]
    AsStored,
    /// Exact f32 linears (packed strips on the AVX-512/AVX2 `sgemm_nn`) for f32 checkpoints.
    F32,
    /// f32 checkpoints packed for the AMX tile GEMM at this precision (on a CPU without AMX
    /// the runtime's fallback runs the same packed weights).
    Amx(Precision),
    /// Quantize f32 linears to group-wise int8 ([`int8::GROUP`] columns per scale) while loading.
    Int8,
}

/// The weights of one linear layer.
pub(crate) enum LinearWeights {
    /// `W^T` packed into 48-column strips at load ([`dense::pack`]) for the runtime's row-major
    /// AVX-512/AVX2 `sgemm_nn` (1.7–3× the `gemm` crate's speed on MiniLM's shapes).
    Packed(Buffer<f32>),
    Int8 {
        q: Buffer<i8>,
        scales: Buffer<f32>,
        group: usize,
    },
    /// `W` packed at load into AMX tiles ([`amx::pack_b_into`], bf16 or bf16 hi+lo pairs).
    Amx {
        packed: Buffer<u16>,
        precision: Precision,
    },
}

/// `y = x W^T + b`.
pub(crate) struct Linear {
    pub w: LinearWeights,
    pub bias: Buffer<f32>,
    pub n: usize,
    pub k: usize,
}

impl Linear {
    /// Run on `x[m, k]` into `out[m, n]`, then the epilogue (bias, activation); `panel` is int8
    /// widening scratch (may be empty).
    pub fn forward(&self, x: &[f32], out: &mut [f32], panel: &mut [f32], ep: Epilogue) {
        let (n, k) = (self.n, self.k);
        match &self.w {
            LinearWeights::Amx { packed, precision } => {
                let m = x.len() / k.max(1);
                let Some(b) = PackedB::new(packed, n, k, *precision) else {
                    debug_assert!(false, "amx linear: packed length");
                    return;
                };
                // The bias rides in the GEMM's tile initialisation and the erf GELU runs on
                // each finished 32-column block while it is in L1; other activations take a
                // second pass.
                let gelu = |row: &mut [f32], _j0: usize| epilogue::gelu_in_place(row);
                let (fused, post): (bool, Option<amx::RowPost<'_>>) = match ep {
                    Epilogue::Bias => (true, None),
                    Epilogue::BiasAct(Activation::Gelu) => (true, Some(&gelu)),
                    Epilogue::BiasAct(_) => (false, None),
                };
                let opts = GemmOpts {
                    bias: fused.then_some(&self.bias[..]),
                    post,
                    ..GemmOpts::default()
                };
                amx::gemm(m, x, k, &b, out, n, &opts);
                if !fused {
                    epilogue::apply(out, &self.bias, ep);
                }
                return;
            }
            LinearWeights::Packed(wp) => dense::gemm_packed(x, wp, n, k, out),
            LinearWeights::Int8 { q, scales, group } => int8::linear_int8(
                x,
                Int8View {
                    q,
                    scales,
                    n,
                    k,
                    group: *group,
                },
                None,
                out,
                panel,
            ),
        }
        epilogue::apply(out, &self.bias, ep);
    }

    pub fn is_int8(&self) -> bool {
        matches!(self.w, LinearWeights::Int8 { .. })
    }

    /// What the weights run as: `"f32"`, `"int8"`, `"amx-bf16"` or `"amx-bf16x3"`.
    pub fn kind(&self) -> &'static str {
        match &self.w {
            LinearWeights::Packed(_) => "f32",
            LinearWeights::Int8 { .. } => "int8",
            LinearWeights::Amx { precision, .. } => match precision {
                Precision::Bf16 => "amx-bf16",
                Precision::Bf16x3 => "amx-bf16x3",
            },
        }
    }
}

/// LayerNorm weight and bias.
pub(crate) struct Norm {
    pub weight: Buffer<f32>,
    pub bias: Buffer<f32>,
}

/// One transformer layer.
pub(crate) struct Layer {
    pub qkv: Linear,
    pub attn_out: Linear,
    pub attn_norm: Norm,
    pub ffn_up: Linear,
    pub ffn_down: Linear,
    pub ffn_norm: Norm,
}

/// All weights of an encoder.
pub(crate) struct Weights {
    pub word: Buffer<f32>,
    pub position: Buffer<f32>,
    pub token_type: Buffer<f32>,
    pub emb_norm: Norm,
    pub layers: Vec<Layer>,
}

/// The safetensors file of a checkpoint directory (or the path itself when it is a file).
pub fn checkpoint_file(dir: &Path) -> PathBuf {
    if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join("model.safetensors")
    }
}

/// Reads tensors by their names relative to the model prefix (`bert.`, `roberta.`, none).
pub(crate) struct Reader {
    st: SafeTensors,
    path: PathBuf,
    prefix: String,
    names: Vec<String>,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Self, BertError> {
        let st = SafeTensors::open(path).map_err(|e| BertError::Checkpoint {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let names: Vec<String> = st.names().iter().map(|s| s.to_string()).collect();
        let anchor = "embeddings.word_embeddings.weight";
        let prefix = names
            .iter()
            .find_map(|n| n.strip_suffix(anchor))
            .ok_or_else(|| BertError::tensor(anchor, "not found under any prefix"))?
            .to_string();
        Ok(Reader {
            st,
            path: path.to_path_buf(),
            prefix,
            names,
        })
    }

    pub fn has(&self, name: &str) -> bool {
        let full = format!("{}{name}", self.prefix);
        self.names.contains(&full)
    }

    /// Shape of `name`, if present.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let full = format!("{}{name}", self.prefix);
        self.st.info(&full).map(|i| i.shape)
    }

    /// A `__metadata__` entry of the file.
    pub fn metadata(&self, key: &str) -> Option<String> {
        self.st.file_metadata().get(key).map(|v| v.to_string())
    }

    /// The tensor `name` as f32 with its shape checked against `shape`.
    pub fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, BertError> {
        let full = format!("{}{name}", self.prefix);
        let (data, got) = self
            .st
            .tensor_f32(&full)
            .map_err(|e| BertError::Checkpoint {
                path: self.path.clone(),
                reason: format!("{full}: {e}"),
            })?;
        let numel: usize = shape.iter().product();
        // Accept a leading batch dimension of 1 and equal element counts of the same shape.
        let squeezed: Vec<usize> = got.iter().copied().skip_while(|&d| d == 1).collect();
        let want: Vec<usize> = shape.iter().copied().skip_while(|&d| d == 1).collect();
        if squeezed != want || data.len() != numel {
            return Err(BertError::tensor(
                &full,
                format!("shape {got:?}, expected {shape:?}"),
            ));
        }
        Ok(data)
    }
}

impl Reader {
    /// A LayerNorm's (weight, bias); old TF-converted checkpoints call them gamma/beta.
    pub fn read_norm(&self, base: &str, h: usize) -> Result<(Vec<f32>, Vec<f32>), BertError> {
        let (w, b) = if self.has(&format!("{base}.weight")) {
            ("weight", "bias")
        } else {
            ("gamma", "beta")
        };
        Ok((
            self.f32(&format!("{base}.{w}"), &[h])?,
            self.f32(&format!("{base}.{b}"), &[h])?,
        ))
    }

    /// The linears `bases` (each `[n_each, k]`) stacked along n, as stored: f32 (from any
    /// float dtype) or Favlo int8 (detected by every base having a `weight_scale`).
    pub fn read_linear(
        &self,
        bases: &[String],
        n_each: usize,
        k: usize,
    ) -> Result<HostLinear, BertError> {
        let stored_int8 = bases.iter().all(|b| self.has(&format!("{b}.weight_scale")));
        let mut bias = Vec::with_capacity(n_each * bases.len());
        for b in bases {
            bias.extend(self.f32(&format!("{b}.bias"), &[n_each])?);
        }
        let n = n_each * bases.len();
        let w = if stored_int8 {
            let mut q = Vec::with_capacity(n * k);
            let mut scales = Vec::new();
            let mut group = None;
            for b in bases {
                let name = format!("{b}.weight");
                for v in self.f32(&name, &[n_each, k])? {
                    if v.fract() != 0.0 || !(-128.0..=127.0).contains(&v) {
                        return Err(BertError::tensor(
                            &name,
                            "int8 weight holds a non-int8 value",
                        ));
                    }
                    q.push(v as i8);
                }
                let scale_name = format!("{b}.weight_scale");
                let g = self.scale_group(&scale_name, n_each, k)?;
                if group.is_some_and(|prev| prev != g) {
                    return Err(BertError::tensor(
                        &scale_name,
                        "fused linears have different group sizes",
                    ));
                }
                group = Some(g);
                let groups = k.div_ceil(g);
                let shape = self.shape(&scale_name).unwrap_or_default();
                let want: Vec<usize> = if shape.len() == 1 {
                    vec![n_each]
                } else {
                    vec![n_each, groups]
                };
                scales.extend(self.f32(&scale_name, &want)?);
            }
            HostWeights::Int8 {
                q,
                scales,
                group: group.unwrap_or(k.max(1)),
            }
        } else {
            let mut w = Vec::with_capacity(n * k);
            for b in bases {
                w.extend(self.f32(&format!("{b}.weight"), &[n_each, k])?);
            }
            HostWeights::F32(w)
        };
        Ok(HostLinear { w, bias, n, k })
    }

    /// Group size of a stored scale tensor: `[n]` is the old per-row format (one group of
    /// `k`); `[n, G]` takes the group from the file's `favlo.int8.group_size` metadata, or,
    /// without it, `k / G` when that divides exactly.
    fn scale_group(&self, scale_name: &str, n: usize, k: usize) -> Result<usize, BertError> {
        let shape = self
            .shape(scale_name)
            .ok_or_else(|| BertError::tensor(scale_name, "not found"))?;
        let bad = |reason: String| BertError::tensor(scale_name, reason);
        match shape.as_slice() {
            [rows] if *rows == n => Ok(k.max(1)),
            [rows, groups] if *rows == n && *groups >= 1 => {
                let group = match self.metadata(int8_meta::GROUP_SIZE_KEY) {
                    Some(text) => text.trim().parse::<usize>().map_err(|_| {
                        bad(format!(
                            "metadata {} = {text:?} is not a number",
                            int8_meta::GROUP_SIZE_KEY
                        ))
                    })?,
                    None if k.is_multiple_of(*groups) => k / groups,
                    None => {
                        return Err(bad(format!(
                            "{groups} groups over {k} columns and no {} metadata",
                            int8_meta::GROUP_SIZE_KEY
                        )));
                    }
                };
                let group = int8::effective_group(k, group);
                if k.div_ceil(group) != *groups {
                    return Err(bad(format!(
                        "shape {shape:?} does not match group size {group} over {k} columns"
                    )));
                }
                Ok(group)
            }
            _ => Err(bad(format!(
                "shape {shape:?}, expected [{n}] or [{n}, {}]",
                k.div_ceil(int8::GROUP)
            ))),
        }
    }
}

/// A linear layer's weights as the checkpoint stores them, before they are laid out.
pub(crate) enum HostWeights {
    F32(Vec<f32>),
    Int8 {
        q: Vec<i8>,
        scales: Vec<f32>,
        group: usize,
    },
}

/// `y = x W^T + b` as read: `W[n, k]` row-major, `bias[n]`.
pub(crate) struct HostLinear {
    pub w: HostWeights,
    pub bias: Vec<f32>,
    pub n: usize,
    pub k: usize,
}

impl HostLinear {
    /// `W` as f32 values: stored int8 widened to `scale · q` (the values the CPU's int8
    /// kernels multiply by, rounded once to f32); f32 as stored, or with `quantize` first
    /// through the load-time group-int8 quantization ([`WeightFormat::Int8`]). Used by the
    /// CUDA path, which runs every linear in f32.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn widened(self, quantize: bool) -> Vec<f32> {
        let (n, k) = (self.n, self.k);
        let (q, scales, group) = match self.w {
            HostWeights::F32(w) if !quantize => return w,
            HostWeights::F32(w) => {
                let (q, s) = int8::quantize_groups(&w, n, k, int8::GROUP);
                (q, s, int8::effective_group(k, int8::GROUP))
            }
            HostWeights::Int8 { q, scales, group } => (q, scales, group),
        };
        let groups = k.div_ceil(group.max(1));
        let mut w = vec![0f32; n * k];
        for (j, row) in w.chunks_exact_mut(k.max(1)).enumerate().take(n) {
            for (c, v) in row.iter_mut().enumerate() {
                *v = scales[j * groups + c / group] * f32::from(q[j * k + c]);
            }
        }
        w
    }
}

/// Loads tensors into ledger buffers for one owner.
pub(crate) struct Loader<'a> {
    pub reader: &'a Reader,
    pub ledger: &'a Arc<Ledger>,
    pub owner: &'a Owner,
    pub format: WeightFormat,
}

impl Loader<'_> {
    fn put<T: favlo_runtime::buffer::Element>(
        &self,
        data: &[T],
        what: &str,
    ) -> Result<Buffer<T>, BertError> {
        self.ledger
            .alloc_from(self.owner, SpanKind::Resident, data)
            .map_err(|e| BertError::ledger(what, e))
    }

    fn vec(&self, name: &str, shape: &[usize]) -> Result<Buffer<f32>, BertError> {
        let data = self.reader.f32(name, shape)?;
        self.put(&data, name)
    }

    fn norm(&self, base: &str, h: usize) -> Result<Norm, BertError> {
        let (w, b) = self.reader.read_norm(base, h)?;
        Ok(Norm {
            weight: self.put(&w, base)?,
            bias: self.put(&b, base)?,
        })
    }

    /// Rows of one or more linears stacked along n (for the fused QKV).
    fn linear(&self, bases: &[String], n_each: usize, k: usize) -> Result<Linear, BertError> {
        let HostLinear { w, bias, n, k } = self.reader.read_linear(bases, n_each, k)?;
        let what = format!("{} (+{} fused)", bases[0], bases.len() - 1);
        let w = match w {
            HostWeights::Int8 { q, scales, group } => LinearWeights::Int8 {
                q: self.put(&q, &what)?,
                scales: self.put(&scales, &what)?,
                group,
            },
            HostWeights::F32(w) => {
                let amx_precision = match self.format {
                    WeightFormat::AsStored if amx::available() => Some(DEFAULT_AMX),
                    WeightFormat::Amx(p) => Some(p),
                    _ => None,
                };
                match self.format {
                    _ if amx_precision.is_some() => {
                        let precision = amx_precision.unwrap_or(DEFAULT_AMX);
                        let mut packed = vec![0u16; amx::packed_len(n, k, precision)];
                        amx::pack_b_into(&w, BLayout::Nk, n, k, precision, &mut packed);
                        LinearWeights::Amx {
                            packed: self.put(&packed, &what)?,
                            precision,
                        }
                    }
                    WeightFormat::AsStored | WeightFormat::F32 | WeightFormat::Amx(_) => {
                        LinearWeights::Packed(self.put(&dense::pack(&w, n, k), &what)?)
                    }
                    WeightFormat::Int8 => {
                        let (q, scales) = int8::quantize_groups(&w, n, k, int8::GROUP);
                        LinearWeights::Int8 {
                            q: self.put(&q, &what)?,
                            scales: self.put(&scales, &what)?,
                            group: int8::effective_group(k, int8::GROUP),
                        }
                    }
                }
            }
        };
        Ok(Linear {
            w,
            bias: self.put(&bias, &what)?,
            n,
            k,
        })
    }

    pub fn load(&self, cfg: &EncoderConfig) -> Result<Weights, BertError> {
        let h = cfg.hidden_size;
        let e = "embeddings";
        let word = self.vec(&format!("{e}.word_embeddings.weight"), &[cfg.vocab_size, h])?;
        let position = self.vec(
            &format!("{e}.position_embeddings.weight"),
            &[cfg.max_position_embeddings, h],
        )?;
        let token_type = if self
            .reader
            .has(&format!("{e}.token_type_embeddings.weight"))
        {
            self.vec(
                &format!("{e}.token_type_embeddings.weight"),
                &[cfg.type_vocab_size, h],
            )?
        } else {
            self.put(&vec![0f32; h], "token_type_embeddings (absent: zeros)")?
        };
        let emb_norm = self.norm(&format!("{e}.LayerNorm"), h)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("encoder.layer.{l}");
            let qkv_names: Vec<String> = ["query", "key", "value"]
                .iter()
                .map(|s| format!("{p}.attention.self.{s}"))
                .collect();
            layers.push(Layer {
                qkv: self.linear(&qkv_names, h, h)?,
                attn_out: self.linear(&[format!("{p}.attention.output.dense")], h, h)?,
                attn_norm: self.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                ffn_up: self.linear(
                    &[format!("{p}.intermediate.dense")],
                    cfg.intermediate_size,
                    h,
                )?,
                ffn_down: self.linear(&[format!("{p}.output.dense")], h, cfg.intermediate_size)?,
                ffn_norm: self.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        Ok(Weights {
            word,
            position,
            token_type,
            emb_norm,
            layers,
        })
    }
}

/// Resident bytes the weights will take (for the fit check before the first allocation);
/// int8 scales are counted at [`int8::GROUP`] columns per scale.
pub fn resident_bytes(cfg: &EncoderConfig, int8: bool) -> u64 {
    let h = cfg.hidden_size as u64;
    let i = cfg.intermediate_size as u64;
    let linear_params = cfg.num_layers as u64 * (4 * h * h + 2 * h * i);
    let linear_rows = cfg.num_layers as u64 * (4 * h + h + i);
    let g = int8::GROUP as u64;
    let scales = cfg.num_layers as u64 * ((4 * h + i) * h.div_ceil(g) + h * i.div_ceil(g));
    let other =
        (cfg.vocab_size as u64 + cfg.max_position_embeddings as u64 + cfg.type_vocab_size as u64)
            * h
            + cfg.num_layers as u64 * 4 * h
            + linear_rows
            + 2 * h;
    let linear_bytes = if int8 {
        linear_params + scales * 4
    } else {
        // Packed strips pad n up to a multiple of the strip width.
        let pad = |n: u64| n.div_ceil(dense::STRIP as u64) * dense::STRIP as u64;
        let strips =
            cfg.num_layers as u64 * (h * pad(3 * h) + h * pad(h) + h * pad(i) + i * pad(h));
        // AMX bf16x3 packing: two u16 per weight, n and k padded to whole tiles.
        let (hu, iu) = (cfg.hidden_size, cfg.intermediate_size);
        let tiles: usize = [(3 * hu, hu), (hu, hu), (iu, hu), (hu, iu)]
            .iter()
            .map(|&(n, k)| amx::packed_len(n, k, Precision::Bf16x3))
            .sum();
        let tiles = cfg.num_layers as u64 * tiles as u64 / 2;
        linear_params.max(strips).max(tiles) * 4
    };
    linear_bytes + other * 4
}
