//! The DCGAN generator on a CUDA GPU against the CPU generator (the reference the
//! PyTorch agreement tests already pin down), same weights, same latents:
//! - random weights of the real shapes (`common::random_source`), batch 8: every
//!   layer's activation max |gpu − cpu| / max |cpu| ≤ 1e-5; the images' max |gpu −
//!   cpu| ≤ 1e-4 (f32 everywhere; only the convolutions' summation order differs);
//! - the real `gan-face-generate` checkpoint (`FAVLO_TEST_DCGAN_WEIGHTS`, else
//!   `$FAVLO_HOME/models/dcgan-faces/weights.tar`, else the repo's
//!   `target/favlo-home`): 8 images and an 8-frame walk, max |gpu − cpu| ≤ 1e-4 on the
//!   floats before quantization; 8-bit values identical wherever the CPU value lies
//!   farther than that distance from a rounding boundary; whole pipelines (image grid,
//!   video frames) differ by at most 1 level and only at such near-boundary values;
//! - a GPU job preempted at every stage gives the bytes of an uninterrupted GPU job;
//! - the device ledger holds exactly the generator's buffers under its owner, and
//!   nothing once it is dropped.
//!
//! Without CUDA each device test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1` (then a missing checkpoint fails too).
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;

use favlo_dcgan::cuda::{CudaGenerator, device_bytes};
use favlo_dcgan::encode::quantize;
use favlo_dcgan::generator::{IMAGE_LEN, LAYERS, MAX_BATCH, NZ, layer_shape};
use favlo_dcgan::noise::{LatentWalk, latents};
use favlo_dcgan::{DcganImage, DcganVideo, Generator, check_device};
use favlo_pipeline::{MediaOutput, MediaPipeline};
use favlo_runtime::cuda::{CudaContext, CudaError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::Owner;
use serde_json::json;

use common::{ledger, random_generator, random_source, run_with_preempts};

fn require() -> bool {
    std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// Whether cuda:0 opens; else a loud skip (a failure under `FAVLO_REQUIRE_CUDA=1`).
fn cuda_or_skip(what: &str) -> bool {
    match CudaContext::probe() {
        Ok(_) => true,
        Err(CudaError::Unavailable { reason }) => {
            if require() {
                panic!("FAVLO_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            eprintln!("\n**** SKIPPED: CUDA unavailable ({reason}); {what} did not run ****\n");
            false
        }
        Err(e) => panic!("CUDA present but failed: {e}"),
    }
}

fn weights() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FAVLO_TEST_DCGAN_WEIGHTS") {
        return Some(p.into());
    }
    let home = std::env::var_os("FAVLO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/favlo-home")
        });
    let p = home.join("models/dcgan-faces/weights.tar");
    p.exists().then_some(p)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    f64::from(max_abs(a, b)) / f64::from(max).max(1e-30)
}

/// Whether `x` lies within `d` (in [-1, 1] units) of a quantization boundary.
fn near_boundary(x: f32, d: f32) -> bool {
    let v = (x + 1.0) * 127.5;
    ((v - v.floor()) - 0.5).abs() <= 127.5 * d + 1e-4
}

/// Checks GPU floats against CPU floats: max |Δ| ≤ 1e-4 and equal bytes away from
/// boundaries. Returns (max |Δ|, values near a boundary).
fn check_pixels(what: &str, gpu: &[f32], cpu: &[f32]) -> (f32, usize) {
    let d = max_abs(gpu, cpu);
    assert!(d <= 1e-4, "{what}: max |gpu − cpu| {d:e} > 1e-4");
    let mut near = 0;
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        if near_boundary(c, d) {
            near += 1;
        } else {
            assert_eq!(
                quantize(g),
                quantize(c),
                "{what}: value {i}: gpu {g} cpu {c}"
            );
        }
    }
    eprintln!(
        "{what}: max |gpu − cpu| {d:.2e} (bound 1e-4); {near} of {} values near a rounding boundary",
        cpu.len()
    );
    (d, near)
}

/// Bytes of two outputs: each differs by at most one level, at most `near` of them.
fn check_bytes(what: &str, gpu: &[u8], cpu: &[u8], near: usize) {
    assert_eq!(gpu.len(), cpu.len(), "{what}");
    let diff = gpu.iter().zip(cpu).filter(|(a, b)| a != b).count();
    assert!(
        gpu.iter().zip(cpu).all(|(a, b)| a.abs_diff(*b) <= 1),
        "{what}: a byte differs by more than one level"
    );
    assert!(
        diff <= near,
        "{what}: {diff} bytes differ, {near} values near a boundary"
    );
    eprintln!(
        "{what}: {diff} of {} bytes differ (by one level)",
        cpu.len()
    );
}

#[test]
fn check_device_names_the_reason() {
    let e = check_device(Device::Cuda(999)).unwrap_err().to_string();
    assert!(e.starts_with("CUDA is unavailable"), "{e}");
    assert!(check_device(Device::Cpu).is_ok());
}

#[test]
fn random_weights_every_layer_matches_cpu() {
    if !cuda_or_skip("dcgan GPU vs CPU, random weights") {
        return;
    }
    let (l, o) = ledger();
    let mut cpu = random_generator(&l, &o);
    let mut gpu = CudaGenerator::load(0, &o, random_source()).unwrap();
    let z = latents(5, MAX_BATCH, NZ);
    assert!(cpu.load_state(0, MAX_BATCH, &z));
    assert!(gpu.load_state(0, MAX_BATCH, &z).unwrap());
    for layer in 0..LAYERS {
        assert!(cpu.step());
        assert!(gpu.step().unwrap());
        let (c, g) = (cpu.state(), gpu.state().unwrap());
        let e = rel(g, c);
        eprintln!("random weights, layer {layer}: max |Δ| / max |cpu| {e:.2e} (bound 1e-5)");
        assert!(e <= 1e-5, "layer {layer}: {e}");
    }
    assert!(!gpu.step().unwrap());
    check_pixels(
        "random weights, 8 images",
        gpu.state().unwrap(),
        cpu.state(),
    );
    // Smaller batches give the same images (images never interact).
    let one = gpu.forward(&z[..NZ], 1).unwrap().unwrap().to_vec();
    let all = gpu.forward(&z, MAX_BATCH).unwrap().unwrap();
    assert_eq!(one, all[..IMAGE_LEN]);
    assert!(gpu.forward(&z[1..], 1).unwrap().is_none());
}

#[test]
fn real_checkpoint_matches_cpu() {
    if !cuda_or_skip("dcgan GPU vs CPU, real checkpoint") {
        return;
    }
    let Some(path) = weights() else {
        assert!(
            !require(),
            "FAVLO_REQUIRE_CUDA=1 but no dcgan-faces checkpoint found"
        );
        eprintln!(
            "\n**** SKIPPED: no dcgan-faces weights.tar (set FAVLO_TEST_DCGAN_WEIGHTS); \
             the real-checkpoint GPU test did not run ****\n"
        );
        return;
    };
    let (l, o) = ledger();
    let mut cpu = Generator::open(&path, &l, &o).unwrap();
    let mut gpu = CudaGenerator::open(&path, 0, &o).unwrap();
    eprintln!("device: {}", gpu.device_name());

    // Images: the image pipeline's latents for seed 1234, n = 8.
    let z = latents(1234, MAX_BATCH, NZ);
    let c = cpu.forward(&z, MAX_BATCH).unwrap().to_vec();
    let g = gpu.forward(&z, MAX_BATCH).unwrap().unwrap().to_vec();
    let (_, near_img) = check_pixels("real checkpoint, 8 images", &g, &c);

    // A walk: 1 s at 8 fps, seed 99.
    let walk = LatentWalk::new(99, 1, 8, NZ);
    let zf: Vec<f32> = (0..8).flat_map(|f| walk.frame(f)).collect();
    let cf = cpu.forward(&zf, 8).unwrap().to_vec();
    let gf = gpu.forward(&zf, 8).unwrap().unwrap().to_vec();
    let (_, near_vid) = check_pixels("real checkpoint, 8 walk frames", &gf, &cf);
    drop((cpu, gpu));

    // Whole pipelines, parse → generate, on both devices.
    let spec = favlo_pipeline::ModelSpec {
        id: "dcgan-faces".into(),
        family: "dcgan".into(),
        kind: favlo_pipeline::ModelKind::Image,
        dir: path.parent().unwrap().to_path_buf(),
        files: vec![path.file_name().unwrap().into()],
        context_length: None,
        defaults: json!({}),
    };
    let mut img_cpu = favlo_dcgan::open_image(&spec, &l, &o, Device::Cpu).unwrap();
    let mut img_gpu = favlo_dcgan::open_image(&spec, &l, &o, Device::Cuda(0)).unwrap();
    let job = img_cpu.parse("i", &json!({"n": 8, "seed": 1234})).unwrap();
    let (a, _) = run_with_preempts(img_cpu.as_mut(), &job, 0);
    let (b, _) = run_with_preempts(img_gpu.as_mut(), &job, 0);
    let (MediaOutput::Image { pixels: pa, .. }, MediaOutput::Image { pixels: pb, .. }) = (a, b)
    else {
        panic!("not images");
    };
    check_bytes("image pipeline, n = 8", &pb, &pa, near_img);

    let mut vid_cpu = favlo_dcgan::open_video(&spec, &l, &o, Device::Cpu).unwrap();
    let mut vid_gpu = favlo_dcgan::open_video(&spec, &l, &o, Device::Cuda(0)).unwrap();
    let job = vid_cpu
        .parse("v", &json!({"seconds": 1, "fps": 8, "seed": 99}))
        .unwrap();
    let (a, _) = run_with_preempts(vid_cpu.as_mut(), &job, 0);
    let (b, _) = run_with_preempts(vid_gpu.as_mut(), &job, 0);
    let (MediaOutput::Video { frames: fa, .. }, MediaOutput::Video { frames: fb, .. }) = (a, b)
    else {
        panic!("not videos");
    };
    check_bytes(
        "video pipeline, 8 frames",
        &fb.concat(),
        &fa.concat(),
        near_vid,
    );
}

#[test]
fn preempted_gpu_jobs_give_the_same_bytes() {
    if !cuda_or_skip("dcgan GPU preemption") {
        return;
    }
    let (_, o) = ledger();
    let mut img = DcganImage::new(CudaGenerator::load(0, &o, random_source()).unwrap());
    assert_eq!(img.device(), Device::Cuda(0));
    let job = img.parse("p", &json!({"n": 3, "seed": 42})).unwrap();
    let (whole, _) = run_with_preempts(&mut img, &job, 0);
    let (pieces, holds) = run_with_preempts(&mut img, &job, LAYERS - 1);
    assert_eq!(holds, LAYERS - 1);
    assert_eq!(whole, pieces);

    let mut vid = DcganVideo::new(CudaGenerator::load(0, &o, random_source()).unwrap());
    let job = vid
        .parse("w", &json!({"seconds": 2, "fps": 10, "seed": 3}))
        .unwrap();
    let (whole, _) = run_with_preempts(&mut vid, &job, 0);
    let (pieces, holds) = run_with_preempts(&mut vid, &job, 2);
    assert_eq!(holds, 2);
    assert_eq!(whole, pieces);
}

#[test]
fn device_ledger_holds_the_generator() {
    if !cuda_or_skip("dcgan GPU ledger") {
        return;
    }
    let o = Owner::mint("dcgan-gpu-ledger");
    let g = CudaGenerator::load(0, &o, random_source()).unwrap();
    let ctx = std::sync::Arc::clone(g.context());
    // Resident: conv weights + folded norms (scale, shift); scratch: two activations.
    let conv: usize = (0..LAYERS).map(|l| layer_shape(l).weight_len()).sum();
    let norms: usize = (0..LAYERS - 1)
        .map(|l| 2 * layer_shape(l).out_channels)
        .sum();
    let act = 2 * MAX_BATCH * favlo_dcgan::generator::max_act_len();
    let want = ((conv + norms + act) * 4) as u64;
    assert_eq!(ctx.ledger().owner_bytes(&o), want);
    assert!(want <= device_bytes(MAX_BATCH));
    drop(g);
    assert_eq!(ctx.sweep(&o).unwrap(), 0);
    assert_eq!(ctx.ledger().owner_bytes(&o), 0);
}
