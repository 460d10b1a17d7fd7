//! [`WeightRef`]: a borrowed weight matrix in one of the storage types the kernels read.
//!
//! Key design choice: the matrix stays in its storage type; kernels convert on the fly.

use favlo_mx::MxView;
use half::{bf16, f16};

/// A borrowed `[n, k]` row-major weight matrix (PyTorch `nn.Linear` layout: one row per output).
#[derive(Clone, Copy)]
pub enum WeightRef<'a> {
    /// Plain f32 rows.
    F32 { data: &'a [f32], n: usize, k: usize },
    /// bfloat16 rows.
    Bf16 {
        data: &'a [bf16],
        n: usize,
        k: usize,
    },
    /// IEEE half rows.
    F16 { data: &'a [f16], n: usize, k: usize },
    /// MX packed rows (`n = layout.rows`, `k = layout.cols`).
    Mx(MxView<'a>),
}

impl WeightRef<'_> {
    /// Number of rows (outputs).
    pub fn n(&self) -> usize {
        match self {
            WeightRef::F32 { n, .. } | WeightRef::Bf16 { n, .. } | WeightRef::F16 { n, .. } => *n,
            WeightRef::Mx(v) => v.layout.rows,
        }
    }

    /// Number of columns (inputs).
    pub fn k(&self) -> usize {
        match self {
            WeightRef::F32 { k, .. } | WeightRef::Bf16 { k, .. } | WeightRef::F16 { k, .. } => *k,
            WeightRef::Mx(v) => v.layout.cols,
        }
    }

    /// Whether the backing storage is large enough for `n * k` elements.
    pub fn is_consistent(&self) -> bool {
        match self {
            WeightRef::F32 { data, n, k } => data.len() >= n * k,
            WeightRef::Bf16 { data, n, k } => data.len() >= n * k,
            WeightRef::F16 { data, n, k } => data.len() >= n * k,
            WeightRef::Mx(v) => v.bytes.len() >= v.layout.total_bytes(),
        }
    }

    /// Dequantize/convert row `r` into `out` (`out.len() == k`).
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        let k = self.k();
        match self {
            WeightRef::F32 { data, .. } => out.copy_from_slice(&data[r * k..(r + 1) * k]),
            WeightRef::Bf16 { data, .. } => {
                crate::cpu::simd::bf16_to_f32(&data[r * k..(r + 1) * k], out)
            }
            WeightRef::F16 { data, .. } => {
                crate::cpu::simd::f16_to_f32(&data[r * k..(r + 1) * k], out)
            }
            WeightRef::Mx(v) => crate::cpu::linear::mx_row_to_f32(v, r, out),
        }
    }
}
