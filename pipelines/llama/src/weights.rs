//! Resident weights: every tensor copied or decoded once into a ledger buffer.
//!
//! Key design choices:
//! - GGUF checkpoints keep their blocks by default ([`WeightFormat::Native`]): the
//!   matrices stay Q4_1/Q5_0/Q8_0/Q4_K/Q6_K… and run through `cpu::gguf_dot`, which
//!   quantizes activations to 8-bit blocks as llama.cpp does (same near-tie rounding,
//!   ~0.6 bytes/weight streamed per token). Block types the kernels lack fall back to f16.
//! - Otherwise linear layers are stored as f16, MXFP8, MXFP4 or f32 ([`WeightFormat`]);
//!   norms, biases and q/k norms stay f32. f16 is the default because it is
//!   near-exact for GGUF's 4/5/8-bit blocks, while MXFP8 (3 mantissa bits)
//!   re-quantizes them audibly: on SmolLM2 Q4_1 it flips 10 % of greedy steps
//!   against llama.cpp where f16/f32 flip only near-ties (README). With MXFP4 the embedding/head stays
//!   MXFP8: it is the most quantization-sensitive matrix and is read once per token.
//! - Q/K/V are fused into one `[q+2kv, hidden]` matrix and gate/up into one
//!   `[2*ff, hidden]` matrix, so decode makes 4 matrix calls per layer instead of 7.
//! - A missing head tensor means tied embeddings: the head *is* the embedding matrix.

use std::sync::Arc;

use favlo_formats::gguf::GgmlType;
use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::{self, GgufMatrix, GgufType, WeightRef};
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};

use crate::checkpoint::{Checkpoint, Role};
use crate::config::{LlamaConfig, RopeScaling};
use crate::error::LlamaError;

/// How the linear layers are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// GGUF checkpoints: keep the file's blocks (llama.cpp numerics); others: f16.
    #[default]
    Native,
    /// Everything f32 (reference quality, 4 bytes/weight).
    F32,
    /// IEEE half (2 bytes/weight): near-exact for GGUF 4/5/8-bit blocks.
    F16,
    /// MXFP8 E4M3 with E8M0 scales per 32 (≈1.03 bytes/weight).
    Mxfp8,
    /// MXFP4 E2M1 (≈0.53 bytes/weight); embedding/head kept MXFP8.
    Mxfp4,
}

impl WeightFormat {
    /// Parse `native` (or `gguf`) / `f32` / `f16` / `mxfp8` / `mxfp4` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "native" | "gguf" | "auto" => Some(WeightFormat::Native),
            "f32" => Some(WeightFormat::F32),
            "f16" => Some(WeightFormat::F16),
            "mxfp8" | "fp8" => Some(WeightFormat::Mxfp8),
            "mxfp4" | "fp4" => Some(WeightFormat::Mxfp4),
            _ => None,
        }
    }
}

/// A `[n, k]` weight matrix in its storage type.
pub(crate) enum Matrix {
    F32 {
        buf: Buffer<f32>,
        n: usize,
        k: usize,
    },
    F16 {
        buf: Buffer<half::f16>,
        n: usize,
        k: usize,
    },
    Mx {
        buf: Buffer<u8>,
        layout: MxLayout,
    },
    /// GGUF blocks as stored in the file: `len` bytes at `off` of the model's
    /// shared block arena (one allocation, so it gets huge pages).
    Gguf {
        arena: Arc<Buffer<u8>>,
        off: usize,
        len: usize,
        ty: GgufType,
        n: usize,
        k: usize,
    },
    /// Row-stacked GGUF matrices of different block types (e.g. Q/K/V of a
    /// mixed-quant file), filling consecutive output columns.
    Split {
        parts: Vec<Matrix>,
        n: usize,
    },
}

impl Matrix {
    /// Store row-major `values` (`n*k`) in `format`.
    pub(crate) fn build(
        ledger: &Arc<Ledger>,
        owner: &Owner,
        values: &[f32],
        n: usize,
        k: usize,
        format: WeightFormat,
    ) -> Result<Matrix, LlamaError> {
        let elem = match format {
            WeightFormat::F32 => {
                let buf = ledger.alloc_from(owner, SpanKind::Resident, values)?;
                return Ok(Matrix::F32 { buf, n, k });
            }
            WeightFormat::F16 | WeightFormat::Native => {
                let mut buf = ledger.alloc::<half::f16>(owner, SpanKind::Resident, values.len())?;
                for (d, s) in buf.iter_mut().zip(values) {
                    *d = half::f16::from_f32(*s);
                }
                return Ok(Matrix::F16 { buf, n, k });
            }
            WeightFormat::Mxfp8 => ElementFormat::Fp8E4M3,
            WeightFormat::Mxfp4 => ElementFormat::Fp4E2M1,
        };
        let layout = MxLayout {
            format: elem,
            rows: n,
            cols: k,
        };
        let mut buf = ledger.alloc::<u8>(owner, SpanKind::Resident, layout.total_bytes())?;
        favlo_mx::pack(values, layout, ScaleRule::default(), &mut buf)?;
        Ok(Matrix::Mx { buf, layout })
    }

    /// The dense/MX kernels' view (`None` for GGUF blocks).
    pub(crate) fn weight(&self) -> Option<WeightRef<'_>> {
        Some(match self {
            Matrix::F32 { buf, n, k } => WeightRef::F32 {
                data: buf,
                n: *n,
                k: *k,
            },
            Matrix::F16 { buf, n, k } => WeightRef::F16 {
                data: buf,
                n: *n,
                k: *k,
            },
            Matrix::Mx { buf, layout } => WeightRef::Mx(MxView {
                layout: *layout,
                bytes: buf,
            }),
            Matrix::Gguf { .. } | Matrix::Split { .. } => return None,
        })
    }

    fn gguf(&self) -> Option<GgufMatrix<'_>> {
        match self {
            Matrix::Gguf {
                arena,
                off,
                len,
                ty,
                n,
                k,
            } => Some(GgufMatrix {
                ty: *ty,
                data: &arena[*off..*off + *len],
                n: *n,
                k: *k,
            }),
            _ => None,
        }
    }

    /// `out[m, n] = x[m, k] · W^T (+ bias)`.
    pub(crate) fn linear(&self, x: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        if let Some(w) = self.weight() {
            cpu::linear(x, w, bias, out);
        } else if let Some(g) = self.gguf() {
            cpu::gguf_linear(x, g, bias, out);
        } else if let Matrix::Split { parts, n } = self {
            let mut col = 0;
            for g in parts.iter().filter_map(Matrix::gguf) {
                cpu::gguf_linear_into(x, g, out, *n, col);
                col += g.n;
            }
            if let Some(b) = bias {
                for row in out.chunks_exact_mut(*n) {
                    for (o, bi) in row.iter_mut().zip(b) {
                        *o += *bi;
                    }
                }
            }
        }
    }

    /// Rows `ids` of the matrix as f32 (`out` = `[ids.len(), k]`), for embeddings.
    pub(crate) fn embed(&self, ids: &[u32], out: &mut [f32]) {
        if let Some(w) = self.weight() {
            cpu::embedding(w, ids, out);
        } else if let Some(g) = self.gguf() {
            for (&id, o) in ids.iter().zip(out.chunks_exact_mut(g.k)) {
                if (id as usize) < g.n {
                    g.row_to_f32(id as usize, o);
                }
            }
        }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Matrix::F32 { buf, .. } => buf.bytes(),
            Matrix::F16 { buf, .. } => buf.bytes(),
            Matrix::Mx { buf, .. } => buf.bytes(),
            Matrix::Gguf { len, .. } => *len as u64,
            Matrix::Split { parts, .. } => parts.iter().map(Matrix::bytes).sum(),
        }
    }
}

/// The kernels' type for a GGUF tensor type, if they have one.
fn gguf_type(t: GgmlType) -> Option<GgufType> {
    Some(match t {
        GgmlType::Q4_0 => GgufType::Q4_0,
        GgmlType::Q4_1 => GgufType::Q4_1,
        GgmlType::Q5_0 => GgufType::Q5_0,
        GgmlType::Q5_1 => GgufType::Q5_1,
        GgmlType::Q8_0 => GgufType::Q8_0,
        GgmlType::Q4_K => GgufType::Q4_K,
        GgmlType::Q5_K => GgufType::Q5_K,
        GgmlType::Q6_K => GgufType::Q6_K,
        _ => return None,
    })
}

/// One matrix to load: `[rows_i, k]` tensors `parts` stacked by rows.
struct Spec {
    parts: Vec<(Role, usize, usize)>,
    k: usize,
    format: WeightFormat,
}

/// A matrix kept in its GGUF blocks: per part (one part per block type run) its
/// type, the file's byte ranges and its rows.
type NativePlan<'a> = Vec<(GgufType, Vec<&'a [u8]>, usize)>;

/// Where a matrix's blocks start in the arena: a cache line boundary.
const ARENA_ALIGN: usize = 64;

/// How `spec` stays in GGUF blocks, if it does: the format is native and every part
/// has a kernel type and the expected shape. Consecutive parts of one type merge.
fn plan_native<'a>(ck: &'a Checkpoint, spec: &Spec) -> Option<NativePlan<'a>> {
    if spec.format != WeightFormat::Native {
        return None;
    }
    let k = spec.k;
    let raws = spec
        .parts
        .iter()
        .map(|&(role, l, rows)| {
            let (t, bytes, shape) = ck.raw(role, l)?;
            let ty = gguf_type(t)?;
            (shape == [rows, k] && k.is_multiple_of(ty.block_size())).then_some((ty, bytes, rows))
        })
        .collect::<Option<Vec<_>>>()?;
    let mut plan: NativePlan<'a> = Vec::new();
    if raws.iter().all(|r| r.0 == raws[0].0) {
        let n = raws.iter().map(|r| r.2).sum();
        plan.push((raws[0].0, raws.iter().map(|r| r.1).collect(), n));
    } else {
        plan.extend(
            raws.iter()
                .map(|&(ty, bytes, rows)| (ty, vec![bytes], rows)),
        );
    }
    Some(plan)
}

/// Bytes a plan's parts take in the arena, each part aligned.
fn plan_bytes(plan: &NativePlan<'_>) -> usize {
    plan.iter()
        .map(|(_, chunks, _)| {
            chunks
                .iter()
                .map(|c| c.len())
                .sum::<usize>()
                .next_multiple_of(ARENA_ALIGN)
        })
        .sum()
}

/// Load every spec in order: GGUF-native matrices are copied into one arena buffer
/// (a single ledger allocation: the decode streams it every token, and one large
/// buffer is backed by huge pages), the others decoded to their format.
fn load_matrices(
    ck: &Checkpoint,
    specs: &[Spec],
    ledger: &Arc<Ledger>,
    owner: &Owner,
) -> Result<Vec<Matrix>, LlamaError> {
    let plans: Vec<Option<NativePlan<'_>>> = specs.iter().map(|s| plan_native(ck, s)).collect();
    let total: usize = plans.iter().flatten().map(plan_bytes).sum();
    let mut arena = ledger.alloc::<u8>(owner, SpanKind::Resident, total)?;
    // (offset, len) of every native part, in plan order.
    let mut spans = Vec::new();
    let mut at = 0;
    for (_, chunks, _) in plans.iter().flatten().flatten() {
        let start = at;
        for c in chunks {
            arena[at..at + c.len()].copy_from_slice(c);
            at += c.len();
        }
        spans.push((start, at - start));
        at = at.next_multiple_of(ARENA_ALIGN);
    }
    let arena = Arc::new(arena);
    let mut spans = spans.into_iter();
    let mut out = Vec::with_capacity(specs.len());
    for (spec, plan) in specs.iter().zip(&plans) {
        let k = spec.k;
        let Some(plan) = plan else {
            let n: usize = spec.parts.iter().map(|p| p.2).sum();
            let mut values = Vec::with_capacity(n * k);
            for &(role, l, rows) in &spec.parts {
                values.extend(ck.need(role, l, &[rows, k])?);
            }
            out.push(Matrix::build(ledger, owner, &values, n, k, spec.format)?);
            continue;
        };
        let mut parts = Vec::with_capacity(plan.len());
        for &(ty, _, n) in plan {
            let (off, len) = spans.next().ok_or_else(|| LlamaError::Request {
                message: "weight arena plan out of step".into(),
            })?;
            parts.push(Matrix::Gguf {
                arena: Arc::clone(&arena),
                off,
                len,
                ty,
                n,
                k,
            });
        }
        out.push(if parts.len() == 1 {
            parts.remove(0)
        } else {
            let n = spec.parts.iter().map(|p| p.2).sum();
            Matrix::Split { parts, n }
        });
    }
    Ok(out)
}

/// One decoder block.
pub(crate) struct Layer {
    pub attn_norm: Buffer<f32>,
    /// Fused `[q_dim + 2*kv_dim, hidden]`.
    pub qkv: Matrix,
    pub qkv_bias: Option<Buffer<f32>>,
    pub q_norm: Option<Buffer<f32>>,
    pub k_norm: Option<Buffer<f32>>,
    pub wo: Matrix,
    pub ffn_norm: Buffer<f32>,
    /// Fused `[2*ff, hidden]`: gate rows then up rows.
    pub gate_up: Matrix,
    pub down: Matrix,
}

/// All resident weights of a model.
pub(crate) struct Weights {
    pub embed: Matrix,
    /// `None` = tied to `embed`.
    pub head: Option<Matrix>,
    pub out_norm: Buffer<f32>,
    pub layers: Vec<Layer>,
    /// Native GGUF: attention follows llama.cpp's f16 KV numerics too.
    pub ggml_numerics: bool,
}

impl Weights {
    pub(crate) fn head(&self) -> &Matrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }

    /// Total resident bytes.
    pub(crate) fn bytes(&self) -> u64 {
        let mut b = self.embed.bytes()
            + self.head.as_ref().map_or(0, Matrix::bytes)
            + self.out_norm.bytes();
        for l in &self.layers {
            b += l.attn_norm.bytes() + l.qkv.bytes() + l.wo.bytes() + l.ffn_norm.bytes();
            b += l.gate_up.bytes() + l.down.bytes();
            b += l.qkv_bias.as_ref().map_or(0, |x| x.bytes());
            b += l.q_norm.as_ref().map_or(0, |x| x.bytes())
                + l.k_norm.as_ref().map_or(0, |x| x.bytes());
        }
        b
    }
}

/// Load every tensor of `ck` for `cfg` into the ledger. May refine `cfg`
/// (tied head, GGUF rope frequency factors).
pub(crate) fn load(
    ck: &Checkpoint,
    cfg: &mut LlamaConfig,
    ledger: &Arc<Ledger>,
    owner: &Owner,
    format: WeightFormat,
) -> Result<Weights, LlamaError> {
    let (d, ff, qd, kvd, hd) = (
        cfg.hidden,
        cfg.intermediate,
        cfg.q_dim(),
        cfg.kv_dim(),
        cfg.head_dim,
    );
    let table_format = if format == WeightFormat::Mxfp4 {
        WeightFormat::Mxfp8
    } else {
        format
    };
    let f32buf = |v: Vec<f32>| ledger.alloc_from(owner, SpanKind::Resident, &v);

    let has_head = ck.has(Role::Head, 0) && !cfg.tie_embeddings;
    let spec = |parts: &[(Role, usize, usize)], k: usize, format: WeightFormat| Spec {
        parts: parts.to_vec(),
        k,
        format,
    };
    let mut specs = vec![spec(&[(Role::Embed, 0, cfg.vocab_size)], d, table_format)];
    if has_head {
        specs.push(spec(&[(Role::Head, 0, cfg.vocab_size)], d, table_format));
    } else {
        cfg.tie_embeddings = true;
    }
    for l in 0..cfg.n_layers {
        specs.push(spec(
            &[(Role::Q, l, qd), (Role::K, l, kvd), (Role::V, l, kvd)],
            d,
            format,
        ));
        specs.push(spec(&[(Role::O, l, d)], qd, format));
        specs.push(spec(&[(Role::Gate, l, ff), (Role::Up, l, ff)], d, format));
        specs.push(spec(&[(Role::Down, l, d)], ff, format));
    }
    let mut mats = load_matrices(ck, &specs, ledger, owner)?.into_iter();
    let mut next = || {
        mats.next().ok_or_else(|| LlamaError::Request {
            message: "weight list out of step".into(),
        })
    };
    let embed = next()?;
    let head = if has_head { Some(next()?) } else { None };
    let out_norm = f32buf(ck.need(Role::OutputNorm, 0, &[d])?)?;
    if let Some(f) = ck.maybe(Role::RopeFreqs, 0, &[cfg.rope_dim / 2])? {
        cfg.rope_scaling = RopeScaling::FreqFactors(f);
    }

    let mut layers = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let qkv = next()?;
        let qkv_bias = match ck.maybe(Role::QBias, l, &[qd])? {
            None => None,
            Some(mut b) => {
                b.extend(
                    ck.maybe(Role::KBias, l, &[kvd])?
                        .unwrap_or_else(|| vec![0.0; kvd]),
                );
                b.extend(
                    ck.maybe(Role::VBias, l, &[kvd])?
                        .unwrap_or_else(|| vec![0.0; kvd]),
                );
                Some(f32buf(b)?)
            }
        };
        let q_norm = ck.maybe(Role::QNorm, l, &[hd])?.map(f32buf).transpose()?;
        let k_norm = ck.maybe(Role::KNorm, l, &[hd])?.map(f32buf).transpose()?;
        let wo = next()?;
        let gate_up = next()?;
        let down = next()?;
        layers.push(Layer {
            attn_norm: f32buf(ck.need(Role::AttnNorm, l, &[d])?)?,
            qkv,
            qkv_bias,
            q_norm,
            k_norm,
            wo,
            ffn_norm: f32buf(ck.need(Role::FfnNorm, l, &[d])?)?,
            gate_up,
            down,
        });
    }
    Ok(Weights {
        embed,
        head,
        out_norm,
        layers,
        ggml_numerics: format == WeightFormat::Native && ck.raw(Role::Embed, 0).is_some(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use favlo_runtime::cpu;
    use favlo_runtime::device::Device;

    #[test]
    fn mx_linear_close_to_f32() {
        let ledger = Ledger::new(Device::Cpu, None);
        let owner = Owner::mint("t");
        let (n, k, m) = (48, 64, 3);
        let mut s = 1u64;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let mut want = vec![0.0; m * n];
        let f = Matrix::build(&ledger, &owner, &w, n, k, WeightFormat::F32).unwrap();
        cpu::linear(&x, f.weight().unwrap(), None, &mut want);
        for (fmt, bound) in [
            (WeightFormat::F16, 2e-3),
            (WeightFormat::Mxfp8, 0.03),
            (WeightFormat::Mxfp4, 0.15),
        ] {
            let q = Matrix::build(&ledger, &owner, &w, n, k, fmt).unwrap();
            let mut got = vec![0.0; m * n];
            cpu::linear(&x, q.weight().unwrap(), None, &mut got);
            let num = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            let den = want.iter().map(|b| b.abs()).fold(0.0, f32::max);
            let mut deq = vec![0.0; k];
            q.weight().unwrap().row_to_f32(0, &mut deq);
            let werr = deq
                .iter()
                .zip(&w[..k])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            println!(
                "{fmt:?}: linear rel err {:.3e}, row0 weight max err {werr:.3e}",
                num / den
            );
            assert!(num / den < bound, "{fmt:?} {}", num / den);
        }
    }
}
