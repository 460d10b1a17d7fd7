//! CUDA GEMV benchmark with every kernel variant and timing probe (kernel development;
//! `favlo bench kernels --device cuda` prints the default kernel's table): MXFP4/MXFP8
//! at 8192×8192 and 4096×14336, and MXFP4 at the decode shapes of a Qwen3-8B layer,
//! against the device-to-device copy bandwidth measured in the same run.
//!
//! Run: `cargo run --release -p favlo-runtime --features cuda --example cuda_bench`
//! (`FAVLO_BENCH_FIRST=1`: the first shape only; `FAVLO_BENCH_ONLY=Auto,=PingPong`:
//! the variants whose names start with one of these, or are exactly one marked `=`;
//! `FAVLO_BENCH_PDL=1`: also each kernel chained under programmatic dependent launch,
//! as in decode; `FAVLO_BENCH_SHAPES=fp4:8192x2048,fp8:8192x8192`: these shapes;
//! `FAVLO_BENCH_CHAIN=fp4:8192x8192`: chains of dependent N×N GEMVs instead, one launch
//! per stage against one launch for all).

use favlo_mx::ElementFormat;
use favlo_runtime::cuda::bench::{
    GemvBenchOptions, GemvCase, GemvRow, GemvVariant, chain_bench, format_name, gemv_bench,
};
use favlo_runtime::cuda::{CudaContext, GemvDecode, GemvKernel};

fn mma(name: &str, kernel: GemvKernel, ring: Option<(usize, usize)>, pp: u8) -> GemvCase {
    GemvCase {
        name: name.into(),
        variant: GemvVariant::Mma {
            kernel,
            ring,
            pp_prefetch: pp,
        },
    }
}

fn probe(name: &str, ring: (usize, usize), mode: usize) -> GemvCase {
    GemvCase {
        name: name.into(),
        variant: GemvVariant::Probe {
            ring: Some(ring),
            mode,
        },
    }
}

/// Every variant: the kernels with their own choices, ring / bulk-copy rings of
/// several (warps, depth), ping-pong warps and L2 prefetch, probes, CUDA cores.
fn cases() -> Vec<GemvCase> {
    let mut c = vec![
        mma("Regs", GemvKernel::Regs, None, 0),
        mma("Ring auto", GemvKernel::Ring, None, 0),
        mma("PingPong", GemvKernel::PingPong, None, 0),
        mma("Auto", GemvKernel::Auto, None, 0),
    ];
    for (w, d) in [(8, 2), (16, 2), (4, 3), (8, 3)] {
        c.push(mma(
            &format!("Ring {w}x{d}"),
            GemvKernel::Ring,
            Some((w, d)),
            0,
        ));
        c.push(mma(
            &format!("Tma {w}x{d}"),
            GemvKernel::Tma,
            Some((w, d)),
            0,
        ));
    }
    for w in [4, 16] {
        let name = format!("PingPong {w} warps");
        c.push(mma(&name, GemvKernel::PingPong, Some((w, 2)), 0));
    }
    for pd in [2u8, 3] {
        let name = format!("PingPong L2 prefetch {pd}");
        c.push(mma(&name, GemvKernel::PingPong, None, pd));
    }
    c.push(probe("probe Tma 8x3 loads only", (8, 3), 4));
    for (m, what) in [(1, "no decode"), (2, "no mma"), (3, "loads only")] {
        c.push(probe(&format!("probe 8x2 {what}"), (8, 2), m));
    }
    c.push(probe("probe read ceiling", (8, 2), 5));
    for (m, what) in [(6, "no decode"), (7, "no mma"), (8, "loads only")] {
        c.push(probe(&format!("probe PingPong {what}"), (8, 2), m));
    }
    c.push(GemvCase {
        name: "F16x2 CUDA-core".into(),
        variant: GemvVariant::CudaCore(GemvDecode::F16x2),
    });
    c
}

/// `fp4:8192x2048,fp8:8192x8192` → (format, N, K) per entry.
fn parse_shapes(list: &str) -> Result<Vec<(ElementFormat, usize, usize)>, String> {
    list.split(',')
        .map(|item| {
            let bad = || format!("FAVLO_BENCH_SHAPES: {item:?} is not fp4|fp8:NxK");
            let (fmt, dims) = item.trim().split_once(':').ok_or_else(bad)?;
            let (n, k) = dims.split_once('x').ok_or_else(bad)?;
            let format = match fmt {
                "fp4" => ElementFormat::Fp4E2M1,
                "fp8" => ElementFormat::Fp8E4M3,
                _ => return Err(bad()),
            };
            Ok((
                format,
                n.parse().map_err(|_| bad())?,
                k.parse().map_err(|_| bad())?,
            ))
        })
        .collect()
}

fn line(r: &GemvRow) -> String {
    format!(
        "| {} {} | {}×{} | {:.1} MB | {:.1} µs | {:.0} | {:.0}% | {:.1e} / {:.1e} | {:.1} µs | {} |",
        format_name(r.format),
        r.name,
        r.rows,
        r.cols,
        r.bytes / 1e6,
        r.us,
        r.gbps,
        r.of_copy,
        r.rel_err,
        r.rel_err_all,
        r.us_one_copy.unwrap_or(f64::NAN),
        r.us_pdl.map_or_else(String::new, |us| format!(
            "{us:.1} µs = {:.0}% ({:?})",
            r.of_copy * r.us / us,
            r.kernel_pdl
        ))
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match CudaContext::open(0, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cuda_bench: {e}");
            std::process::exit(2);
        }
    };
    if let Ok(list) = std::env::var("FAVLO_BENCH_CHAIN") {
        // Chains of dependent N×N GEMVs: one launch per stage against one launch.
        let copy = favlo_runtime::cuda::copy_bandwidth_gbps(&ctx, 1 << 30, 20)?;
        println!("copy bandwidth {copy:.0} GB/s");
        println!(
            "| format | N | stages | MB/stage | separate µs (% of copy) | separate, PDL | one launch | x prep µs | max diff |"
        );
        for (format, n, _) in parse_shapes(&list)? {
            let r = chain_bench(&ctx, format, n)?;
            let pct = |us: f64| 100.0 * r.bytes / (us * 1e-6) / 1e9 / copy;
            println!(
                "| {} | {n} | {} | {:.1} | {:.2} ({:.0}%) | {:.2} ({:.0}%) | {:.2} ({:.0}%) | {:.2} | {} |",
                format_name(format),
                r.stages,
                r.bytes / 1e6,
                r.us_separate,
                pct(r.us_separate),
                r.us_separate_pdl,
                pct(r.us_separate_pdl),
                r.us_chain,
                pct(r.us_chain),
                r.us_prep,
                r.max_diff
            );
        }
        return Ok(());
    }
    let mut shapes = Vec::new();
    for (n, k) in [(8192, 8192), (4096, 14336)] {
        shapes.push((ElementFormat::Fp4E2M1, n, k));
        shapes.push((ElementFormat::Fp8E4M3, n, k));
    }
    // The decode GEMVs of a Qwen3-8B-shaped layer: q|k|v, o, gate|up, down.
    for (n, k) in [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)] {
        shapes.push((ElementFormat::Fp4E2M1, n, k));
    }
    if let Ok(list) = std::env::var("FAVLO_BENCH_SHAPES") {
        shapes = parse_shapes(&list)?;
    }
    if std::env::var_os("FAVLO_BENCH_FIRST").is_some() {
        shapes.truncate(1);
    }
    let mut cases = cases();
    if let Ok(only) = std::env::var("FAVLO_BENCH_ONLY") {
        let keep: Vec<&str> = only.split(',').map(str::trim).collect();
        cases.retain(|c| {
            keep.iter().any(|k| match k.strip_prefix('=') {
                Some(exact) => c.name == exact,
                None => c.name.starts_with(k),
            })
        });
    }
    let opts = GemvBenchOptions {
        shapes,
        cases,
        one_copy: true,
        prep_x: true,
        pdl_chain: std::env::var_os("FAVLO_BENCH_PDL").is_some(),
    };
    let r = gemv_bench(&ctx, &opts, |row| println!("{}", line(row)))?;
    println!(
        "\ndevice {}; copy bandwidth {:.0} GB/s",
        r.device, r.copy_gbps
    );
    println!(
        "| format, kernel | N×K | bytes/GEMV | time | GB/s | % of copy | max rel err: 64 rows vs CPU f64 ref / all rows vs Regs | one copy, back to back (L2) | chained under PDL |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in &r.rows {
        println!("{}", line(row));
    }
    for (k, us) in &r.prep_x_us {
        println!("| prep_x | {k} | | {us:.2} µs | | | | |");
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    Ok(())
}
