//! The batched MX GEMV (`GemvMma::gemv_batch`) beside the batch-1 GEMV, on the decode
//! shapes of a Qwen3-8B layer and the two GEMV shapes: microseconds per launch
//! for 1..=4 vectors, the weight bytes per second that makes, and what a batch costs
//! against one vector (time of n vectors / time of one; n is the ideal speed-up).
//! The weights rotate over enough copies to miss the L2 cache; the copy bandwidth is
//! measured in the same run.
//!
//! Run: `cargo run --release -p favlo-runtime --features cuda --example cuda_gemv_batch_bench`
//! (`FAVLO_BENCH_PDL=1`: launches chained under programmatic dependent launch, as in
//! decode; `FAVLO_BENCH_BATCH_WARPS=2,4,8`: every batched row again at those warps per
//! block).

use favlo_mx::{ElementFormat, MxLayout, MxView};
use favlo_runtime::cuda::bench::format_name;
use favlo_runtime::cuda::{
    CudaContext, GEMV_BATCH_MAX, GemvMma, MxTiled, XPrep, copy_bandwidth_gbps, tile_mx, time_ms,
};
use favlo_runtime::ledger::{Owner, SpanKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::open(0, None)?;
    let owner = Owner::mint("gemv-batch-bench");
    let mut g = GemvMma::load(&ctx)?;
    g.pdl = std::env::var("FAVLO_BENCH_PDL").is_ok_and(|v| v == "1");
    // FAVLO_BENCH_BATCH_WARPS=2,4,8: each batched row again at these warps per block.
    let sweep: Vec<usize> = std::env::var("FAVLO_BENCH_BATCH_WARPS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|w| (1..=8).contains(w))
        .collect();
    let copy = copy_bandwidth_gbps(&ctx, 1 << 30, 20)?;
    println!(
        "{} ({}), copy {copy:.0} GB/s, PDL {}",
        ctx.name(),
        ctx.arch(),
        g.pdl
    );
    println!(
        "{:<6} {:>14} {:>2} {:>9} {:>9} {:>7} {:>12} warps",
        "format", "shape", "n", "µs", "GB/s", "% copy", "time / n=1"
    );
    let shapes = [
        ("q|k|v", 6144, 4096),
        ("o", 4096, 4096),
        ("gate|up", 24576, 4096),
        ("down", 4096, 12288),
        ("8192²", 8192, 8192),
        ("4096×14336", 4096, 14336),
    ];
    for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
        for (name, rows, cols) in shapes {
            let layout = MxLayout { format, rows, cols };
            // A deterministic pattern of codes and moderate scales: the speed does not
            // depend on the values.
            let mut bytes = vec![0u8; layout.total_bytes()];
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
            }
            for s in &mut bytes[layout.scale_offset()..] {
                *s = 120 + (*s % 8);
            }
            let host = tile_mx(MxView::new(layout, &bytes)?);
            let copies = (512usize << 20).div_ceil(layout.total_bytes()).clamp(2, 64);
            let ws = (0..copies)
                .map(|_| MxTiled::upload(&ctx, &owner, &host))
                .collect::<Result<Vec<_>, _>>()?;
            let pc = layout.padded_cols();
            let x: Vec<f32> = (0..pc).map(|i| ((i % 97) as f32 - 48.0) / 50.0).collect();
            let xd = ctx.upload(&owner, SpanKind::Scratch, &x)?;
            let mut preps = Vec::new();
            for _ in 0..GEMV_BATCH_MAX {
                let mut p = XPrep::new(&ctx, &owner, pc)?;
                g.prep_x(&xd, pc, &mut p)?;
                preps.push(p);
            }
            let mut ys = (0..GEMV_BATCH_MAX)
                .map(|_| ctx.alloc::<f32>(&owner, SpanKind::Scratch, rows))
                .collect::<Result<Vec<_>, _>>()?;
            let mut one = 0.0;
            for n in 1..=GEMV_BATCH_MAX {
                let xs: Vec<&XPrep> = preps[..n].iter().collect();
                // The batch kernels' own warps per block (None), then each one asked for.
                let choices: Vec<Option<usize>> = std::iter::once(None)
                    .chain(sweep.iter().filter(|_| n > 1).map(|&w| Some(w)))
                    .collect();
                for bw in choices {
                    g.batch_warps = bw;
                    let ms = time_ms(&ctx, 2, 15, || {
                        ws.iter().try_for_each(|w| {
                            let mut yr: Vec<_> = ys[..n].iter_mut().collect();
                            g.gemv_batch(w, &xs, &mut yr, false)
                        })
                    })? / copies as f64;
                    if n == 1 {
                        one = ms;
                    }
                    let gbs = layout.total_bytes() as f64 / (ms * 1e-3) / 1e9;
                    println!(
                        "{:<6} {:>14} {n:>2} {:>9.2} {gbs:>9.0} {:>6.0}% {:>11.2}× {}",
                        format_name(format),
                        format!("{name} {rows}×{cols}"),
                        ms * 1e3,
                        100.0 * gbs / copy,
                        ms / one,
                        bw.map_or("auto".to_string(), |w| format!("{w} warps"))
                    );
                }
                g.batch_warps = None;
            }
        }
    }
    ctx.synchronize()?;
    Ok(())
}
