//! Shared test helpers: a synthetic MJPEG AVI writer, an ISO BMFF box walker and PSNR.
//!
//! Key design choice: the AVI writer here is written from the RIFF/AVI 1.0
//! layout independently of the crate's reader (and does not depend on
//! favlo-dcgan), so reading it tests the reader against the format, not
//! against itself. Frames are smooth moving patterns with seeded noise:
//! non-trivial content that a lossy codec must actually carry.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use image::codecs::jpeg::JpegEncoder;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// `n` frames of `w x h` RGB8 with natural-image statistics: luminance
/// detail (drifting ripples, a moving bright disc with a hard edge, ±5 of
/// seeded grain shared by all channels) over slowly varying colour. Chroma
/// is smoother than luma, as in camera and generated pictures; this matters
/// because 4:2:0 alone caps the PSNR of full-resolution chroma detail near
/// 31 dB, whatever the bitrate.
pub fn frames_rgb(w: u32, h: u32, n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|t| {
            let t = t as f32;
            let (cx, cy) = (w as f32 * (0.3 + 0.02 * t), h as f32 * (0.5 + 0.01 * t));
            let rad = w.min(h) as f32 * 0.2;
            let mut px = Vec::with_capacity((w * h * 3) as usize);
            for y in 0..h {
                for x in 0..w {
                    let (xf, yf) = (x as f32, y as f32);
                    let inside = (xf - cx).powi(2) + (yf - cy).powi(2) < rad * rad;
                    let luma = 110.0
                        + 45.0 * (0.35 * xf + 0.3 * t).sin() * (0.25 * yf - 0.2 * t).cos()
                        + if inside { 60.0 } else { 0.0 }
                        + rng.random_range(-5.0f32..5.0);
                    let tint = [
                        30.0 * (0.04 * xf + 0.1 * t).sin(),
                        -10.0 + 15.0 * (0.05 * yf).cos(),
                        25.0 * (0.03 * (xf - yf) - 0.1 * t).cos(),
                    ];
                    for c in tint {
                        px.push((luma + c).clamp(0.0, 255.0) as u8);
                    }
                }
            }
            px
        })
        .collect()
}

/// Baseline JPEG of an RGB8 picture at quality 92.
pub fn jpeg(rgb: &[u8], w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 92)
        .encode(rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

fn put32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}

/// Appends `id`, a length and `body`, padded to even.
fn chunk(o: &mut Vec<u8>, id: &[u8; 4], body: &[u8]) {
    o.extend_from_slice(id);
    put32(o, body.len() as u32);
    o.extend_from_slice(body);
    if body.len() % 2 == 1 {
        o.push(0);
    }
}

fn list(o: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]) {
    let mut b = kind.to_vec();
    b.extend_from_slice(body);
    chunk(o, b"LIST", &b);
}

/// An MJPEG AVI of `jpegs` at `rate/scale` fps, laid out as favlo-dcgan writes
/// it (hdrl: avih + strl(strh, strf); movi of `00dc`; idx1).
pub fn mjpeg_avi(w: u32, h: u32, rate: u32, scale: u32, jpegs: &[Vec<u8>]) -> Vec<u8> {
    let n = jpegs.len() as u32;
    let mut avih = Vec::new();
    for v in [
        (1_000_000u64 * scale as u64 / rate as u64) as u32,
        0,
        0,
        0x10,
        n,
        0,
        1,
        0,
        w,
        h,
        0,
        0,
        0,
        0,
    ] {
        put32(&mut avih, v);
    }
    let mut strh = b"vidsMJPG".to_vec();
    for v in [0u32, 0, 0, scale, rate, 0, n, 0, u32::MAX, 0] {
        put32(&mut strh, v);
    }
    strh.extend_from_slice(&[0, 0, 0, 0]);
    strh.extend_from_slice(&(w as u16).to_le_bytes());
    strh.extend_from_slice(&(h as u16).to_le_bytes());
    let mut strf = Vec::new();
    put32(&mut strf, 40);
    put32(&mut strf, w);
    put32(&mut strf, h);
    strf.extend_from_slice(&1u16.to_le_bytes());
    strf.extend_from_slice(&24u16.to_le_bytes());
    strf.extend_from_slice(b"MJPG");
    for v in [w.wrapping_mul(h).wrapping_mul(3), 0, 0, 0, 0] {
        put32(&mut strf, v);
    }
    let mut strl = Vec::new();
    chunk(&mut strl, b"strh", &strh);
    chunk(&mut strl, b"strf", &strf);
    let mut hdrl = Vec::new();
    chunk(&mut hdrl, b"avih", &avih);
    list(&mut hdrl, b"strl", &strl);

    let mut movi = Vec::new();
    let mut idx1 = Vec::new();
    for j in jpegs {
        idx1.extend_from_slice(b"00dc");
        put32(&mut idx1, 0x10);
        put32(&mut idx1, movi.len() as u32 + 4);
        put32(&mut idx1, j.len() as u32);
        chunk(&mut movi, b"00dc", j);
    }
    let mut body = b"AVI ".to_vec();
    list(&mut body, b"hdrl", &hdrl);
    chunk(&mut body, b"JUNK", &[0u8; 13]);
    list(&mut body, b"movi", &movi);
    chunk(&mut body, b"idx1", &idx1);
    let mut out = Vec::new();
    chunk(&mut out, b"RIFF", &body);
    out
}

/// A test video: the AVI bytes and the RGB8 frames its JPEGs decode to (by the
/// `image` crate, the same decoder the crate uses; PyAV decodes separately).
pub struct TestVideo {
    pub avi: Vec<u8>,
    pub decoded: Vec<Vec<u8>>,
}

pub fn test_video(w: u32, h: u32, n: usize, rate: u32, scale: u32) -> TestVideo {
    let rgb = frames_rgb(w, h, n, 7 + w as u64 * 31 + h as u64);
    let jpegs: Vec<Vec<u8>> = rgb.iter().map(|f| jpeg(f, w, h)).collect();
    let decoded = jpegs
        .iter()
        .map(|j| image::load_from_memory(j).unwrap().to_rgb8().into_raw())
        .collect();
    TestVideo {
        avi: mjpeg_avi(w, h, rate, scale, &jpegs),
        decoded,
    }
}

/// A box found by [`walk`]: its type, absolute payload range and depth.
#[derive(Debug, Clone)]
pub struct BoxAt {
    pub kind: [u8; 4],
    pub start: usize,
    pub end: usize,
    pub depth: usize,
}

/// Boxes whose payload is a sequence of boxes (with the bytes to skip first).
fn children_offset(kind: &[u8; 4]) -> Option<usize> {
    match kind {
        b"moov" | b"trak" | b"mdia" | b"minf" | b"dinf" | b"stbl" | b"edts" => Some(0),
        b"stsd" | b"dref" => Some(8), // full box header + entry_count
        b"avc1" => Some(78),          // VisualSampleEntry fields
        _ => None,
    }
}

/// Walks `b[start..end]` as boxes, recursing into known containers. Panics
/// (test failure) on any size that does not fit its parent exactly.
pub fn walk(b: &[u8], start: usize, end: usize, depth: usize, out: &mut Vec<BoxAt>) {
    let mut pos = start;
    while pos < end {
        assert!(
            pos + 8 <= end,
            "box header at {pos} overruns parent end {end}"
        );
        let size = u32::from_be_bytes(b[pos..pos + 4].try_into().unwrap()) as usize;
        let kind: [u8; 4] = b[pos + 4..pos + 8].try_into().unwrap();
        assert!(size >= 8, "box {:?} at {pos} has size {size}", kind);
        assert!(
            pos + size <= end,
            "box {:?} at {pos} size {size} overruns {end}",
            String::from_utf8_lossy(&kind)
        );
        out.push(BoxAt {
            kind,
            start: pos + 8,
            end: pos + size,
            depth,
        });
        if let Some(skip) = children_offset(&kind) {
            walk(b, pos + 8 + skip, pos + size, depth + 1, out);
        }
        pos += size;
    }
    assert_eq!(pos, end, "boxes do not end exactly at their parent's end");
}

pub fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(b[at..at + 2].try_into().unwrap())
}

/// PSNR in dB of two equal-length 8-bit buffers.
pub fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}
