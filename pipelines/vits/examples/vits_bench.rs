//! Real-time factor of the Piper voice on N threads (default 2): phonemizes a
//! fixed paragraph, synthesizes every sentence with the voice's default scales
//! and a fixed seed, repeats, and prints seconds of compute per second of audio
//! (best and median of the runs). `tools/bench/vits_onnxruntime.py` prints
//! onnxruntime's figure for the same text on the same model.
//!
//! Usage: cargo run --release -p favlo-vits --example vits_bench -- \
//!            /path/en_US-joe-medium.onnx [threads] [runs]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use favlo_vits::Noise;
use favlo_vits::noise::Normals;

/// The benchmark text (also in tools/bench/vits_onnxruntime.py).
pub const TEXT: &str = "The quick brown fox jumps over the lazy dog. \
    Favlo runs every model on one machine, sharing the accelerator fairly. \
    Is this the right way to the station? \
    On January fifth, we met at half past ten and talked for an hour.";

/// CPU seconds (user + system, all threads) of this process so far, from
/// `/proc/self/stat` (Linux; `None` elsewhere). Ticks are 1/100 s.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .or_else(|| std::env::var("FAVLO_TEST_PIPER_ONNX").ok())
        .expect("usage: vits_bench <voice.onnx> [threads] [runs]");
    let threads: usize = args.next().map_or(2, |s| s.parse().unwrap());
    let runs: usize = args.next().map_or(5, |s| s.parse().unwrap());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .unwrap();
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-bench");
    let voice = favlo_vits::open_path(path.as_ref(), &ledger, &owner).unwrap();
    let sentences = voice.sentences(TEXT).unwrap();
    let scales = voice.config().scales;
    let rate = voice.config().sample_rate as f64;
    let mut rtfs = Vec::new();
    let mut cpu = Vec::new();
    let mut audio_s = 0.0;
    for run in 0..=runs {
        let c0 = cpu_seconds();
        let t0 = Instant::now();
        let mut n = 0usize;
        for (i, s) in sentences.iter().enumerate() {
            let mut noise = Normals::for_sentence(42, i);
            let x = voice
                .vits()
                .synthesize(&s.ids, scales, Noise::Stream(&mut noise), usize::MAX, None)
                .unwrap();
            n += x.len();
        }
        let secs = t0.elapsed().as_secs_f64();
        voice.vits().release_scratch();
        audio_s = n as f64 / rate;
        if run > 0 {
            // run 0 warms caches and the allocator
            rtfs.push(secs / audio_s);
            if let (Some(a), Some(b)) = (c0, cpu_seconds()) {
                cpu.push((b - a) / audio_s);
            }
        }
    }
    rtfs.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    println!(
        "favlo-vits: {} sentences, {audio_s:.2} s of audio, {threads} threads: RTF best {:.3}, median {:.3}; CPU-seconds per audio second median {:.3} ({} runs)",
        sentences.len(),
        rtfs[0],
        rtfs[rtfs.len() / 2],
        cpu.get(cpu.len() / 2).copied().unwrap_or(f64::NAN),
        rtfs.len()
    );
}
