//! Rotary position embedding with the model's theta and (optional) frequency scaling.
//!
//! Key design choice: plain RoPE uses the runtime's [`Rope`] kernel; scaled
//! variants (linear, Llama 3, GGUF `rope_freqs` factors) change only the inverse
//! frequencies, so they run through a small local loop over precomputed
//! frequencies (the runtime kernel takes only theta). RoPE is a negligible share
//! of the forward time, so the local loop is scalar.
//!
//! Native GGUF weights use [`GgmlRope`], ggml's CPU arithmetic bit for bit: angles by
//! repeated f32 multiplication `θ_{i+1} = θ_i · powf(base, −2/n_dims)` from `θ_0 = pos`
//! (divided by the GGUF frequency factor, times the linear scale), libm `cosf`/`sinf`,
//! and the rotation as GCC contracts it for llama.cpp's FMA build:
//! `y0 = fma(x0, cos, −(x1·sin))`, `y1 = fma(x0, sin, x1·cos)` (verified bitwise
//! against llama.cpp's dumped `Qcur`/`Kcur` nodes with `tools/fixtures/llama_cpp_dump.py`).

use favlo_runtime::cpu::{Rope, RopeLayout};

use crate::config::{LlamaConfig, RopeScaling};

/// ggml's `rope_f32` for one model (native GGUF numerics).
pub(crate) struct GgmlRope {
    theta_scale: f32,
    freq_scale: f32,
    factors: Option<Vec<f32>>,
    layout: RopeLayout,
    head_dim: usize,
    rope_dim: usize,
}

impl GgmlRope {
    /// `None` for scalings ggml does not express as frequency factors/linear scale here.
    pub(crate) fn new(cfg: &LlamaConfig) -> Option<GgmlRope> {
        let (freq_scale, factors) = match &cfg.rope_scaling {
            RopeScaling::None => (1.0, None),
            RopeScaling::Linear { factor } => (1.0 / factor, None),
            RopeScaling::FreqFactors(ff) => (1.0, Some(ff.clone())),
            RopeScaling::Llama3 { .. } => return None,
        };
        Some(GgmlRope {
            theta_scale: cfg.rope_theta.powf(-2.0 / cfg.rope_dim as f32),
            freq_scale,
            factors,
            layout: cfg.rope_layout,
            head_dim: cfg.head_dim,
            rope_dim: cfg.rope_dim,
        })
    }

    /// The (cos, sin) table for `positions`: `[t, rope_dim/2]`, as ggml's rope cache.
    pub(crate) fn table(&self, positions: &[usize], out: &mut Vec<(f32, f32)>) {
        out.clear();
        for &p in positions {
            let mut theta = p as f32;
            for i in 0..self.rope_dim / 2 {
                let ff = self.factors.as_ref().map_or(1.0, |f| f[i]);
                let a = self.freq_scale * (theta / ff);
                out.push((a.cos(), a.sin()));
                theta *= self.theta_scale;
            }
        }
    }

    /// Rotate `x: [t, n_heads, head_dim]` with a [`GgmlRope::table`] for its `t` positions.
    pub(crate) fn apply(&self, x: &mut [f32], table: &[(f32, f32)], n_heads: usize) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("fma") {
            // SAFETY: FMA was detected at run time.
            unsafe { self.apply_fma(x, table, n_heads) };
            return;
        }
        self.apply_body(x, table, n_heads);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    fn apply_fma(&self, x: &mut [f32], table: &[(f32, f32)], n_heads: usize) {
        self.apply_body(x, table, n_heads);
    }

    #[inline(always)]
    fn apply_body(&self, x: &mut [f32], table: &[(f32, f32)], n_heads: usize) {
        let half = self.rope_dim / 2;
        if half == 0 {
            return;
        }
        for (row, cs) in x
            .chunks_exact_mut(n_heads * self.head_dim)
            .zip(table.chunks_exact(half))
        {
            for head in row.chunks_exact_mut(self.head_dim) {
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (ia, ib) = match self.layout {
                        RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                        RopeLayout::NeoX => (i, i + half),
                    };
                    let (a, b) = (head[ia], head[ib]);
                    head[ia] = a.mul_add(c, -(b * s));
                    head[ib] = a.mul_add(s, b * c);
                }
            }
        }
    }
}

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

    /// The inverse frequency of each rotated pair (`rope_dim / 2` values) in f64, for
    /// (cos, sin) tables built outside this type (the CUDA path).
    #[cfg(feature = "cuda")]
    pub(crate) fn inv_freq_f64(&self) -> Vec<f64> {
        match self {
            Rotary::Kernel(rope) => rope.inv_freq().to_vec(),
            Rotary::Scaled { inv_freq, .. } => inv_freq.iter().map(|&f| f as f64).collect(),
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

#[cfg(test)]
mod tests {
    use super::{GgmlRope, RopeLayout};

    /// ggml's f32 RoPE against an f64 rotation with exact angles `pos · base^(−2i/n)`:
    /// the iterated f32 angle drifts by ≲ n/2 · 2^−24 relative, so ≤ 2e-4 · max|x| up to
    /// position 40 (a wrong pair layout or sign would be O(max|x|)).
    #[test]
    fn ggml_rope_close_to_f64_rotation() {
        let (hd, heads, base) = (16usize, 3usize, 10_000f32);
        for layout in [RopeLayout::Interleaved, RopeLayout::NeoX] {
            let r = GgmlRope {
                theta_scale: base.powf(-2.0 / hd as f32),
                freq_scale: 1.0,
                factors: None,
                layout,
                head_dim: hd,
                rope_dim: hd,
            };
            let positions: Vec<usize> = (0..41).step_by(5).collect();
            let n = positions.len() * heads * hd;
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) + 0.01)
                .collect();
            let mut y = x.clone();
            let mut table = Vec::new();
            r.table(&positions, &mut table);
            r.apply(&mut y, &table, heads);
            let half = hd / 2;
            for (t, &p) in positions.iter().enumerate() {
                for h in 0..heads {
                    let o = (t * heads + h) * hd;
                    for i in 0..half {
                        let (ia, ib) = match layout {
                            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                            RopeLayout::NeoX => (i, i + half),
                        };
                        let th = p as f64 * f64::from(base).powf(-2.0 * i as f64 / hd as f64);
                        let (a, b) = (f64::from(x[o + ia]), f64::from(x[o + ib]));
                        let want = [a * th.cos() - b * th.sin(), a * th.sin() + b * th.cos()];
                        for (got, w) in [y[o + ia], y[o + ib]].iter().zip(want) {
                            assert!(
                                (f64::from(*got) - w).abs() <= 2e-4,
                                "{layout:?} pos {p} pair {i}: {got} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
