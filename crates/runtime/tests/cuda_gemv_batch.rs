//! The batched MX GEMV (`GemvMma::gemv_batch`: y_b = W·x_b for 2..=4 vectors in one
//! launch) against f64 references and against the batch-1 GEMV of each vector, on
//! MXFP4 and MXFP8 weights, plain and accumulating, with and without programmatic
//! dependent launch.
//! Run: `cargo test -p favlo-runtime --features cuda --test cuda_gemv_batch`.
//!
//! Without CUDA the test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`. Tolerances: rows max|y−ref|/max|ref| ≤ 1e-5 against f64 (as
//! the batch-1 GEMV: x keeps ~22 bits per 32-value block, f32 accumulation); against
//! the batch-1 GEMV ≤ 1e-6 (the same per-warp sums, only the sum over a block's warps
//! may run over fewer warps).
mod common;

use favlo_mx::{ElementFormat, MxView};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{CudaError, GEMV_BATCH_MAX, GemvMma, MxTiled, XPrep, tile_mx};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{rand_vec, rel_err};

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn check(what: &str, e: f64, tol: f64) {
    eprintln!("{what}: {e:.3e}");
    assert!(e <= tol, "{what}: {e:.3e} > {tol:.0e}");
}

#[test]
fn batched_gemv_matches_reference_and_batch_one() -> R {
    let Some(ctx) = common::cuda::open_or_skip("the batched GEMV test") else {
        return Ok(());
    };
    let mut g = GemvMma::load(&ctx)?;
    let hopper = ctx.compute_capability().0 >= 9;
    let mut rng = StdRng::seed_from_u64(11);
    let owner = Owner::mint("cuda-test-gemv-batch");
    let up = |v: &[f32]| ctx.upload(&owner, SpanKind::Scratch, v);
    // Odd rows (a partial last tile), K padded past the row, one chunk per row, and
    // the Qwen3-8B decode shapes' widths.
    for (rows, cols) in [
        (32, 256),
        (100, 1000),
        (1024, 128),
        (4096, 4096),
        (640, 12288),
    ] {
        for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
            let (layout, packed) = common::packed_rows(&mut rng, format, rows, cols);
            let view = MxView::new(layout, &packed)?;
            let w = MxTiled::upload(&ctx, &owner, &tile_mx(view))?;
            let pc = layout.padded_cols();
            let mut xs = Vec::new();
            let mut preps = Vec::new();
            for _ in 0..GEMV_BATCH_MAX {
                let x = rand_vec(&mut rng, cols, 2.0);
                let mut xp = x.clone();
                xp.resize(pc, 0.0);
                let mut prep = XPrep::new(&ctx, &owner, pc)?;
                g.prep_x(&up(&xp)?, pc, &mut prep)?;
                xs.push(x);
                preps.push(prep);
            }
            let want: Vec<Vec<f64>> = xs
                .iter()
                .map(|x| reference::linear(x, &WeightRef::Mx(view), None))
                .collect();
            let y0 = rand_vec(&mut rng, rows, 1.0);
            for pdl in [false, true] {
                if pdl && !hopper {
                    continue;
                }
                g.pdl = pdl;
                // Batch 1 of each vector, for the comparison.
                let mut single = Vec::new();
                for p in &preps {
                    let mut y = up(&vec![f32::NAN; rows])?;
                    g.gemv(&w, p, &mut y, false)?;
                    single.push(ctx.download(&y)?);
                }
                for n in 2..=GEMV_BATCH_MAX {
                    for accumulate in [false, true] {
                        let init: Vec<f32> = if accumulate {
                            y0.clone()
                        } else {
                            vec![f32::NAN; rows]
                        };
                        let mut ys = (0..n).map(|_| up(&init)).collect::<Result<Vec<_>, _>>()?;
                        let x_refs: Vec<&XPrep> = preps[..n].iter().collect();
                        let mut y_refs: Vec<_> = ys.iter_mut().collect();
                        g.gemv_batch(&w, &x_refs, &mut y_refs, accumulate)?;
                        for (b, y) in ys.iter().enumerate() {
                            let got = ctx.download(y)?;
                            let tag = format!(
                                "{format:?} {rows}x{cols} pdl {pdl} batch {n} acc {accumulate} vector {b}"
                            );
                            let base: Vec<f64> = if accumulate {
                                y0.iter().map(|v| f64::from(*v)).collect()
                            } else {
                                vec![0.0; rows]
                            };
                            let r: Vec<f64> =
                                want[b].iter().zip(&base).map(|(a, c)| a + c).collect();
                            check(&format!("{tag} vs f64"), rel_err(&got, &r), 1e-5);
                            let s: Vec<f64> = single[b]
                                .iter()
                                .zip(&base)
                                .map(|(a, c)| f64::from(*a) + c)
                                .collect();
                            check(&format!("{tag} vs batch 1"), rel_err(&got, &s), 1e-6);
                        }
                    }
                }
            }
        }
    }
    ctx.sweep(&owner)?;
    Ok(())
}

/// Mismatched or oversized batches and short buffers are refused before launch.
#[test]
fn batched_gemv_shape_errors() -> R {
    let Some(ctx) = common::cuda::open_or_skip("the batched GEMV shape test") else {
        return Ok(());
    };
    let g = GemvMma::load(&ctx)?;
    let mut rng = StdRng::seed_from_u64(12);
    let owner = Owner::mint("cuda-test-gemv-batch-shapes");
    let (layout, packed) = common::packed_rows(&mut rng, ElementFormat::Fp4E2M1, 64, 512);
    let w = MxTiled::upload(&ctx, &owner, &tile_mx(MxView::new(layout, &packed)?))?;
    let preps = (0..5)
        .map(|_| XPrep::new(&ctx, &owner, 512))
        .collect::<Result<Vec<_>, _>>()?;
    let short = XPrep::new(&ctx, &owner, 256)?;
    let mut ys = (0..5)
        .map(|_| ctx.alloc::<f32>(&owner, SpanKind::Scratch, 64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut small = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 63)?;
    let refused = |r: Result<(), CudaError>| match r {
        Err(e @ CudaError::Shape { .. }) => eprintln!("refused: {e}"),
        other => panic!("expected a shape error, got {other:?}"),
    };
    let five: Vec<&XPrep> = preps.iter().collect();
    refused(g.gemv_batch(&w, &five, &mut ys.iter_mut().collect::<Vec<_>>(), false));
    refused(g.gemv_batch(
        &w,
        &five[..2],
        &mut ys[..3].iter_mut().collect::<Vec<_>>(),
        false,
    ));
    refused(g.gemv_batch(&w, &[], &mut [], false));
    refused(g.gemv_batch(
        &w,
        &[&preps[0], &short],
        &mut ys[..2].iter_mut().collect::<Vec<_>>(),
        false,
    ));
    let (a, _) = ys.split_at_mut(1);
    refused(g.gemv_batch(&w, &five[..2], &mut [&mut a[0], &mut small], false));
    drop(ys);
    drop(small);
    drop(preps);
    drop(short);
    drop(w);
    ctx.sweep(&owner)?;
    Ok(())
}
