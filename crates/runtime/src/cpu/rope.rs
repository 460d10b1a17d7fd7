//! Rotary position embedding (RoPE), interleaved (GGML "normal") or NeoX (HF) pairing,
//! with partial rotary (`rot_dim` ≤ `head_dim`).
//!
//! Key design choice: inverse frequencies are precomputed in f64; the angle
//! `position · inv_freq` and its sin/cos are computed in f64 once per token and shared
//! by all heads, so large positions do not lose precision.

/// How the rotated pairs are laid out inside a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs (2i, 2i+1) (GGML "normal").
    Interleaved,
    /// Pairs (i, i + rot_dim/2) (HF Llama/Qwen, GGML "neox").
    NeoX,
}

/// Precomputed RoPE parameters for one head geometry.
#[derive(Clone, Debug)]
pub struct Rope {
    head_dim: usize,
    rot_dim: usize,
    layout: RopeLayout,
    inv_freq: Vec<f64>,
}

impl Rope {
    /// `rot_dim` is clamped to `head_dim` and rounded down to even.
    pub fn new(head_dim: usize, rot_dim: usize, theta: f32, layout: RopeLayout) -> Rope {
        let rot_dim = rot_dim.min(head_dim) & !1;
        let inv_freq = (0..rot_dim / 2)
            .map(|i| (theta as f64).powf(-((2 * i) as f64) / rot_dim as f64))
            .collect();
        Rope {
            head_dim,
            rot_dim,
            layout,
            inv_freq,
        }
    }

    /// The inverse frequencies (one per rotated pair).
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// Rotate `x` ([t, n_heads, head_dim]) in place; `positions.len() == t`.
    pub fn apply(&self, x: &mut [f32], positions: &[usize], n_heads: usize) {
        let hd = self.head_dim;
        let half = self.rot_dim / 2;
        if hd == 0 || half == 0 {
            return;
        }
        let tok = n_heads * hd;
        debug_assert_eq!(
            x.len(),
            positions.len() * tok,
            "rope: x.len() != t*n_heads*head_dim"
        );
        let mut cs = vec![(0f32, 0f32); half];
        for (row, &p) in x.chunks_exact_mut(tok).zip(positions) {
            for (c, f) in cs.iter_mut().zip(&self.inv_freq) {
                let (s, co) = (p as f64 * f).sin_cos();
                *c = (co as f32, s as f32);
            }
            for head in row.chunks_exact_mut(hd) {
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (a, b) = match self.layout {
                        RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                        RopeLayout::NeoX => (i, i + half),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        }
    }
}
