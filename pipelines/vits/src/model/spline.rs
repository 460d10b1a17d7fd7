//! The inverse of the monotonic rational-quadratic spline with linear tails
//! (Durkan et al., "Neural Spline Flows"), as VITS's `ConvFlow` uses it in the
//! stochastic duration predictor.
//!
//! Key design choice: one scalar function per element, written in f32 in the
//! same operation order as the reference (softmax → min-width mix → cumulative
//! sum → scale, `searchsorted` with the +1e-6 nudge on the last knot, then the
//! quadratic's stable root), so the result tracks the ONNX graph to rounding.

/// Minimum bin width, height and knot derivative of VITS's transform.
pub const MIN_BIN: f32 = 1e-3;
/// See [`MIN_BIN`].
pub const MIN_DERIVATIVE: f32 = 1e-3;

fn softmax(v: &[f32], out: &mut [f32]) {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for (o, x) in out.iter_mut().zip(v) {
        *o = (x - max).exp();
        sum += *o;
    }
    out.iter_mut().for_each(|o| *o /= sum);
}

/// Knot positions `[bins + 1]` on `[-bound, bound]` from unnormalized sizes.
fn knots(unnorm: &[f32], bound: f32, knots: &mut [f32]) {
    let bins = unnorm.len();
    let mut w = [0f32; 64];
    let w = &mut w[..bins];
    softmax(unnorm, w);
    let mut acc = 0f32;
    knots[0] = -bound;
    for i in 0..bins {
        acc += MIN_BIN + (1.0 - MIN_BIN * bins as f32) * w[i];
        knots[i + 1] = 2.0 * bound * acc - bound;
    }
    knots[bins] = bound;
}

fn softplus(x: f32) -> f32 {
    // log(1 + e^x), stable for large |x|.
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Inverse spline of `y` with `bins` widths, `bins` heights and `bins − 1`
/// interior derivatives (unnormalized), tails linear outside `[-bound, bound]`.
/// `bins` is at most 63.
pub fn inverse(y: f32, widths: &[f32], heights: &[f32], derivs: &[f32], bound: f32) -> f32 {
    let bins = widths.len();
    if !(-bound..=bound).contains(&y)
        || bins == 0
        || bins >= 64
        || heights.len() != bins
        || derivs.len() + 1 != bins
    {
        return y;
    }
    let mut cw = [0f32; 65];
    let mut ch = [0f32; 65];
    knots(widths, bound, &mut cw[..=bins]);
    knots(heights, bound, &mut ch[..=bins]);
    // Boundary derivatives are 1: softplus(constant) + min = 1.
    let edge = ((1.0 - MIN_DERIVATIVE).exp() - 1.0).ln();
    let d = |i: usize| -> f32 {
        let u = if i == 0 || i == bins {
            edge
        } else {
            derivs[i - 1]
        };
        MIN_DERIVATIVE + softplus(u)
    };
    // searchsorted: count knots ≤ y, the last one nudged up by 1e-6.
    let mut idx = 0usize;
    for (i, k) in ch[..=bins].iter().enumerate() {
        let k = if i == bins { k + 1e-6 } else { *k };
        if y >= k {
            idx = i;
        }
    }
    let idx = idx.min(bins - 1);
    let (x0, w) = (cw[idx], cw[idx + 1] - cw[idx]);
    let (y0, h) = (ch[idx], ch[idx + 1] - ch[idx]);
    let delta = h / w;
    let (d0, d1) = (d(idx), d(idx + 1));
    let dy = y - y0;
    let s = d0 + d1 - 2.0 * delta;
    let a = dy * s + h * (delta - d0);
    let b = h * d0 - dy * s;
    let c = -delta * dy;
    let disc = (b * b - 4.0 * a * c).max(0.0);
    let root = (2.0 * c) / (-b - disc.sqrt());
    root * w + x0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The forward spline in f64 (the textbook formula), to check the inverse.
    fn forward64(x: f64, widths: &[f32], heights: &[f32], derivs: &[f32], bound: f64) -> f64 {
        let bins = widths.len();
        let knots64 = |u: &[f32]| {
            let m = u.iter().fold(f64::NEG_INFINITY, |a, b| a.max(*b as f64));
            let e: Vec<f64> = u.iter().map(|v| (*v as f64 - m).exp()).collect();
            let z: f64 = e.iter().sum();
            let mut k = vec![-bound];
            let mut acc = 0.0;
            for v in &e {
                acc += 1e-3 + (1.0 - 1e-3 * bins as f64) * v / z;
                k.push(2.0 * bound * acc - bound);
            }
            k[bins] = bound;
            k
        };
        let (cw, ch) = (knots64(widths), knots64(heights));
        let sp = |u: f64| (1.0 + u.exp()).ln();
        let edge = ((1.0f64 - 1e-3).exp() - 1.0).ln();
        let d = |i: usize| {
            1e-3 + sp(if i == 0 || i == bins {
                edge
            } else {
                derivs[i - 1] as f64
            })
        };
        let i = (0..bins).rev().find(|&i| x >= cw[i]).unwrap_or(0);
        let (w, h) = (cw[i + 1] - cw[i], ch[i + 1] - ch[i]);
        let delta = h / w;
        let th = (x - cw[i]) / w;
        let num = h * (delta * th * th + d(i) * th * (1.0 - th));
        let den = delta + (d(i + 1) + d(i) - 2.0 * delta) * th * (1.0 - th);
        ch[i] + num / den
    }

    #[test]
    fn inverse_undoes_forward() {
        let mut s = 0x1234_5678u32;
        let mut r = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 4.0 - 2.0
        };
        for _ in 0..200 {
            let w: Vec<f32> = (0..10).map(|_| r()).collect();
            let h: Vec<f32> = (0..10).map(|_| r()).collect();
            let d: Vec<f32> = (0..9).map(|_| r()).collect();
            let x = r() * 2.4;
            let y = forward64(x as f64, &w, &h, &d, 5.0);
            let back = inverse(y as f32, &w, &h, &d, 5.0);
            // The inverse is ill-conditioned where the spline is flat, so x may
            // move by more in f32 there; its image under the f64 forward not.
            let again = forward64(back as f64, &w, &h, &d, 5.0);
            // Stable in x (steep bins) or in y (flat bins).
            let ex = (back as f64 - x as f64).abs() / (1.0 + x.abs() as f64);
            let ey = (again - y).abs() / 5.0;
            assert!(ex.min(ey) <= 1e-5, "x {x} y {y} back {back} -> {again}");
        }
        // Linear tails.
        assert_eq!(inverse(7.5, &[0.0; 10], &[0.0; 10], &[0.0; 9], 5.0), 7.5);
    }
}
