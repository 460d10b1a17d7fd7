//! Seeded latent noise and the latent walk, specified exactly so that the
//! PyTorch fixture (`tools/fixtures/dcgan_fixture.py`) reproduces them bit for bit.
//!
//! Key design choice: a tiny self-owned generator instead of a crate, because the
//! stream is part of the output's definition (same seed → same bytes, forever):
//!
//! 1. State: xoshiro256** whose four words are the first four outputs of
//!    splitmix64 started at `seed`.
//! 2. Uniform: `(next() >> 11) · 2⁻⁵³`, in [0, 1).
//! 3. Normals: Box-Muller in f64 over pairs `u1 = 1 - uniform()` (in (0, 1], so
//!    `ln` is finite), `u2 = uniform()`: `r = sqrt(-2 ln u1)`, `θ = 2π u2`,
//!    emitting `r·cos θ` then `r·sin θ`.
//! 4. Latents: image `i` of a request takes normals `[100 i, 100 i + 100)` of the
//!    stream, cast to f32. A video's keyframe `j` takes the same slice for `j`.
//! 5. Walk: one keyframe per second; frame `f` at `fps` lies in segment
//!    `s = f / fps` at `t = (f mod fps) / fps` and is
//!    `slerp(key[s], key[s + 1], t)` computed in f64 (sums in index order), then
//!    cast to f32.

/// splitmix64 step (Steele, Lea, Flood), used only to seed xoshiro.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman, Vigna).
#[derive(Clone, Debug)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// Seeded through splitmix64.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Xoshiro256 { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
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

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The first `count` standard normals (f64) of the stream seeded with `seed`.
pub fn normals(seed: u64, count: usize) -> Vec<f64> {
    let mut rng = Xoshiro256::new(seed);
    let mut out = Vec::with_capacity(count + 1);
    while out.len() < count {
        let u1 = 1.0 - rng.uniform();
        let u2 = rng.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        out.push(r * theta.cos());
        out.push(r * theta.sin());
    }
    out.truncate(count);
    out
}

/// `n` latents of `dim` values (f32, image-major) for an image request.
pub fn latents(seed: u64, n: usize, dim: usize) -> Vec<f32> {
    normals(seed, n * dim)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// Spherical interpolation between `a` and `b` at `t` in f64; falls back to a
/// straight line when the vectors are (anti)parallel (`sin ω < 1e-9`).
pub fn slerp(a: &[f64], b: &[f64], t: f64) -> Vec<f64> {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    let cos = (dot / (na * nb)).clamp(-1.0, 1.0);
    let omega = cos.acos();
    let so = omega.sin();
    if so.is_nan() || so.abs() < 1e-9 {
        return a
            .iter()
            .zip(b)
            .map(|(x, y)| (1.0 - t) * x + t * y)
            .collect();
    }
    let (wa, wb) = (((1.0 - t) * omega).sin() / so, (t * omega).sin() / so);
    a.iter().zip(b).map(|(x, y)| wa * x + wb * y).collect()
}

/// A seeded latent walk: `keyframes` vectors of `dim` normals, one per second.
#[derive(Clone, Debug)]
pub struct LatentWalk {
    keys: Vec<f64>,
    dim: usize,
    fps: usize,
}

impl LatentWalk {
    /// Keyframes for a clip of `seconds` at `fps` (`seconds + 1` keyframes).
    pub fn new(seed: u64, seconds: usize, fps: usize, dim: usize) -> Self {
        LatentWalk {
            keys: normals(seed, (seconds + 1) * dim),
            dim,
            fps: fps.max(1),
        }
    }

    /// The f32 latent of frame `f`.
    pub fn frame(&self, f: usize) -> Vec<f32> {
        let seg = f / self.fps;
        let t = (f % self.fps) as f64 / self.fps as f64;
        let key = |j: usize| {
            self.keys
                .get(j * self.dim..(j + 1) * self.dim)
                .unwrap_or(&[])
        };
        let (a, b) = (key(seg), key(seg + 1));
        if a.len() != self.dim || b.len() != self.dim {
            return vec![0.0; self.dim];
        }
        slerp(a, b, t).into_iter().map(|v| v as f32).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_and_xoshiro_known_values() {
        // splitmix64 from state 0: first output is the published 0xE220A8397B1DCDAF.
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        // Different seeds give different streams; the same seed the same one.
        let (mut a, mut b) = (Xoshiro256::new(1), Xoshiro256::new(1));
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(Xoshiro256::new(2).next_u64(), Xoshiro256::new(1).next_u64());
    }

    #[test]
    fn normals_have_unit_moments() {
        let v = normals(42, 100_000);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
        assert_eq!(normals(42, 7), v[..7].to_vec());
    }

    #[test]
    fn slerp_endpoints_and_norm() {
        let k = normals(5, 200);
        let (a, b) = (&k[..100], &k[100..]);
        let close = |x: &[f64], y: &[f64]| x.iter().zip(y).all(|(p, q)| (p - q).abs() < 1e-12);
        assert!(close(&slerp(a, b, 0.0), a));
        assert!(close(&slerp(a, b, 1.0), b));
        // Midpoint of two (nearly) equal-norm vectors keeps roughly their norm.
        let m = slerp(a, b, 0.5);
        let n = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((n(&m) - 0.5 * (n(a) + n(b))).abs() < 0.05 * n(a));
        let w = LatentWalk::new(5, 1, 8, 100);
        let f0: Vec<f32> = a.iter().map(|v| *v as f32).collect();
        assert_eq!(w.frame(0), f0);
    }
}
