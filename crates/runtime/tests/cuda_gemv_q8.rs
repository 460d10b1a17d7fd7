//! The MXFP4 GEMV with x as E4M3 terms on Hopper's FP8 tensor cores
//! (`GemvMma::gemv_q8`) against f64 references. Run:
//! `cargo test -p favlo-runtime --features cuda --test cuda_gemv_q8`.
//!
//! Without CUDA the test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`; on a GPU other than Hopper (sm_90a) it checks that the
//! route refuses with a clear error. Bounds, from the format (see gemv_q8.cu):
//! - x's terms: every value within 16^-T of its 32-value block's largest |value| (T = 2
//!   or 4 terms: each E4M3 rounding keeps the residual within 2^-4 of what it rounds).
//! - y: per row |y − W·x| ≤ (16^-T + 2^-11) · Σ|w||x|, with W·x and Σ|w||x| in f64
//!   from the exact MXFP4 weights and the f32 x: x's terms carry 16^-T, and the tensor
//!   core sums a block's products in four wgmma steps with a 13-bit mantissa (≤ 2^-13
//!   of the magnitudes each, so ≤ 2^-11 over a block).
mod common;

use favlo_mx::{MxLayout, MxView};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{CudaError, GemvMma, MxQ8, XPrep8, tile_mx_q8};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The same matrix with every FP4 sign bit cleared: |W|.
fn abs_fp4(layout: MxLayout, packed: &[u8]) -> Vec<u8> {
    let mut out = packed.to_vec();
    out[..layout.scale_offset()]
        .iter_mut()
        .for_each(|b| *b &= 0x77);
    out
}

#[test]
fn q8_gemv_matches_f64_within_the_stated_bound() -> R {
    let Some(ctx) = common::cuda::open_or_skip("the E4M3-route GEMV test") else {
        return Ok(());
    };
    let mma = GemvMma::load(&ctx)?;
    let owner = Owner::mint("cuda-gemv-q8-test");
    let mut rng = StdRng::seed_from_u64(0x9e37);
    if ctx.arch() != "sm_90a" {
        let (layout, packed) =
            common::packed_rows(&mut rng, favlo_mx::ElementFormat::Fp4E2M1, 64, 512);
        let w = MxQ8::upload(&ctx, &owner, &tile_mx_q8(MxView::new(layout, &packed)?)?)?;
        let x = ctx.upload(&owner, SpanKind::Scratch, &vec![0f32; 512])?;
        let mut p = XPrep8::new(&ctx, &owner, 512)?;
        let mut y = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 64)?;
        assert!(matches!(
            mma.prep_x8(&x, 512, &mut p),
            Err(CudaError::Shape { .. })
        ));
        match mma.gemv_q8(&w, &p, &mut y, false, 4) {
            Err(e) => assert!(e.to_string().contains("sm_90a"), "{e}"),
            Ok(()) => panic!("the E4M3 route ran on {}", ctx.arch()),
        }
        eprintln!(
            "not Hopper ({}): the E4M3 route refuses as it should",
            ctx.arch()
        );
        return Ok(());
    }
    // (rows, cols): ragged rows and columns, one block of warpgroups, and a K split
    // across blocks (4096 rows: 64 tiles, partial sums added atomically).
    for &(rows, cols) in &[
        (64, 512),
        (100, 1000),
        (300, 4096),
        (4096, 4096),
        (96, 14336),
    ] {
        let (layout, packed) =
            common::packed_rows(&mut rng, favlo_mx::ElementFormat::Fp4E2M1, rows, cols);
        let view = MxView::new(layout, &packed)?;
        let abs = abs_fp4(layout, &packed);
        let w = MxQ8::upload(&ctx, &owner, &tile_mx_q8(view)?)?;
        let mut xv = common::rand_vec(&mut rng, cols, 1.0);
        // Blocks of very different magnitudes, and a few outliers.
        for (b, blk) in xv.chunks_mut(32).enumerate() {
            let m = 2f32.powi((b % 9) as i32 - 4);
            blk.iter_mut().for_each(|v| *v *= m);
        }
        for i in (0..cols).step_by(97) {
            xv[i] *= 40.0;
        }
        let padded = cols.div_ceil(512) * 512;
        let mut xp = xv.clone();
        xp.resize(padded, 0.0);
        let x = ctx.upload(&owner, SpanKind::Scratch, &xp)?;
        let mut prep = XPrep8::new(&ctx, &owner, cols)?;
        mma.prep_x8(&x, cols, &mut prep)?;
        let want = reference::linear(&xv, &WeightRef::Mx(view), None);
        let xabs: Vec<f32> = xv.iter().map(|v| v.abs()).collect();
        let mag = reference::linear(&xabs, &WeightRef::Mx(MxView::new(layout, &abs)?), None);
        for terms in [2usize, 4] {
            // x's terms against x.
            let xr = prep.values(&ctx, cols, terms)?;
            let mut xerr = 0f64;
            for (bx, br) in xv.chunks(32).zip(xr.chunks(32)) {
                let m = bx.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
                for (v, r) in bx.iter().zip(br) {
                    xerr = xerr.max((f64::from(*v) - r).abs() / m.max(1e-300));
                }
            }
            let xbound = 16f64.powi(-(terms as i32));
            assert!(
                xerr <= xbound,
                "{rows}x{cols} x terms {terms}: {xerr:.2e} > {xbound:.2e}"
            );
            // y = W x, then y += W x over a random y.
            let bound = 16f64.powi(-(terms as i32)) + 2f64.powi(-11);
            let y0 = common::rand_vec(&mut rng, rows, 4.0);
            for accumulate in [false, true] {
                let mut y = ctx.upload(&owner, SpanKind::Scratch, &y0)?;
                mma.gemv_q8(&w, &prep, &mut y, accumulate, terms)?;
                let got = ctx.download(&y)?;
                let (mut worst, mut rel_max) = (0f64, 0f64);
                let wmax = want.iter().fold(0f64, |a, b| a.max(b.abs()));
                for r in 0..rows {
                    let base = if accumulate { f64::from(y0[r]) } else { 0.0 };
                    let e = (f64::from(got[r]) - base - want[r]).abs();
                    assert!(got[r].is_finite(), "{rows}x{cols} row {r}: {}", got[r]);
                    worst = worst.max(e / mag[r].max(1e-300));
                    rel_max = rel_max.max(e / wmax);
                }
                eprintln!(
                    "{rows}x{cols} terms {terms} accumulate {accumulate}: x {xerr:.2e}, y max err / Σ|w||x| {worst:.2e} (bound {bound:.2e}), / max|ref| {rel_max:.2e}"
                );
                assert!(
                    worst <= bound,
                    "{rows}x{cols} terms {terms}: {worst:.2e} > {bound:.2e}"
                );
            }
        }
    }
    drop(mma);
    ctx.sweep(&owner)?;
    Ok(())
}
