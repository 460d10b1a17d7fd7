//! Run the embeddings benchmark without the CLI:
//! `cargo run --release -p favlo-bert --example bench_embeddings -- <model dir> [f32|bf16|bf16x3|int8|as-stored] [batches] [cpu|cuda|cuda:N] [threads]`
//! (default: the serving default, AMX bf16 where the CPU has AMX, on the CPU with 2 threads;
//! `cuda` needs `--features cuda`).
//! Prints the Markdown table that `favlo bench embeddings` prints.

use favlo_bert::{BenchOptions, Precision, WeightFormat, bench_embeddings};
use favlo_runtime::device::Device;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: bench_embeddings <model dir> [f32|bf16|bf16x3|int8]")?;
    let format = match args.next().as_deref() {
        Some("int8") => WeightFormat::Int8,
        Some("f32") => WeightFormat::F32,
        Some("bf16") => WeightFormat::Amx(Precision::Bf16),
        Some("bf16x3") => WeightFormat::Amx(Precision::Bf16x3),
        _ => WeightFormat::AsStored,
    };
    let mut options = BenchOptions {
        format,
        ..BenchOptions::default()
    };
    // Optional third argument: comma-separated batch sizes (default 1,8,32).
    if let Some(list) = args.next() {
        options.batches = list.split(',').filter_map(|b| b.parse().ok()).collect();
    }
    // Optional fourth: the device; fifth: worker threads.
    if let Some(dev) = args.next() {
        options.device = match dev.as_str() {
            "cpu" => Device::Cpu,
            "cuda" => Device::Cuda(0),
            other => match other.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
                Some(n) => Device::Cuda(n),
                None => return Err(format!("unknown device {other:?}: cpu, cuda or cuda:N").into()),
            },
        };
    }
    if let Some(t) = args.next() {
        options.threads = t.parse()?;
    }
    let report = bench_embeddings(std::path::Path::new(&dir), &options)?;
    print!("{}", report.to_markdown());
    Ok(())
}
