//! The VITS text encoder (`enc_p`): token embedding · √h, `n` post-norm
//! transformer layers (windowed relative-position self-attention, a two-conv
//! ReLU FFN with "same" padding), and the 1×1 projection to the prior's
//! statistics `m_p`, `logs_p`.
//!
//! Key design choice: one unpadded sentence at a time, so no masks: every
//! `x * x_mask` of the reference is the identity. All tensors are `[C, T]`.

use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::{self, RelAttnShape};

use crate::error::VitsError;
use crate::weights::{Conv, Loader, Scratch, Workspace};

/// Layer norm epsilon of VITS's `attentions.LayerNorm`.
pub const LN_EPS: f32 = 1e-5;

/// Channel layer norm parameters.
#[derive(Debug)]
pub struct Norm {
    gamma: Buffer<f32>,
    beta: Buffer<f32>,
}

impl Norm {
    /// `{prefix}.gamma` / `{prefix}.beta` of `channels`.
    pub fn load(l: &Loader<'_>, prefix: &str, channels: usize) -> Result<Self, VitsError> {
        Ok(Norm {
            gamma: l.tensor(&format!("{prefix}.gamma"), &[channels])?,
            beta: l.tensor(&format!("{prefix}.beta"), &[channels])?,
        })
    }

    /// γ `[C]`.
    #[cfg(feature = "cuda")]
    pub(crate) fn gamma(&self) -> &[f32] {
        &self.gamma
    }

    /// β `[C]`.
    #[cfg(feature = "cuda")]
    pub(crate) fn beta(&self) -> &[f32] {
        &self.beta
    }

    /// `out = LN(x[C, T])` over channels.
    pub fn run(&self, x: &[f32], len: usize, out: &mut [f32]) {
        cpu::layer_norm_channels(
            x,
            self.gamma.len(),
            len,
            &self.gamma,
            &self.beta,
            LN_EPS,
            out,
        );
    }
}

/// One post-norm layer: `x = LN1(x + o(attn(q(x), k(x), v(x))))`,
/// `x = LN2(x + ffn2(relu(ffn1(x))))`.
#[derive(Debug)]
pub(crate) struct Layer {
    pub(crate) q: Conv,
    pub(crate) k: Conv,
    pub(crate) v: Conv,
    pub(crate) o: Conv,
    pub(crate) emb_k: Buffer<f32>,
    pub(crate) emb_v: Buffer<f32>,
    pub(crate) norm1: Norm,
    pub(crate) ffn1: Conv,
    pub(crate) ffn2: Conv,
    pub(crate) norm2: Norm,
}

/// What the encoder produces for one sentence.
#[derive(Debug)]
pub struct Encoded<'w> {
    /// Hidden states `[h, T]` (the duration predictor's input).
    pub x: Scratch<'w>,
    /// Prior means `[c, T]`.
    pub m: Scratch<'w>,
    /// Prior log standard deviations `[c, T]`.
    pub logs: Scratch<'w>,
}

/// The loaded text encoder.
#[derive(Debug)]
pub struct TextEncoder {
    emb: Buffer<f32>,
    vocab: usize,
    hidden: usize,
    heads: usize,
    head_dim: usize,
    window: usize,
    layers: Vec<Layer>,
    proj: Conv,
}

impl TextEncoder {
    /// Loads `enc_p.*` (the embedding through the `/enc_p/emb/Gather` node).
    pub fn load(l: &Loader<'_>) -> Result<Self, VitsError> {
        let (emb, es) = l.node_input("/enc_p/emb/Gather", 0)?;
        let [vocab, hidden] = es[..] else {
            return Err(VitsError::Graph {
                path: Default::default(),
                what: "enc_p.emb".into(),
                reason: format!("shape {es:?}, expected 2-D"),
            });
        };
        let mut layers = Vec::new();
        let (mut head_dim, mut window) = (hidden, 0);
        while l.has_tensor(&format!(
            "enc_p.encoder.attn_layers.{}.emb_rel_k",
            layers.len()
        )) {
            let i = layers.len();
            let a = format!("enc_p.encoder.attn_layers.{i}");
            let (_, rel) = l.values(&format!("{a}.emb_rel_k"), None)?;
            if rel.len() != 3 || rel[0] != 1 || rel[1] % 2 == 0 || hidden % rel[2] != 0 {
                return Err(VitsError::Graph {
                    path: Default::default(),
                    what: format!("{a}.emb_rel_k"),
                    reason: format!("shape {rel:?}: expected [1, 2w+1, d] shared by the heads"),
                });
            }
            head_dim = rel[2];
            window = rel[1] / 2;
            let f = format!("enc_p.encoder.ffn_layers.{i}");
            let ffn1 = l.conv(&format!("{f}.conv_1"), None)?;
            let pad = Some((ffn1.kernel() - 1) / 2);
            layers.push(Layer {
                q: l.conv(&format!("{a}.conv_q"), None)?,
                k: l.conv(&format!("{a}.conv_k"), None)?,
                v: l.conv(&format!("{a}.conv_v"), None)?,
                o: l.conv(&format!("{a}.conv_o"), None)?,
                emb_k: l.tensor(&format!("{a}.emb_rel_k"), &rel)?,
                emb_v: l.tensor(&format!("{a}.emb_rel_v"), &rel)?,
                norm1: Norm::load(l, &format!("enc_p.encoder.norm_layers_1.{i}"), hidden)?,
                ffn1: l.conv(&format!("{f}.conv_1"), pad)?,
                ffn2: l.conv(&format!("{f}.conv_2"), pad)?,
                norm2: Norm::load(l, &format!("enc_p.encoder.norm_layers_2.{i}"), hidden)?,
            });
        }
        Ok(TextEncoder {
            emb: l.resident(&emb)?,
            vocab,
            hidden,
            heads: hidden / head_dim,
            head_dim,
            window,
            layers,
            proj: l.conv("enc_p.proj", None)?,
        })
    }

    /// Hidden channels.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// The layers in order.
    #[cfg(feature = "cuda")]
    pub(crate) fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The 1×1 projection to `[m; logs]`.
    #[cfg(feature = "cuda")]
    pub(crate) fn proj(&self) -> &Conv {
        &self.proj
    }

    /// The attention shape of a `len`-phoneme sentence.
    pub(crate) fn attn_shape(&self, len: usize) -> RelAttnShape {
        RelAttnShape {
            heads: self.heads,
            head_dim: self.head_dim,
            len,
            window: self.window,
        }
    }

    /// `x[h, T]` = embedding · √h of the ids (ids outside the vocabulary are an error).
    pub fn embed<'w>(&self, ws: &'w Workspace, ids: &[i64]) -> Result<Scratch<'w>, VitsError> {
        let (h, t) = (self.hidden, ids.len());
        let scale = (h as f32).sqrt();
        let mut x = ws.buf(h * t)?;
        for (j, &id) in ids.iter().enumerate() {
            let row = usize::try_from(id)
                .ok()
                .filter(|r| *r < self.vocab)
                .ok_or_else(|| VitsError::Request {
                    message: format!(
                        "phoneme id {id} is outside the voice's {} symbols",
                        self.vocab
                    ),
                    field: Some("text"),
                })?;
            for c in 0..h {
                x[c * t + j] = self.emb[row * h + c] * scale;
            }
        }
        Ok(x)
    }

    /// Runs the encoder on phoneme ids (ids outside the vocabulary are an error).
    pub fn run<'w>(&self, ws: &'w Workspace, ids: &[i64]) -> Result<Encoded<'w>, VitsError> {
        let (h, t) = (self.hidden, ids.len());
        let mut x = self.embed(ws, ids)?;
        let shape = self.attn_shape(t);
        let mut scores = ws.buf(shape.scratch_len())?;
        let mut att = ws.buf(h * t)?;
        for layer in &self.layers {
            let q = layer.q.run(ws, &x, t)?;
            let k = layer.k.run(ws, &x, t)?;
            let v = layer.v.run(ws, &x, t)?;
            cpu::attention_rel_window(
                &q,
                &k,
                &v,
                &layer.emb_k,
                &layer.emb_v,
                shape,
                &mut att,
                &mut scores,
            );
            let mut y = layer.o.run(ws, &att, t)?;
            cpu::add(&mut y, &x);
            layer.norm1.run(&y, t, &mut x);
            let mut f = layer.ffn1.run(ws, &x, t)?;
            cpu::relu(&mut f);
            let mut y = layer.ffn2.run(ws, &f, t)?;
            cpu::add(&mut y, &x);
            layer.norm2.run(&y, t, &mut x);
        }
        let stats = self.proj.run(ws, &x, t)?;
        let c = self.proj.out_channels() / 2;
        Ok(Encoded {
            m: ws.copy(&stats[..c * t])?,
            logs: ws.copy(&stats[c * t..2 * c * t])?,
            x,
        })
    }
}
