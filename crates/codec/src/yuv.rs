//! RGB to planar YUV 4:2:0 (I420), BT.601 limited range, padded to even sizes.
//!
//! Key design choice: convert here rather than with the encoder crate's helper
//! so the matrix and range are exactly the ones the SPS's VUI declares (BT.601,
//! limited range: what decoders assume for untagged SD video too), and so odd
//! sizes are padded by repeating the last column/row before 2x2 chroma
//! averaging instead of being rejected. Pictures smaller than 16 in either
//! direction (OpenH264's minimum) are padded up to 16 the same way; the SPS
//! cropping then hides the padding.

/// An I420 picture: Y at full size, U and V at half size in each direction.
#[derive(Debug, Clone)]
pub struct I420 {
    /// Padded (even) width.
    pub width: usize,
    /// Padded (even) height.
    pub height: usize,
    /// Luma, `width * height`.
    pub y: Vec<u8>,
    /// Cb, `width/2 * height/2`.
    pub u: Vec<u8>,
    /// Cr, `width/2 * height/2`.
    pub v: Vec<u8>,
}

fn clamp_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// The size a `width x height` picture is encoded at: even, at least 16.
pub fn padded_size(width: usize, height: usize) -> (usize, usize) {
    (
        (width + (width & 1)).max(16),
        (height + (height & 1)).max(16),
    )
}

/// Converts packed RGB8 of `width x height` (both > 0) to I420 at
/// [`padded_size`], repeating the last column and row into the padding.
pub fn rgb_to_i420(rgb: &[u8], width: usize, height: usize) -> I420 {
    let (pw, ph) = padded_size(width, height);
    let px = |x: usize, y: usize| -> [f32; 3] {
        let i = 3 * (y.min(height - 1) * width + x.min(width - 1));
        match rgb.get(i..i + 3) {
            Some(p) => [f32::from(p[0]), f32::from(p[1]), f32::from(p[2])],
            None => [0.0; 3],
        }
    };
    let mut y_plane = Vec::with_capacity(pw * ph);
    for y in 0..ph {
        for x in 0..pw {
            let [r, g, b] = px(x, y);
            y_plane.push(clamp_u8(
                16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0,
            ));
        }
    }
    let (cw, ch) = (pw / 2, ph / 2);
    let mut u = Vec::with_capacity(cw * ch);
    let mut v = Vec::with_capacity(cw * ch);
    for cy in 0..ch {
        for cx in 0..cw {
            let mut s = [0.0f32; 3];
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let p = px(2 * cx + dx, 2 * cy + dy);
                for c in 0..3 {
                    s[c] += p[c] / 4.0;
                }
            }
            let [r, g, b] = s;
            u.push(clamp_u8(
                128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0,
            ));
            v.push(clamp_u8(
                128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0,
            ));
        }
    }
    I420 {
        width: pw,
        height: ph,
        y: y_plane,
        u,
        v,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Reference values from the BT.601 limited-range definition, computed by
    /// hand: white (235,128,128), black (16,128,128), pure red (81,90,240).
    #[test]
    fn known_colours_and_padding() {
        let rgb = [255u8, 255, 255, 0, 0, 0, 255, 0, 0];
        let p = rgb_to_i420(&rgb, 3, 1);
        assert_eq!((p.width, p.height), (16, 16));
        assert_eq!(&p.y[..4], &[235, 16, 81, 81]);
        assert!(p.y[4..16].iter().all(|&y| y == 81));
        assert!(p.y.chunks(16).all(|row| row == &p.y[..16]));
        // Second chroma sample covers the red pixel and its padded copy.
        assert_eq!((p.u[1], p.v[1]), (90, 240));
        // First averages white and black: mid grey, neutral chroma.
        assert_eq!((p.u[0], p.v[0]), (128, 128));
    }
}
