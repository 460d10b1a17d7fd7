//! `cargo run --release -p favlo-llama --example bench_chat -- model.gguf [mxfp8|mxfp4|f16|f32]`:
//! prefill (128 tokens) and decode (64 tokens) throughput at 1 and 2 threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_llama::{BenchOptions, OpenOptions, WeightFormat, bench, open};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().expect("usage: bench_chat model.gguf [format]"));
    let format = args.next().map_or(WeightFormat::default(), |f| {
        WeightFormat::parse(&f).expect("format")
    });
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("bench");
    let t = std::time::Instant::now();
    let opts = OpenOptions {
        format,
        max_context: Some(1024),
        ..OpenOptions::default()
    };
    let mut rt = open(&path, &ledger, &owner, &opts).unwrap();
    println!(
        "{format:?}: loaded in {:.2}s, {} MB resident",
        t.elapsed().as_secs_f64(),
        ledger.live() >> 20
    );
    for threads in [1, 2] {
        let r = bench(
            &mut rt,
            &BenchOptions {
                threads,
                ..BenchOptions::default()
            },
        )
        .unwrap();
        println!("favlo {r}");
    }
}
