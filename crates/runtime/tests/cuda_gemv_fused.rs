//! The tensor-core GEMV's fused epilogues (`Epilogue`: the RMSNorm factor applied to the
//! rows, the next RMSNorm's and the SwiGLU's x preparations written by the GEMV that
//! finishes their input) against f64 references, for every GEMV kernel, with and
//! without programmatic dependent launch, on MXFP4 and MXFP8 weights.
//! Run: `cargo test -p favlo-runtime --features cuda --test cuda_gemv_fused`.
//!
//! Without CUDA the test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`. Each kernel's reference is computed from the device's own
//! input to it (downloaded), so errors do not compound along the chain. Tolerances:
//! GEMV rows max|y−ref|/max|ref| ≤ 1e-5 (as the plain GEMV: x keeps ~22 bits per
//! 32-value block, f32 accumulation); x preparations per 32-value block max|err| /
//! block max ≤ 1e-5 (the split keeps ~22 bits; the inputs carry the GEMV's f32
//! rounding); partial sums of squares relative ≤ 1e-5.
mod common;

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{
    CudaContext, CudaError, DeviceBuffer, EpiOut, Epilogue, GemvKernel, GemvMma, MxTiled, NormIn,
    XPrep, tile_mx,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{blockwise, rand_vec, rel_err};

const EPS: f32 = 1e-6;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A random MX matrix (rows scaled by 2^-6..2^6), its packed bytes and its upload.
struct Mat {
    layout: MxLayout,
    packed: Vec<u8>,
    dev: MxTiled,
}

impl Mat {
    fn new(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        rng: &mut StdRng,
        format: ElementFormat,
        rows: usize,
        cols: usize,
    ) -> R<Mat> {
        let (layout, packed) = common::packed_rows(rng, format, rows, cols);
        let dev = MxTiled::upload(ctx, owner, &tile_mx(MxView::new(layout, &packed)?))?;
        Ok(Mat {
            layout,
            packed,
            dev,
        })
    }

    /// W·x in f64.
    fn times(&self, x: &[f32]) -> R<Vec<f64>> {
        let view = MxView::new(self.layout, &self.packed)?;
        Ok(reference::linear(x, &WeightRef::Mx(view), None))
    }
}

/// A norm consumer's input over the partials `parts` of a `dim`-value vector.
fn norm_in(parts: &DeviceBuffer<f32>, dim: usize) -> NormIn<'_> {
    NormIn {
        parts,
        dim,
        eps: EPS,
    }
}

/// Sums of squares per 32 values, f64.
fn block_squares(h: &[f32]) -> Vec<f64> {
    h.chunks(32)
        .map(|c| c.iter().map(|v| f64::from(*v) * f64::from(*v)).sum())
        .collect()
}

/// RMSNorm(h)·w as f32 (the input of a consumer's reference).
fn normed(h: &[f32], w: &[f32]) -> Vec<f32> {
    reference::rms_norm(h, w, EPS)
        .iter()
        .map(|v| *v as f32)
        .collect()
}

fn check(what: &str, e: f64, tol: f64) {
    eprintln!("{what}: {e:.3e}");
    assert!(e <= tol, "{what}: {e:.3e} > {tol:.0e}");
}

/// A norm producer's outputs for the first `h.len()` values: the x preparation of h·w
/// (per block ≤ 1e-6 of the block max) and the partial sums of squares of h (≤ `tol`).
fn check_norm_prep(
    ctx: &CudaContext,
    what: &str,
    prep: &XPrep,
    parts: &DeviceBuffer<f32>,
    (h, w): (&[f32], &[f32]),
    tol: f64,
) -> R {
    let hw: Vec<f64> = h.iter().zip(w).map(|(a, b)| f64::from(a * b)).collect();
    let e = blockwise(&prep.values(ctx, h.len())?, &hw);
    check(&format!("{what} x·w"), e, 1e-6);
    let e = rel_err(&ctx.download(parts)?, &block_squares(h));
    check(&format!("{what} partials"), e, tol);
    Ok(())
}

/// One decoder layer's worth of fused GEMVs, (hidden d, intermediate ff), on `g` as
/// configured (kernel, PDL).
#[allow(clippy::too_many_arguments)]
fn chain(
    ctx: &Arc<CudaContext>,
    g: &GemvMma,
    owner: &Owner,
    rng: &mut StdRng,
    mats: &[Mat; 3],
    d: usize,
    ff: usize,
    tag: &str,
) -> R {
    let [wq, wgu, wo] = mats;
    let up = |v: &[f32]| ctx.upload(owner, SpanKind::Scratch, v);
    let pd = wq.layout.padded_cols().max(wo.layout.padded_cols());
    let h0 = rand_vec(rng, d, 3.0);
    let (n1, n2) = (rand_vec(rng, d, 1.5), rand_vec(rng, d, 1.5));
    let (n1d, n2d) = (up(&n1)?, up(&n2)?);
    let mut hd = up(&h0)?;
    let mut prep_n = XPrep::new(ctx, owner, pd)?;
    let mut ss = up(&vec![f32::NAN; d / 32])?;

    // The first norm's producer kernel.
    g.norm_parts_prep(&hd, &n1d, &mut prep_n, &mut ss)?;
    let what = format!("{tag} norm_parts_prep");
    check_norm_prep(ctx, &what, &prep_n, &ss, (&h0, &n1), 1e-6)?;

    // A consumer: q = Wq·RMSNorm(h0).
    let mut yq = up(&vec![f32::NAN; wq.layout.rows])?;
    let epi = Epilogue::normed(norm_in(&ss, d));
    g.gemv_fused(&wq.dev, &prep_n, &mut yq, epi)?;
    check(
        &format!("{tag} consumer rows"),
        rel_err(&ctx.download(&yq)?, &wq.times(&normed(&h0, &n1))?),
        1e-5,
    );

    // A residual producer: h = h0 + Wo·x, preparing RMSNorm(h) with weight n2.
    let x = rand_vec(rng, wo.layout.cols, 2.0);
    let mut xp = x.clone();
    xp.resize(wo.layout.padded_cols(), 0.0);
    let mut prep_x = XPrep::new(ctx, owner, wo.layout.padded_cols())?;
    g.prep_x(&up(&xp)?, wo.layout.padded_cols(), &mut prep_x)?;
    let epi = Epilogue::residual_norm(&n2d, &mut prep_n, &mut ss);
    g.gemv_fused(&wo.dev, &prep_x, &mut hd, epi)?;
    let h1 = ctx.download(&hd)?;
    let want: Vec<f64> = wo
        .times(&x)?
        .iter()
        .zip(&h0)
        .map(|(a, b)| a + f64::from(*b))
        .collect();
    check(&format!("{tag} producer rows"), rel_err(&h1, &want), 1e-5);
    let what = format!("{tag} producer");
    check_norm_prep(ctx, &what, &prep_n, &ss, (&h1, &n2), 1e-5)?;

    // Consumer + SwiGLU producer: gate|up = Wgu·RMSNorm(h1), then silu(gate)·up, twice
    // (the pair counters must be back at zero after a call).
    let mut gu = up(&vec![f32::NAN; 2 * ff])?;
    let mut prep_f = XPrep::new(ctx, owner, ff)?;
    let mut pairs = ctx.alloc::<u32>(owner, SpanKind::Scratch, ff / 32)?;
    let mut first = None;
    for round in 0..2 {
        let epi = Epilogue::normed_swiglu(norm_in(&ss, d), &mut prep_f, &mut pairs);
        g.gemv_fused(&wgu.dev, &prep_n, &mut gu, epi)?;
        let got = ctx.download(&gu)?;
        let act = prep_f.values(ctx, ff)?;
        assert_eq!(ctx.download(&pairs)?, vec![0u32; ff / 32]);
        match &first {
            None => {
                check(
                    &format!("{tag} SwiGLU producer rows"),
                    rel_err(&got, &wgu.times(&normed(&h1, &n2))?),
                    1e-5,
                );
                let want: Vec<f64> = (0..ff)
                    .map(|i| reference::silu(f64::from(got[i])) * f64::from(got[ff + i]))
                    .collect();
                check(
                    &format!("{tag} SwiGLU producer x"),
                    blockwise(&act, &want),
                    1e-5,
                );
                first = Some((got, act));
            }
            Some(f) => assert!(
                f.0 == got && f.1 == act,
                "{tag}: round {round} differs from round 0"
            ),
        }
    }
    Ok(())
}

#[test]
fn fused_epilogues_match_reference() -> R {
    let Some(ctx) = common::cuda::open_or_skip("the fused GEMV epilogue test") else {
        return Ok(());
    };
    let mut g = GemvMma::load(&ctx)?;
    let hopper = ctx.compute_capability().0 >= 9;
    let mut rng = StdRng::seed_from_u64(5);
    let owner = Owner::mint("cuda-test-gemv-fused");
    // SmolLM2's hidden (576: FP4 pads K to 768) and Qwen2.5-0.5B's (896, ff 4864).
    for (d, ff, q) in [(576, 1536, 960), (896, 4864, 1152)] {
        for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
            let mats = [
                Mat::new(&ctx, &owner, &mut rng, format, q, d)?,
                Mat::new(&ctx, &owner, &mut rng, format, 2 * ff, d)?,
                Mat::new(&ctx, &owner, &mut rng, format, d, q)?,
            ];
            for kernel in [
                GemvKernel::Regs,
                GemvKernel::PingPong,
                GemvKernel::Ring,
                GemvKernel::Tma,
            ] {
                if kernel == GemvKernel::Tma && !hopper {
                    continue;
                }
                for pdl in [false, true] {
                    if pdl && !hopper {
                        continue;
                    }
                    g.kernel = kernel;
                    g.pdl = pdl;
                    let tag = format!("{format:?} d {d} ff {ff} {kernel:?} pdl {pdl}");
                    chain(&ctx, &g, &owner, &mut rng, &mats, d, ff, &tag)?;
                }
            }
        }
    }
    ctx.sweep(&owner)?;
    Ok(())
}

/// Shapes a fused epilogue cannot serve are refused before launch.
#[test]
fn fused_epilogue_shape_errors() -> R {
    let Some(ctx) = common::cuda::open_or_skip("the fused GEMV shape test") else {
        return Ok(());
    };
    let g = GemvMma::load(&ctx)?;
    let mut rng = StdRng::seed_from_u64(6);
    let owner = Owner::mint("cuda-test-gemv-fused-shapes");
    let fp4 = ElementFormat::Fp4E2M1;
    // 100 rows: not whole row tiles for a norm producer, nor gate|up halves of 32s.
    let odd = Mat::new(&ctx, &owner, &mut rng, fp4, 100, 256)?;
    let x = XPrep::new(&ctx, &owner, 256)?;
    let mut y = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 100)?;
    let nw = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 100)?;
    let mut prep = XPrep::new(&ctx, &owner, 256)?;
    let mut parts = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 8)?;
    let mut pairs = ctx.alloc::<u32>(&owner, SpanKind::Scratch, 8)?;
    let shape_err = |r: Result<(), CudaError>| match r {
        Err(e @ CudaError::Shape { .. }) => eprintln!("refused: {e}"),
        other => panic!("expected a shape error, got {other:?}"),
    };
    shape_err(g.gemv_fused(
        &odd.dev,
        &x,
        &mut y,
        Epilogue::residual_norm(&nw, &mut prep, &mut parts),
    ));
    shape_err(g.gemv_fused(
        &odd.dev,
        &x,
        &mut y,
        Epilogue {
            accumulate: false,
            norm_in: None,
            out: EpiOut::Swiglu {
                prep: &mut prep,
                pairs: &mut pairs,
            },
        },
    ));
    // A norm over 512 values for a matrix of 256 columns.
    shape_err(g.gemv_fused(&odd.dev, &x, &mut y, Epilogue::normed(norm_in(&parts, 512))));
    drop((odd, x, y, nw, prep, parts, pairs));
    ctx.sweep(&owner)?;
    Ok(())
}
