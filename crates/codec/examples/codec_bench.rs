//! Times the conversions on generated content: `cargo run -p favlo-codec --example codec_bench`.
//!
//! Key design choice: reuse the tests' seeded frame generator and AVI writer
//! (`tests/common`) so the figures describe the same content the tests check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

fn main() {
    for (w, h, n, fps) in [
        (64u32, 64u32, 60usize, 12u32),
        (256, 256, 48, 24),
        (640, 360, 48, 24),
    ] {
        let v = common::test_video(w, h, n, fps, 1);
        let t = Instant::now();
        let mp4 = favlo_codec::mp4_from_avi(&v.avi).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!(
            "mp4 {w}x{h} x{n} @ {fps}: {:.3} s ({:.1} frames/s), AVI {} B -> MP4 {} B",
            s,
            n as f64 / s,
            v.avi.len(),
            mp4.len()
        );
    }
    let rate = 44_100u32;
    let x: Vec<f32> = (0..rate as usize * 60 * 2)
        .map(|i| 0.5 * ((i / 2) as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin())
        .collect();
    let t = Instant::now();
    let wav = favlo_codec::wav_from_samples(rate, 2, &x).unwrap();
    let tw = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let flac = favlo_codec::flac_from_wav(&wav).unwrap();
    let tf = t.elapsed().as_secs_f64();
    println!(
        "60 s stereo 44.1 kHz: WAV {tw:.3} s ({} B), FLAC {tf:.3} s ({} B)",
        wav.len(),
        flac.len()
    );
}
