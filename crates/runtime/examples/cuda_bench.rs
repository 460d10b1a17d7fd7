//! CUDA GEMV benchmark: MXFP4/MXFP8 at 8192×8192 and 4096×14336 against the
//! device-to-device copy bandwidth measured in the same run.
//!
//! Bytes counted per GEMV: packed data plane + scale plane + x (f32) read; y's write
//! (rows·4 bytes) is left out. Copy bandwidth counts bytes read + written. Each timed
//! repetition runs the GEMV once over each of several copies of the weight whose total
//! is ≥ 512 MB, so the 60 MB L2 cannot hold them (no cache-resident timing). Before
//! timing, the first 64 rows of one copy are checked against the CPU reference.
//!
//! Run: `cargo run --release -p favlo-runtime --features cuda --example cuda_bench`

use favlo_mx::{ElementFormat, MxLayout, MxView};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{
    CudaContext, CudaKernels, GemvDecode, GemvKernel, GemvMma, MxDevice, MxTiled, XPrep,
    copy_bandwidth_gbps, tile_mx, time_ms,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random packed bytes: data codes uniform (FP8 NaN codes 0x7F/0xFF avoided), scales
/// E8M0 in 2^-8..2^6 on the real blocks, zero on padding.
fn random_packed(layout: MxLayout, rng: &mut StdRng) -> Vec<u8> {
    let mut b = vec![0u8; layout.total_bytes()];
    let real_bytes = layout.cols
        * match layout.format {
            ElementFormat::Fp4E2M1 => 1,
            _ => 2,
        }
        / 2;
    for r in 0..layout.rows {
        let row = &mut b[r * layout.data_row_bytes()..][..real_bytes];
        rng.fill(row);
        if layout.format == ElementFormat::Fp8E4M3 {
            row.iter_mut()
                .filter(|v| (**v & 0x7f) == 0x7f)
                .for_each(|v| *v &= 0xfe);
        }
        let s = &mut b[layout.scale_offset() + r * layout.scale_row_bytes()..]
            [..layout.cols.div_ceil(32)];
        s.iter_mut()
            .for_each(|v| *v = rng.random_range(119u8..=133));
    }
    b
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match CudaContext::open(0, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cuda_bench: {e}");
            std::process::exit(2);
        }
    };
    let t0 = std::time::Instant::now();
    let k = CudaKernels::load(&ctx)?;
    let mut mma = GemvMma::load(&ctx)?;
    println!(
        "device cuda:{} {} (sm_{}{}, NVRTC arch {}), ledger budget {:.1} GiB; kernels loaded in {:.0} ms (cache hits {:?})",
        ctx.ordinal(),
        ctx.name(),
        ctx.compute_capability().0,
        ctx.compute_capability().1,
        ctx.arch(),
        ctx.ledger().budget() as f64 / (1u64 << 30) as f64,
        t0.elapsed().as_secs_f64() * 1e3,
        k.cache_hits
    );
    let copy = copy_bandwidth_gbps(&ctx, 1 << 30, 20)?;
    println!("device-to-device copy (1 GiB, read+write): {copy:.0} GB/s");

    let mut rng = StdRng::seed_from_u64(42);
    let mut rows_out = Vec::new();
    for (format, n, kk, full) in [
        (ElementFormat::Fp4E2M1, 8192, 8192, true),
        (ElementFormat::Fp8E4M3, 8192, 8192, true),
        (ElementFormat::Fp4E2M1, 4096, 14336, true),
        (ElementFormat::Fp8E4M3, 4096, 14336, true),
        // The decode GEMVs of a Qwen3-8B-shaped layer: q|k|v, o, gate|up, down.
        (ElementFormat::Fp4E2M1, 6144, 4096, false),
        (ElementFormat::Fp4E2M1, 4096, 4096, false),
        (ElementFormat::Fp4E2M1, 24576, 4096, false),
        (ElementFormat::Fp4E2M1, 4096, 12288, false),
    ]
    .into_iter()
    .take(if std::env::var_os("FAVLO_BENCH_FIRST").is_some() {
        1
    } else {
        usize::MAX
    }) {
        let layout = MxLayout {
            format,
            rows: n,
            cols: kk,
        };
        let host = random_packed(layout, &mut rng);
        let copies = (512usize << 20).div_ceil(layout.total_bytes()).max(2);
        let owner = Owner::mint("cuda-bench-gemv");
        let view = MxView::new(layout, &host)?;
        let ws: Vec<MxDevice> = (0..if full { copies } else { 1 })
            .map(|_| MxDevice::upload(&ctx, &owner, view))
            .collect::<Result<_, _>>()?;
        let x: Vec<f32> = (0..kk).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let xd = ctx.upload(
            &owner,
            SpanKind::Scratch,
            &CudaKernels::padded_x(layout, &x),
        )?;
        let mut yd = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n)?;
        let mut prep = XPrep::new(&ctx, &owner, layout.padded_cols())?;
        let tiled = tile_mx(MxView::new(layout, &host)?);
        let wts: Vec<MxTiled> = (0..copies)
            .map(|_| MxTiled::upload(&ctx, &owner, &tiled))
            .collect::<Result<_, _>>()?;
        mma.prep_x(&xd, layout.padded_cols(), &mut prep)?;

        // Correctness: first 64 rows against the f64 reference; every row against the
        // register-buffer kernel's output (max |diff| / max |y|).
        let sub = MxLayout {
            format,
            rows: 64,
            cols: kk,
        };
        let mut sub_bytes = vec![0u8; sub.total_bytes()];
        sub_bytes[..sub.scale_offset()].copy_from_slice(&host[..sub.scale_offset()]);
        sub_bytes[sub.scale_offset()..]
            .copy_from_slice(&host[layout.scale_offset()..][..64 * layout.scale_row_bytes()]);
        let want = reference::linear(&x, &WeightRef::Mx(MxView::new(sub, &sub_bytes)?), None);
        let max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
        let mut base: Option<Vec<f32>> = None;
        // Variants: Regs; Ring with the chosen (W, D); Ring with other (W, D);
        // the CUDA-core F16x2 GEMV.
        type Variant = Option<(GemvKernel, Option<(usize, usize)>, Option<usize>)>;
        let mut variants: Vec<(String, Variant)> = vec![
            ("Regs".into(), Some((GemvKernel::Regs, None, None))),
            ("Ring auto".into(), Some((GemvKernel::Ring, None, None))),
            ("PingPong".into(), Some((GemvKernel::PingPong, None, None))),
            ("Auto".into(), Some((GemvKernel::Auto, None, None))),
        ];
        let sweep: &[(usize, usize)] = if full {
            &[(8, 2), (16, 2), (4, 3), (8, 3)]
        } else {
            &[(8, 2), (16, 2), (4, 3)]
        };
        for &(w, d) in sweep {
            variants.push((
                format!("Ring {w}x{d}"),
                Some((GemvKernel::Ring, Some((w, d)), None)),
            ));
        }
        for &(w, d) in sweep {
            variants.push((
                format!("Tma {w}x{d}"),
                Some((GemvKernel::Tma, Some((w, d)), None)),
            ));
        }
        for w in [4usize, 16] {
            variants.push((
                format!("PingPong {w} warps"),
                Some((GemvKernel::PingPong, Some((w, 2)), None)),
            ));
        }
        // Ping-pong with the L2 prefetch 2 / 3 steps ahead (probe slot 10 + distance).
        for pd in [2usize, 3] {
            variants.push((
                format!("PingPong L2 prefetch {pd}"),
                Some((GemvKernel::PingPong, None, Some(10 + pd))),
            ));
        }
        if full {
            variants.push((
                "probe Tma 8x3 loads only".into(),
                Some((GemvKernel::Tma, Some((8, 3)), Some(4))),
            ));
            for (m, what) in [(1, "no decode"), (2, "no mma"), (3, "loads only")] {
                variants.push((
                    format!("probe 8x2 {what}"),
                    Some((GemvKernel::Ring, Some((8, 2)), Some(m))),
                ));
            }
        }
        if full {
            variants.push(("F16x2 CUDA-core".into(), None));
        }
        for (name, variant) in variants {
            if let Some((kern, ov, pr)) = variant {
                mma.kernel = kern;
                mma.ring_override = ov;
                mma.pp_prefetch = pr.filter(|m| *m >= 10).map_or(0, |m| (m - 10) as u8);
            }
            let mma = &mma;
            let probe = variant.and_then(|v| v.2);
            let run = |i: usize, yd: &mut _| match (variant, probe) {
                (Some(_), Some(m)) if m >= 10 => mma.gemv(&wts[i], &prep, yd, false),
                (Some(_), Some(m)) => mma.gemv_probe(m, &wts[i], &prep, yd),
                (Some(_), None) => mma.gemv(&wts[i], &prep, yd, false),
                (None, _) => k.gemv_mx_with(&ws[i.min(ws.len() - 1)], &xd, yd, GemvDecode::F16x2),
            };
            if let Err(e) = run(0, &mut yd) {
                println!("| {format:?} {name} | {n}×{kk} | skipped: {e} |");
                continue;
            }
            let got = ctx.download(&yd)?;
            let err = got[..64]
                .iter()
                .zip(&want)
                .fold(0f64, |a, (g, w)| a.max((*g as f64 - w).abs()));
            let rel = err / max;
            let all = match &base {
                None => {
                    base = Some(got.clone());
                    0.0
                }
                Some(b) => {
                    let m = b.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                    b.iter()
                        .zip(&got)
                        .fold(0f64, |a, (x, y)| a.max((*x as f64 - *y as f64).abs()))
                        / m
                }
            };
            if probe.is_none_or(|m| m >= 10) {
                assert!(
                    rel <= 1e-5 && all <= 1e-5,
                    "{name}: rel {rel:.2e} all {all:.2e}"
                );
            }

            let ms = time_ms(&ctx, 2, 15, || {
                for i in 0..wts.len() {
                    run(i, &mut yd)?;
                }
                Ok(())
            })? / copies as f64;
            // The same launches over one copy (L2-resident when it fits in the 60 MB L2):
            // the kernel's rate with DRAM out of the way.
            let ms_l2 = time_ms(&ctx, 2, 15, || {
                for _ in 0..wts.len() {
                    run(0, &mut yd)?;
                }
                Ok(())
            })? / copies as f64;
            let bytes = layout.total_bytes() as f64 + (layout.padded_cols() * 4) as f64;
            let gbps = bytes / (ms * 1e-3) / 1e9;
            let line = format!(
                "| {:?} {name} | {n}×{kk} | {:.1} MB | {:.1} µs | {gbps:.0} | {:.0}% | {rel:.1e} / {all:.1e} | {:.1} µs |",
                format,
                bytes / 1e6,
                ms * 1e3,
                100.0 * gbps / copy,
                ms_l2 * 1e3
            );
            println!("{line}");
            rows_out.push(line);
        }
        mma.kernel = GemvKernel::Auto;
        mma.ring_override = None;
        mma.pp_prefetch = 0;
        // The x preparation alone (shared by every GEMV reading the same x).
        let xs: Vec<_> = (0..64)
            .map(|_| {
                ctx.upload(
                    &owner,
                    SpanKind::Scratch,
                    &CudaKernels::padded_x(layout, &x),
                )
            })
            .collect::<Result<_, _>>()?;
        let pms = time_ms(&ctx, 2, 15, || {
            for xv in &xs {
                mma.prep_x(xv, layout.padded_cols(), &mut prep)?;
            }
            Ok(())
        })? / xs.len() as f64;
        let line = format!("| prep_x | {kk} | | {:.2} µs | | | |", pms * 1e3);
        println!("{line}");
        rows_out.push(line);
        drop((ws, wts, xd, yd, prep, xs));
        ctx.sweep(&owner)?;
    }
    println!("\ncopy bandwidth {copy:.0} GB/s");
    println!(
        "| format, kernel | N×K | bytes/GEMV | time | GB/s | % of copy | max rel err: 64 rows vs CPU f64 ref / all rows vs Regs | one copy, back to back (L2) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for l in rows_out {
        println!("{l}");
    }
    Ok(())
}
