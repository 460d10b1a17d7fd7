//! Throughput of `pack` on a 4096x4096 f32 matrix (64 MiB of input) for each element format and
//! scale rule, at 1 thread, 2 threads and all cores, beside a memcpy of the same bytes (the
//! ceiling). Figures are GB/s of f32 input (1e9 bytes), best of several runs.
//!
//! Run: `cargo run --release -p favlo-mx --example pack_bench [rows cols]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_mx::{ElementFormat, MxLayout, ScaleRule, pack_with_threads};
use std::hint::black_box;
use std::time::Instant;

const REPS: usize = 5;

fn best_of(mut f: impl FnMut()) -> f64 {
    f();
    (0..REPS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let (rows, cols) = (
        args.first().copied().unwrap_or(4096),
        args.get(1).copied().unwrap_or(4096),
    );
    // Pseudo-Gaussian data (sum of 4 uniforms), deterministic.
    let mut s = 0x1234_5678_9ABC_DEF0u64;
    let mut uni = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| uni() + uni() + uni() + uni())
        .collect();
    let bytes = (x.len() * 4) as f64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "pack {rows}x{cols} f32 ({:.1} MiB), {cores} cores available",
        bytes / (1 << 20) as f64
    );

    let mut dst = vec![0.0f32; x.len()];
    let t = best_of(|| {
        dst.copy_from_slice(black_box(&x));
        black_box(&dst);
    });
    println!("memcpy (1 thread):           {:6.2} GB/s", bytes / t / 1e9);

    let mut threads = vec![1, 2];
    if cores > 2 {
        threads.push(cores);
    }
    for format in [
        ElementFormat::Fp4E2M1,
        ElementFormat::Fp8E4M3,
        ElementFormat::Fp8E5M2,
    ] {
        let layout = MxLayout { format, rows, cols };
        let mut out = vec![0u8; layout.total_bytes()];
        for rule in [ScaleRule::Ceil, ScaleRule::Ocp] {
            for &n in &threads {
                let t = best_of(|| {
                    pack_with_threads(black_box(&x), layout, rule, &mut out, n).unwrap();
                    black_box(&out);
                });
                println!(
                    "{:<8} {:<5} {n:>3} thread(s): {:6.2} GB/s",
                    format!("{format:?}"),
                    format!("{rule:?}"),
                    bytes / t / 1e9
                );
            }
        }
    }
}
