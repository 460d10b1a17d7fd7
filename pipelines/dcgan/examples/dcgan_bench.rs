//! Times the DCGAN pipelines on the real checkpoint: ms per image (batch 1 and
//! 8) and ms per video frame (2 s at 12 fps, generate only and with pack), on the
//! CPU or (second argument `cuda` / `cuda:N`, feature `cuda`) a GPU.
//!
//! With `DCGAN_BENCH_OUT=dir` it also writes `dir/walk.avi`.
//!
//! `RAYON_NUM_THREADS=2 cargo run --example dcgan_bench -p favlo-dcgan -- /path/weights.tar`
//! `cargo run --example dcgan_bench -p favlo-dcgan --features cuda -- /path/weights.tar cuda`
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use favlo_dcgan::{DcganImage, DcganVideo, Engine};
use favlo_pipeline::{Control, MediaPipeline};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .or_else(|| std::env::var("FAVLO_TEST_DCGAN_WEIGHTS").ok())
            .ok_or("usage: dcgan_bench /path/weights.tar [cpu|cuda|cuda:N]")?,
    );
    let device = match std::env::args().nth(2).as_deref() {
        None | Some("cpu") => Device::Cpu,
        Some("cuda") => Device::Cuda(0),
        Some(d) => Device::Cuda(
            d.strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .ok_or("device: cpu, cuda or cuda:N")?,
        ),
    };
    #[cfg(feature = "cuda")]
    if let Device::Cuda(n) = device {
        layer_times(n as usize)?;
    }
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("dcgan-bench");
    println!(
        "device: {device}; threads: {}",
        rayon::current_num_threads()
    );
    let t = Instant::now();
    let mut img = DcganImage::new(Engine::open(&path, &ledger, &owner, device)?);
    println!("open: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let c = Control::new();
    for n in [1u64, 8] {
        let job = img.parse("b", &json!({"n": n, "seed": 1}))?;
        img.generate(&job, None, &c)?; // warm-up
        let reps = if device == Device::Cpu { 20 } else { 200 };
        let t = Instant::now();
        for _ in 0..reps {
            img.generate(&job, None, &c)?;
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / (reps as f64 * n as f64);
        println!(
            "image n={n}: {ms:.3} ms per image (generate) = {:.0} images/s",
            1e3 / ms
        );
    }
    drop(img);
    let mut vid = DcganVideo::new(Engine::open(&path, &ledger, &owner, device)?);
    let job = vid.parse("v", &json!({"seconds": 2, "fps": 12, "seed": 1}))?;
    vid.generate(&job, None, &c)?;
    let reps = 5;
    let (mut gen_s, mut pack_s) = (0f64, 0f64);
    for _ in 0..reps {
        let t = Instant::now();
        let out = vid.generate(&job, None, &c)?;
        gen_s += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let file = vid.pack(&job, out)?;
        pack_s += t.elapsed().as_secs_f64();
        assert!(file.bytes.len() > 1000);
        if let Ok(dir) = std::env::var("DCGAN_BENCH_OUT") {
            std::fs::write(PathBuf::from(dir).join("walk.avi"), &file.bytes)?;
        }
    }
    let frames = (24 * reps) as f64;
    println!(
        "video 2 s @ 12 fps: {:.3} ms per frame generate ({:.0} frames/s), {:.2} ms per frame JPEG+AVI",
        gen_s * 1e3 / frames,
        frames / gen_s,
        pack_s * 1e3 / frames
    );
    Ok(())
}

/// Kernel time of each generator layer (CUDA events, median of 50), batch 1 and 8,
/// with every input channel in one thread and with the split the pipeline uses.
#[cfg(feature = "cuda")]
fn layer_times(ordinal: usize) -> Result<(), Box<dyn std::error::Error>> {
    use favlo_dcgan::generator::{LAYERS, layer_shape};
    use favlo_runtime::cuda::{Conv2dOps, ConvAct, CudaContext, time_ms};
    use favlo_runtime::ledger::SpanKind;

    let ctx = CudaContext::open(ordinal, None)?;
    let ops = Conv2dOps::load(&ctx)?;
    let owner = Owner::mint("dcgan-bench-layers");
    for batch in [1, 8] {
        let mut total = [0f64; 2];
        for l in 0..LAYERS {
            let g = layer_shape(l);
            let buf = |n: usize| ctx.upload(&owner, SpanKind::Scratch, &vec![0.01f32; n]);
            let (x, w, mut y) = (
                buf(batch * g.in_len())?,
                buf(g.weight_len())?,
                buf(batch * g.out_len())?,
            );
            // The pipeline's choice (per image, the same at every batch).
            let auto = Conv2dOps::auto_splits(g);
            let mut ms = [0f64; 2];
            for (i, splits) in [1, auto].into_iter().enumerate() {
                ms[i] = time_ms(&ctx, 3, 50, || {
                    ops.conv_transpose2d_split(
                        &x,
                        &w,
                        g,
                        batch,
                        &mut y,
                        None,
                        ConvAct::Relu,
                        splits,
                    )
                })?;
                total[i] += ms[i];
            }
            println!(
                "layer {l} batch {batch}: {:.1} µs one thread per output, {:.1} µs split {auto}",
                ms[0] * 1e3,
                ms[1] * 1e3
            );
        }
        println!(
            "all layers batch {batch}: {:.1} µs unsplit, {:.1} µs split",
            total[0] * 1e3,
            total[1] * 1e3
        );
    }
    Ok(())
}
