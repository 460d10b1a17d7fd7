//! Seeded Gaussian noise for synthesis, specified exactly so a job's output is
//! a function of its seed (and survives preemption byte for byte).
//!
//! Key design choice: a small self-owned generator, because the stream is part
//! of the output's definition:
//! 1. Sentence `s` of a job with seed `S` uses the stream seeded with
//!    `splitmix64(S ⊕ (s · 0x9E3779B97F4A7C15))`.
//! 2. Stream: xoshiro256** whose state is four splitmix64 outputs of that seed;
//!    uniforms `(next >> 11) · 2⁻⁵³`; Box-Muller pairs `u1 = 1 − uniform`,
//!    `u2 = uniform` → `r·cos θ`, `r·sin θ` with `r = √(−2 ln u1)`, `θ = 2π u2`.
//! 3. The duration predictor takes the first `2·T` normals (`[2, T]`, row-major),
//!    the prior the next `C·F` (`[C, F]`), each cast to f32.

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stream of standard normals.
#[derive(Clone, Debug)]
pub struct Normals {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Normals {
    /// The stream of sentence `sentence` of a job seeded with `seed`.
    pub fn for_sentence(seed: u64, sentence: usize) -> Self {
        let mut m = seed ^ (sentence as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Self::new(splitmix64(&mut m))
    }

    /// The stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Normals { s, spare: None }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The next normal.
    pub fn next_normal(&mut self) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }

    /// `n` normals as f32.
    pub fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next_normal() as f32).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_standard_normal_and_reproducible() {
        let v = Normals::new(42).take(100_000);
        let n = v.len() as f64;
        let mean = v.iter().map(|x| *x as f64).sum::<f64>() / n;
        let var = v.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert_eq!(Normals::new(42).take(7), v[..7].to_vec());
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_ne!(
            Normals::for_sentence(1, 0).take(4),
            Normals::for_sentence(1, 1).take(4)
        );
    }
}
