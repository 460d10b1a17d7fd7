//! Weights from the Piper ONNX graph into ledger buffers, found by module path.
//!
//! Key design choice: Piper exports fold weight norm into anonymous initializers
//! (`onnx::Conv_8240`), so convolution weights are found through the graph, not
//! by name: every `Conv`/`ConvTranspose` node is indexed by its module path
//! (node `/flow/flows.0/enc/in_layers.0/Conv` → `flow.flows.0.enc.in_layers.0`),
//! and its weight, bias, kernel, dilation, padding, stride and groups come from
//! that node's inputs and attributes. Plain tensors (norms, relative
//! embeddings) are read by name; the token embedding through its `Gather` node.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use favlo_formats::onnx::{OnnxAttrValue, OnnxModel, OnnxNode};
use favlo_runtime::buffer::Buffer;
use favlo_runtime::cpu::{self, Conv1d, ConvFuse, ConvTranspose1d};
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};

use crate::error::VitsError;

/// Scratch buffers for a job, all ledger spans of the voice's owner, recycled
/// until [`Workspace::release`].
///
/// A synthesis allocates the same few sizes over and over (every convolution
/// of a decoder stage, every coupling of the flow, every sentence); reusing
/// them saves the zero-fill and page faults of fresh allocations. A request
/// takes the smallest free buffer that is long enough; on a miss the free
/// buffers shorter than the request are dropped before allocating, so the pool
/// converges to the job's peak working set instead of growing. Recycled
/// contents are unspecified: callers overwrite what they read.
#[derive(Debug)]
pub struct Workspace {
    ledger: Arc<Ledger>,
    owner: Owner,
    pool: Mutex<Vec<Buffer<f32>>>,
}

/// A scratch buffer that returns to its workspace's pool when dropped.
#[derive(Debug)]
pub struct Scratch<'a> {
    buf: Option<Buffer<f32>>,
    len: usize,
    ws: &'a Workspace,
}

impl Deref for Scratch<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.buf.as_deref().map_or(&[], |b| &b[..self.len])
    }
}

impl DerefMut for Scratch<'_> {
    fn deref_mut(&mut self) -> &mut [f32] {
        let len = self.len;
        self.buf.as_deref_mut().map_or(&mut [], |b| &mut b[..len])
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if let (Some(b), Ok(mut pool)) = (self.buf.take(), self.ws.pool.lock()) {
            pool.push(b);
        }
    }
}

impl Workspace {
    /// Allocations for `owner` in `ledger`.
    pub fn new(ledger: &Arc<Ledger>, owner: &Owner) -> Self {
        Workspace {
            ledger: Arc::clone(ledger),
            owner: owner.clone(),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// A scratch buffer of `len` floats (contents unspecified).
    pub fn buf(&self, len: usize) -> Result<Scratch<'_>, VitsError> {
        let reused = self.pool.lock().ok().and_then(|mut pool| {
            let best = pool
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            match best {
                Some(i) => Some(pool.swap_remove(i)),
                None => {
                    pool.retain(|b| b.len() >= len);
                    None
                }
            }
        });
        let buf = match reused {
            Some(b) => b,
            None => self.ledger.alloc(&self.owner, SpanKind::Scratch, len)?,
        };
        Ok(Scratch {
            buf: Some(buf),
            len,
            ws: self,
        })
    }

    /// A zeroed scratch buffer of `len` floats.
    pub fn zeroed(&self, len: usize) -> Result<Scratch<'_>, VitsError> {
        let mut b = self.buf(len)?;
        b.fill(0.0);
        Ok(b)
    }

    /// A scratch buffer holding a copy of `data`.
    pub fn copy(&self, data: &[f32]) -> Result<Scratch<'_>, VitsError> {
        let mut b = self.buf(data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    /// Frees every recycled buffer (their spans leave the ledger).
    pub fn release(&self) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.clear();
        }
    }
}

/// How a convolution runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// Dense, stride 1.
    Dense(Conv1d),
    /// Depthwise (`groups == channels`), stride 1.
    Depthwise(Conv1d),
    /// Transposed, strided.
    Transposed(ConvTranspose1d),
}

/// One loaded convolution.
#[derive(Debug)]
pub struct Conv {
    weight: Buffer<f32>,
    bias: Option<Buffer<f32>>,
    kind: ConvKind,
}

impl Conv {
    /// Output channels.
    pub fn out_channels(&self) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.out_channels,
            ConvKind::Transposed(s) => s.out_channels,
        }
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.in_channels,
            ConvKind::Transposed(s) => s.in_channels,
        }
    }

    /// The weight in PyTorch's layout (`[Cout, Cin, K]`, transposed `[Cin, Cout, K]`),
    /// with any folded factor applied.
    pub fn weight(&self) -> &[f32] {
        &self.weight
    }

    /// The bias, if the node has one.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    /// The convolution's kind and geometry.
    pub fn kind(&self) -> ConvKind {
        self.kind
    }

    /// Multiplies the weight (not the bias) by `f`.
    pub fn scale_weight(&mut self, f: f32) {
        self.weight.iter_mut().for_each(|w| *w *= f);
    }

    /// Kernel taps.
    pub fn kernel(&self) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.kernel,
            ConvKind::Transposed(s) => s.kernel,
        }
    }

    /// Output length for an input of `len`.
    pub fn out_len(&self, len: usize) -> usize {
        match self.kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.out_len(len),
            ConvKind::Transposed(s) => s.out_len(len),
        }
    }

    /// `out = conv(x[Cin, len])`; `out` holds at least `Cout · out_len(len)`.
    pub fn run_into(
        &self,
        ws: &Workspace,
        x: &[f32],
        len: usize,
        out: &mut [f32],
    ) -> Result<(), VitsError> {
        self.run_fused(ws, x, len, out, None, None)
    }

    /// `out = residual + conv(leaky_relu(x, slope))`, each part optional (a
    /// residual is refused by transposed convolutions).
    pub fn run_fused(
        &self,
        ws: &Workspace,
        x: &[f32],
        len: usize,
        out: &mut [f32],
        slope: Option<f32>,
        residual: Option<&[f32]>,
    ) -> Result<(), VitsError> {
        let bias = self.bias.as_deref();
        match self.kind {
            ConvKind::Dense(s) => {
                let mut scratch = ws.buf(s.scratch_len(len))?;
                let fuse = ConvFuse {
                    input_slope: slope,
                    residual,
                };
                cpu::conv1d_fused(x, len, &self.weight, bias, s, out, &mut scratch, fuse);
            }
            ConvKind::Depthwise(s) if slope.is_none() && residual.is_none() => {
                cpu::conv1d_depthwise(x, len, &self.weight, bias, s, out)
            }
            ConvKind::Transposed(s) if residual.is_none() => {
                let mut scratch = ws.buf(s.scratch_len(len))?;
                cpu::conv_transpose1d(x, len, &self.weight, bias, s, out, &mut scratch, slope);
            }
            _ => {
                return Err(VitsError::Graph {
                    path: Default::default(),
                    what: "convolution".into(),
                    reason: "fusion not supported for this kind".into(),
                });
            }
        }
        Ok(())
    }

    /// Zero padding on each side of a dense convolution (its halo when run on
    /// a time chunk); 0 for other kinds.
    pub fn padding(&self) -> usize {
        match self.kind {
            ConvKind::Dense(s) => s.padding,
            _ => 0,
        }
    }

    /// `out = conv(leaky_relu(x, slope))` without padding ("valid"): `out`
    /// holds `Cout · (len − 2·padding)`. Dense convolutions only; used on time
    /// chunks whose halo stands in for the padding.
    pub fn run_valid(
        &self,
        ws: &Workspace,
        x: &[f32],
        len: usize,
        out: &mut [f32],
        slope: Option<f32>,
    ) -> Result<(), VitsError> {
        let ConvKind::Dense(s) = self.kind else {
            return Err(VitsError::Graph {
                path: Default::default(),
                what: "convolution".into(),
                reason: "a valid (unpadded) run needs a dense convolution".into(),
            });
        };
        let s = Conv1d { padding: 0, ..s };
        let mut scratch = ws.buf(s.scratch_len(len))?;
        let fuse = ConvFuse {
            input_slope: slope,
            residual: None,
        };
        cpu::conv1d_fused(
            x,
            len,
            &self.weight,
            self.bias.as_deref(),
            s,
            out,
            &mut scratch,
            fuse,
        );
        Ok(())
    }

    /// A new buffer `conv(x[Cin, len])` of `Cout · out_len(len)`.
    pub fn run<'w>(
        &self,
        ws: &'w Workspace,
        x: &[f32],
        len: usize,
    ) -> Result<Scratch<'w>, VitsError> {
        let mut out = ws.buf(self.out_channels() * self.out_len(len))?;
        self.run_into(ws, x, len, &mut out)?;
        Ok(out)
    }
}

/// The ONNX graph with its convolution index.
pub struct Loader<'a> {
    model: OnnxModel,
    convs: HashMap<String, usize>,
    ledger: &'a Arc<Ledger>,
    owner: &'a Owner,
    path: PathBuf,
}

fn module_path(node: &OnnxNode) -> Option<String> {
    let name = node.name.strip_prefix('/')?;
    let (module, _op) = name.rsplit_once('/')?;
    Some(module.replace('/', "."))
}

fn ints(node: &OnnxNode, key: &str) -> Option<Vec<i64>> {
    match node.attribute(key)? {
        OnnxAttrValue::Ints(v) => Some(v.clone()),
        OnnxAttrValue::Int(v) => Some(vec![*v]),
        _ => None,
    }
}

impl<'a> Loader<'a> {
    /// Opens the ONNX file and indexes its convolutions.
    pub fn open(path: &Path, ledger: &'a Arc<Ledger>, owner: &'a Owner) -> Result<Self, VitsError> {
        let model = OnnxModel::open(path).map_err(|e| VitsError::Checkpoint {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let convs = model
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| n.op_type == "Conv" || n.op_type == "ConvTranspose")
            .filter_map(|(i, n)| module_path(n).map(|m| (m, i)))
            .collect();
        Ok(Loader {
            model,
            convs,
            ledger,
            owner,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, what: &str, reason: impl Into<String>) -> VitsError {
        VitsError::Graph {
            path: self.path.clone(),
            what: what.to_string(),
            reason: reason.into(),
        }
    }

    /// Whether a convolution module exists.
    pub fn has_conv(&self, module: &str) -> bool {
        self.convs.contains_key(module)
    }

    /// Whether an initializer exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.model.initializer(name).is_some()
    }

    /// A tensor's values, checked against `shape` (`None`: any shape).
    pub fn values(
        &self,
        name: &str,
        shape: Option<&[usize]>,
    ) -> Result<(Vec<f32>, Vec<usize>), VitsError> {
        let (v, s) = self
            .model
            .tensor_f32(name)
            .map_err(|e| self.err(name, e.to_string()))?;
        if let Some(want) = shape
            && s != want
        {
            return Err(self.err(name, format!("shape {s:?}, expected {want:?}")));
        }
        Ok((v, s))
    }

    /// A resident buffer of a tensor checked against `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Buffer<f32>, VitsError> {
        let (v, _) = self.values(name, Some(shape))?;
        Ok(self.ledger.alloc_from(self.owner, SpanKind::Resident, &v)?)
    }

    /// A resident buffer holding `values`.
    pub fn resident(&self, values: &[f32]) -> Result<Buffer<f32>, VitsError> {
        Ok(self
            .ledger
            .alloc_from(self.owner, SpanKind::Resident, values)?)
    }

    /// The first input of the node named `node` (e.g. the embedding table of
    /// `/enc_p/emb/Gather`), with its values.
    pub fn node_input(
        &self,
        node: &str,
        index: usize,
    ) -> Result<(Vec<f32>, Vec<usize>), VitsError> {
        let n = self
            .model
            .nodes()
            .iter()
            .find(|n| n.name == node)
            .ok_or_else(|| self.err(node, "node not found"))?;
        let name = n
            .inputs
            .get(index)
            .ok_or_else(|| self.err(node, format!("no input {index}")))?;
        self.values(name, None)
    }

    /// A convolution module, its channels read from the weight; `pad`
    /// overrides the node's padding (Piper's FFN pads in a separate `Pad` node).
    pub fn conv(&self, module: &str, pad: Option<usize>) -> Result<Conv, VitsError> {
        let idx = *self
            .convs
            .get(module)
            .ok_or_else(|| self.err(module, "no Conv node for this module"))?;
        let node = &self.model.nodes()[idx];
        let wname = node
            .inputs
            .get(1)
            .ok_or_else(|| self.err(module, "no weight input"))?;
        let (w, ws) = self.values(wname, None)?;
        if ws.len() != 3 {
            return Err(self.err(
                module,
                format!("weight {wname} has shape {ws:?}, expected 3-D"),
            ));
        }
        let one = |key: &str| -> usize {
            ints(node, key)
                .and_then(|v| v.first().copied())
                .unwrap_or(1)
                .max(0) as usize
        };
        let (k, group, stride, dilation) = (ws[2], one("group"), one("strides"), one("dilations"));
        let pads = ints(node, "pads").unwrap_or_else(|| vec![0, 0]);
        if pads.len() != 2 || pads[0] != pads[1] {
            return Err(self.err(module, format!("asymmetric pads {pads:?}")));
        }
        let padding = pad.unwrap_or(pads[0].max(0) as usize);
        let kind = if node.op_type == "ConvTranspose" {
            if group != 1 || dilation != 1 {
                return Err(self.err(
                    module,
                    format!("ConvTranspose group {group}, dilation {dilation}"),
                ));
            }
            ConvKind::Transposed(ConvTranspose1d {
                in_channels: ws[0],
                out_channels: ws[1],
                kernel: k,
                stride,
                padding,
            })
        } else {
            if stride != 1 {
                return Err(self.err(module, format!("stride {stride} (only 1 is supported)")));
            }
            let mut shape = Conv1d {
                in_channels: ws[1],
                out_channels: ws[0],
                kernel: k,
                dilation,
                padding,
            };
            if group == 1 {
                ConvKind::Dense(shape)
            } else if group == ws[0] && ws[1] == 1 {
                shape.in_channels = ws[0];
                ConvKind::Depthwise(shape)
            } else {
                return Err(self.err(module, format!("Conv weight {ws:?} with group {group}")));
            }
        };
        let cout = match kind {
            ConvKind::Dense(s) | ConvKind::Depthwise(s) => s.out_channels,
            ConvKind::Transposed(s) => s.out_channels,
        };
        let bias = match node.inputs.get(2).filter(|b| !b.is_empty()) {
            Some(b) => Some(self.tensor(b, &[cout])?),
            None => None,
        };
        Ok(Conv {
            weight: self.ledger.alloc_from(self.owner, SpanKind::Resident, &w)?,
            bias,
            kind,
        })
    }
}
