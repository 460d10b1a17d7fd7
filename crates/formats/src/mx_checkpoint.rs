//! Favlo MX checkpoints: a safetensors container whose linear weight matrices
//! are packed MXFP8 / MXFP4 planes in the layout `favlo-mx` defines.
//!
//! Key design choice: the container stays plain safetensors (any tool can list
//! it), and everything Favlo-specific lives in the header metadata: the file is
//! tagged `favlo.format = mx-checkpoint-v1`, and each packed tensor `<name>` has
//! a metadata entry `favlo.mx:<name> = "<format> <rows> <cols> <rule>"`. A packed
//! tensor is stored as `U8 [total_bytes]` (data plane, then scale plane), so a
//! reader maps it straight into an [`MxView`] without copying. Norms, embeddings
//! and biases stay 16-bit (BF16, or F16 when the source was F16).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use half::{bf16, f16};
use safetensors::Dtype;

use crate::safetensors::{SafeTensors, SafetensorsError};

/// Value of the `favlo.format` metadata key.
pub const FORMAT_TAG: &str = "mx-checkpoint-v1";
const FORMAT_KEY: &str = "favlo.format";
const MX_PREFIX: &str = "favlo.mx:";

/// Errors of MX checkpoint reading and writing.
#[derive(Debug, thiserror::Error)]
pub enum MxCheckpointError {
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error(
        "{path}: not a Favlo MX checkpoint (metadata `favlo.format` is missing or not {FORMAT_TAG})"
    )]
    NotMxCheckpoint { path: PathBuf },
    #[error("{path}: tensor '{name}': bad MX description {value:?}: {reason}")]
    BadDescription {
        path: PathBuf,
        name: String,
        value: String,
        reason: String,
    },
    #[error("tensor '{name}': {source}")]
    Mx {
        name: String,
        source: favlo_mx::MxError,
    },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: safetensors::SafeTensorError,
    },
    #[error("no tensor named '{name}' in {path}")]
    NotFound { path: PathBuf, name: String },
}

/// What to store a tensor as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreAs {
    /// Packed MX planes.
    Mx(ElementFormat, ScaleRule),
    /// 16-bit brain float.
    Bf16,
    /// 16-bit IEEE half.
    F16,
    /// Unchanged f32.
    F32,
}

impl StoreAs {
    /// Parses `mxfp8`, `mxfp4`, `mxfp8-e5m2`, `bf16`, `f16`, `f32` (MX with the
    /// predecessor's `ceil` scale rule; append `:ocp` for the spec's rule).
    pub fn parse(s: &str) -> Option<StoreAs> {
        let (name, rule) = match s.split_once(':') {
            Some((n, "ocp")) => (n, ScaleRule::Ocp),
            Some((n, "ceil")) => (n, ScaleRule::Ceil),
            Some(_) => return None,
            None => (s, ScaleRule::Ceil),
        };
        Some(match name.to_ascii_lowercase().as_str() {
            "mxfp8" | "mxfp8-e4m3" => StoreAs::Mx(ElementFormat::Fp8E4M3, rule),
            "mxfp8-e5m2" => StoreAs::Mx(ElementFormat::Fp8E5M2, rule),
            "mxfp4" => StoreAs::Mx(ElementFormat::Fp4E2M1, rule),
            "bf16" => StoreAs::Bf16,
            "f16" => StoreAs::F16,
            "f32" => StoreAs::F32,
            _ => return None,
        })
    }

    /// The short name used in tables and metadata.
    pub fn name(&self) -> &'static str {
        match self {
            StoreAs::Mx(f, _) => format_name(*f),
            StoreAs::Bf16 => "bf16",
            StoreAs::F16 => "f16",
            StoreAs::F32 => "f32",
        }
    }
}

fn format_name(f: ElementFormat) -> &'static str {
    match f {
        ElementFormat::Fp4E2M1 => "mxfp4",
        ElementFormat::Fp8E4M3 => "mxfp8",
        ElementFormat::Fp8E5M2 => "mxfp8-e5m2",
    }
}

fn rule_name(r: ScaleRule) -> &'static str {
    match r {
        ScaleRule::Ceil => "ceil",
        ScaleRule::Ocp => "ocp",
    }
}

/// Is this tensor a linear layer's weight matrix (what gets packed)?
///
/// 2-D, named `*weight`, and not an embedding or a norm.
pub fn is_linear_matrix(name: &str, shape: &[usize]) -> bool {
    let lower = name.to_ascii_lowercase();
    shape.len() == 2
        && lower.ends_with("weight")
        && ![
            "embed",
            "norm",
            "wte",
            "wpe",
            "position",
            "token_type",
            "ln_",
        ]
        .iter()
        .any(|k| lower.contains(k))
}

/// One row of the quantize report.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorReport {
    pub name: String,
    pub shape: Vec<usize>,
    pub stored_as: &'static str,
    /// Relative Frobenius error of the stored values against the source, in f64.
    pub rel_error: f64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

struct Owned {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for &Owned {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn rel_error(src: &[f32], got: impl Iterator<Item = f32>) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in src.iter().zip(got) {
        let d = f64::from(*a) - f64::from(b);
        num += d * d;
        den += f64::from(*a) * f64::from(*a);
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Writes `input` as a Favlo MX checkpoint at `output` (a `.safetensors` file).
///
/// `choose(name, shape, source_dtype)` decides how each tensor is stored;
/// `on_tensor(done, total, report)` is called after each tensor (progress).
pub fn write(
    input: &SafeTensors,
    output: &Path,
    mut choose: impl FnMut(&str, &[usize], Dtype) -> StoreAs,
    mut on_tensor: impl FnMut(usize, usize, &TensorReport),
) -> Result<Vec<TensorReport>, MxCheckpointError> {
    let names: Vec<String> = input.names().into_iter().map(str::to_string).collect();
    let mut metadata = HashMap::from([(FORMAT_KEY.to_string(), FORMAT_TAG.to_string())]);
    let mut tensors: Vec<(String, Owned)> = Vec::with_capacity(names.len());
    let mut reports = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let info = input
            .info(name)
            .ok_or_else(|| MxCheckpointError::NotFound {
                path: output.to_path_buf(),
                name: name.clone(),
            })?;
        let bytes_in = input.tensor_bytes(name)?.len() as u64;
        let (values, shape) = input.tensor_f32(name)?;
        let store = choose(name, &shape, info.dtype);
        let (owned, err) = match store {
            StoreAs::Mx(format, rule) if shape.len() == 2 => {
                let layout = MxLayout {
                    format,
                    rows: shape[0],
                    cols: shape[1],
                };
                let mut data = vec![0u8; layout.total_bytes()];
                favlo_mx::pack(&values, layout, rule, &mut data).map_err(|source| {
                    MxCheckpointError::Mx {
                        name: name.clone(),
                        source,
                    }
                })?;
                let view = MxView::new(layout, &data).map_err(|source| MxCheckpointError::Mx {
                    name: name.clone(),
                    source,
                })?;
                let err = rel_error(&values, view.dequantize().into_iter());
                metadata.insert(
                    format!("{MX_PREFIX}{name}"),
                    format!(
                        "{} {} {} {}",
                        format_name(format),
                        shape[0],
                        shape[1],
                        rule_name(rule)
                    ),
                );
                (
                    Owned {
                        dtype: Dtype::U8,
                        shape: vec![data.len()],
                        data,
                    },
                    err,
                )
            }
            StoreAs::Bf16 | StoreAs::Mx(..) => {
                let h: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
                let err = rel_error(&values, h.iter().map(|v| v.to_f32()));
                let data = h.iter().flat_map(|v| v.to_le_bytes()).collect();
                (
                    Owned {
                        dtype: Dtype::BF16,
                        shape: shape.clone(),
                        data,
                    },
                    err,
                )
            }
            StoreAs::F16 => {
                let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
                let err = rel_error(&values, h.iter().map(|v| v.to_f32()));
                let data = h.iter().flat_map(|v| v.to_le_bytes()).collect();
                (
                    Owned {
                        dtype: Dtype::F16,
                        shape: shape.clone(),
                        data,
                    },
                    err,
                )
            }
            StoreAs::F32 => {
                let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                (
                    Owned {
                        dtype: Dtype::F32,
                        shape: shape.clone(),
                        data,
                    },
                    0.0,
                )
            }
        };
        let stored_as = match (store, owned.dtype) {
            (StoreAs::Mx(f, _), Dtype::U8) => format_name(f),
            (_, Dtype::BF16) => "bf16",
            (_, Dtype::F16) => "f16",
            _ => "f32",
        };
        let report = TensorReport {
            name: name.clone(),
            shape,
            stored_as,
            rel_error: err,
            bytes_in,
            bytes_out: owned.data.len() as u64,
        };
        on_tensor(i + 1, names.len(), &report);
        reports.push(report);
        tensors.push((name.clone(), owned));
    }
    let views = tensors.iter().map(|(n, t)| (n.as_str(), t));
    safetensors::serialize_to_file(views, Some(metadata), output).map_err(|source| {
        MxCheckpointError::Write {
            path: output.to_path_buf(),
            source,
        }
    })?;
    Ok(reports)
}

/// A tensor read back from an MX checkpoint.
pub enum CheckpointTensor<'a> {
    /// Packed planes, viewed in place.
    Packed(MxView<'a>),
    /// Everything else, converted to f32 (row-major, with its shape).
    Dense(Vec<f32>, Vec<usize>),
}

/// A Favlo MX checkpoint opened for reading.
pub struct MxCheckpoint {
    file: SafeTensors,
    origin: PathBuf,
    packed: HashMap<String, MxLayout>,
}

impl MxCheckpoint {
    /// Opens and validates a checkpoint: every packed tensor's description must
    /// parse and its byte length must equal its layout's.
    pub fn open(path: &Path) -> Result<MxCheckpoint, MxCheckpointError> {
        let file = SafeTensors::open(path)?;
        Self::from_safetensors(file, path)
    }

    /// Wraps an already opened container.
    pub fn from_safetensors(
        file: SafeTensors,
        path: &Path,
    ) -> Result<MxCheckpoint, MxCheckpointError> {
        let meta: HashMap<String, String> = file
            .file_metadata()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if meta.get(FORMAT_KEY).map(String::as_str) != Some(FORMAT_TAG) {
            return Err(MxCheckpointError::NotMxCheckpoint {
                path: path.to_path_buf(),
            });
        }
        let mut packed = HashMap::new();
        for (key, value) in &meta {
            let Some(name) = key.strip_prefix(MX_PREFIX) else {
                continue;
            };
            let bad = |reason: &str| MxCheckpointError::BadDescription {
                path: path.to_path_buf(),
                name: name.to_string(),
                value: value.clone(),
                reason: reason.to_string(),
            };
            let parts: Vec<&str> = value.split_whitespace().collect();
            let [fmt, rows, cols, _rule] = parts[..] else {
                return Err(bad("expected \"<format> <rows> <cols> <rule>\""));
            };
            let format = match StoreAs::parse(fmt) {
                Some(StoreAs::Mx(f, _)) => f,
                _ => return Err(bad("unknown MX format")),
            };
            let rows: usize = rows.parse().map_err(|_| bad("rows is not a number"))?;
            let cols: usize = cols.parse().map_err(|_| bad("cols is not a number"))?;
            let layout = MxLayout { format, rows, cols };
            let info = file.info(name).ok_or_else(|| bad("no such tensor"))?;
            let want = layout
                .checked_total_bytes()
                .ok_or_else(|| bad("layout too large"))?;
            if info.dtype != Dtype::U8 || info.shape != [want] {
                return Err(bad(&format!(
                    "stored as {:?} {:?}, layout needs U8 [{want}]",
                    info.dtype, info.shape
                )));
            }
            packed.insert(name.to_string(), layout);
        }
        Ok(MxCheckpoint {
            file,
            origin: path.to_path_buf(),
            packed,
        })
    }

    /// Tensor names.
    pub fn names(&self) -> Vec<&str> {
        self.file.names()
    }

    /// The MX layout of a packed tensor, if it is one.
    pub fn layout(&self, name: &str) -> Option<MxLayout> {
        self.packed.get(name).copied()
    }

    /// Reads one tensor.
    pub fn tensor(&self, name: &str) -> Result<CheckpointTensor<'_>, MxCheckpointError> {
        match self.packed.get(name) {
            Some(layout) => {
                let bytes = self.file.tensor_bytes(name)?;
                let view = MxView::new(*layout, bytes).map_err(|source| MxCheckpointError::Mx {
                    name: name.to_string(),
                    source,
                })?;
                Ok(CheckpointTensor::Packed(view))
            }
            None => {
                if self.file.info(name).is_none() {
                    return Err(MxCheckpointError::NotFound {
                        path: self.origin.clone(),
                        name: name.to_string(),
                    });
                }
                let (v, s) = self.file.tensor_f32(name)?;
                Ok(CheckpointTensor::Dense(v, s))
            }
        }
    }
}
