//! Run the embeddings benchmark without the CLI:
//! `cargo run --release -p favlo-bert --example bench_embeddings -- <model dir> [int8]`.
//! Prints the Markdown table that `favlo bench embeddings` prints.

use favlo_bert::{BenchOptions, WeightFormat, bench_embeddings};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: bench_embeddings <model dir> [int8]")?;
    let format = match args.next().as_deref() {
        Some("int8") => WeightFormat::Int8,
        _ => WeightFormat::AsStored,
    };
    let report = bench_embeddings(
        std::path::Path::new(&dir),
        &BenchOptions {
            format,
            ..BenchOptions::default()
        },
    )?;
    print!("{}", report.to_markdown());
    Ok(())
}
