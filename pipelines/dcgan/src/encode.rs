//! From generator floats to files: pixel quantization, the image grid, PNG and
//! JPEG through the `image` crate.
//!
//! Key design choice: quantization is one fixed formula,
//! `u8 = clamp(round((x + 1) · 127.5), 0, 255)` in f32 (round half away from
//! zero), applied to planar `[3, 64, 64]` floats and written as interleaved RGB;
//! the encoders are deterministic, so equal pixels give equal bytes.

use image::ExtendedColorType;
use image::ImageEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;

use crate::generator::{CHANNELS, IMAGE_LEN, SIDE};

/// JPEG quality of the video frames.
pub const JPEG_QUALITY: u8 = 90;
/// Pixels of black between and around the tiles of a multi-image grid.
pub const GRID_PAD: usize = 2;
/// Tiles per grid row.
pub const GRID_COLUMNS: usize = 4;

/// One value in [-1, 1] to a byte.
pub fn quantize(x: f32) -> u8 {
    ((x + 1.0) * 127.5).round().clamp(0.0, 255.0) as u8
}

/// One planar `[3, 64, 64]` float image to interleaved RGB bytes.
pub fn to_rgb(planar: &[f32]) -> Vec<u8> {
    let plane = SIDE * SIDE;
    let mut out = vec![0u8; IMAGE_LEN];
    if planar.len() < IMAGE_LEN {
        return out;
    }
    for (p, px) in out.chunks_exact_mut(CHANNELS).enumerate() {
        for (c, v) in px.iter_mut().enumerate() {
            *v = quantize(planar[c * plane + p]);
        }
    }
    out
}

/// Lays `tiles` (each 64×64 RGB) out as one image: a single tile as is, more as
/// a grid of up to [`GRID_COLUMNS`] per row with [`GRID_PAD`] black pixels
/// between and around them. Returns (width, height, pixels).
pub fn grid(tiles: &[Vec<u8>]) -> (usize, usize, Vec<u8>) {
    match tiles {
        [] => (0, 0, Vec::new()),
        [one] => (SIDE, SIDE, one.clone()),
        _ => {
            let cols = tiles.len().min(GRID_COLUMNS);
            let rows = tiles.len().div_ceil(GRID_COLUMNS);
            let (w, h) = (
                cols * (SIDE + GRID_PAD) + GRID_PAD,
                rows * (SIDE + GRID_PAD) + GRID_PAD,
            );
            let mut out = vec![0u8; w * h * CHANNELS];
            for (i, tile) in tiles.iter().enumerate() {
                let (x0, y0) = (
                    GRID_PAD + (i % cols) * (SIDE + GRID_PAD),
                    GRID_PAD + (i / cols) * (SIDE + GRID_PAD),
                );
                for (y, src) in tile.chunks_exact(SIDE * CHANNELS).enumerate() {
                    let at = ((y0 + y) * w + x0) * CHANNELS;
                    out[at..at + SIDE * CHANNELS].copy_from_slice(src);
                }
            }
            (w, h, out)
        }
    }
}

/// RGB bytes to a PNG file.
pub fn png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, image::ImageError> {
    let mut out = Vec::new();
    PngEncoder::new(&mut out).write_image(rgb, width, height, ExtendedColorType::Rgb8)?;
    Ok(out)
}

/// RGB bytes to a baseline JPEG at [`JPEG_QUALITY`].
pub fn jpeg(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, image::ImageError> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY).encode(
        rgb,
        width,
        height,
        ExtendedColorType::Rgb8,
    )?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn quantize_edges() {
        assert_eq!(quantize(-1.0), 0);
        assert_eq!(quantize(1.0), 255);
        assert_eq!(quantize(0.0), 128); // 127.5 rounds away from zero
        assert_eq!(quantize(-2.0), 0);
        assert_eq!(quantize(f32::NAN), 0);
    }

    #[test]
    fn grid_places_tiles_and_png_round_trips() {
        let tiles: Vec<Vec<u8>> = (0..5u8)
            .map(|i| {
                (0..IMAGE_LEN)
                    .map(|p| (p as u8).wrapping_mul(i + 1))
                    .collect()
            })
            .collect();
        let (w, h, px) = grid(&tiles);
        assert_eq!((w, h), (4 * 66 + 2, 2 * 66 + 2));
        let png = png(w as u32, h as u32, &px).unwrap();
        let back = image::load_from_memory(&png).unwrap().to_rgb8();
        assert_eq!(back.as_raw(), &px);
        // Tile 4 starts the second row at (2, 68).
        let at = (68 * w + 2) * 3;
        assert_eq!(&px[at..at + SIDE * 3], &tiles[4][..SIDE * 3]);
        // The padding is black.
        assert!(px[..w * 3 * 2].iter().all(|v| *v == 0));
    }
}
