//! Rotary position embedding with the model's theta and (optional) frequency scaling.
//!
//! Key design choice: plain RoPE uses the runtime's [`Rope`] kernel; scaled
//! variants (linear, Llama 3, GGUF `rope_freqs` factors) change only the inverse
//! frequencies, so they run through a small local loop over precomputed
//! frequencies (the runtime kernel takes only theta). RoPE is a negligible share
//! of the forward time, so the local loop is scalar.

use favlo_runtime::cpu::{Rope, RopeLayout};

use crate::config::{LlamaConfig, RopeScaling};

/// RoPE for one model.
pub(crate) enum Rotary {
    Kernel(Rope),
    Scaled {
        inv_freq: Vec<f32>,
        layout: RopeLayout,
        head_dim: usize,
    },
}

impl Rotary {
    pub(crate) fn new(cfg: &LlamaConfig) -> Rotary {
        let half = cfg.rope_dim / 2;
        let base: Vec<f32> = (0..half)
            .map(|i| {
                1.0 / (cfg.rope_theta as f64).powf(2.0 * i as f64 / cfg.rope_dim as f64) as f32
            })
            .collect();
        let inv_freq = match &cfg.rope_scaling {
            RopeScaling::None => {
                return Rotary::Kernel(Rope::new(
                    cfg.head_dim,
                    cfg.rope_dim,
                    cfg.rope_theta,
                    cfg.rope_layout,
                ));
            }
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::FreqFactors(ff) => base.iter().zip(ff).map(|(f, d)| f / d).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let low_wavelen = original_max_position / low_freq_factor;
                let high_wavelen = original_max_position / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_position / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        };
        Rotary::Scaled {
            inv_freq,
            layout: cfg.rope_layout,
            head_dim: cfg.head_dim,
        }
    }

    /// Rotate `x: [t, n_heads, head_dim]` in place; token `i` sits at `positions[i]`.
    pub(crate) fn apply(&self, x: &mut [f32], positions: &[usize], n_heads: usize) {
        match self {
            Rotary::Kernel(rope) => rope.apply(x, positions, n_heads),
            Rotary::Scaled {
                inv_freq,
                layout,
                head_dim,
            } => {
                let half = inv_freq.len();
                for (ti, &pos) in positions.iter().enumerate() {
                    let cs: Vec<(f32, f32)> = inv_freq
                        .iter()
                        .map(|&f| {
                            let a = pos as f32 * f;
                            (a.cos(), a.sin())
                        })
                        .collect();
                    for h in 0..n_heads {
                        let start = (ti * n_heads + h) * head_dim;
                        let head = &mut x[start..start + head_dim];
                        for (i, &(c, s)) in cs.iter().enumerate() {
                            let (ia, ib) = match layout {
                                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                                RopeLayout::NeoX => (i, i + half),
                            };
                            let (a, b) = (head[ia], head[ib]);
                            head[ia] = a * c - b * s;
                            head[ib] = a * s + b * c;
                        }
                    }
                }
            }
        }
    }
}
