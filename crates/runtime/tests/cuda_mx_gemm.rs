//! `MxGemm` (MX weights expanded to bf16, x rows split into bf16 planes, cuBLASLt with
//! f32 accumulation) against the float64 MX linear (`reference::linear`) of the f32 rows,
//! on random non-zero inputs: MXFP8 and MXFP4, K not a multiple of the MX padding
//! (1000, 576) and one that is (4096), 1..70 rows, `y =` and `y +=`.
//!
//! Bounds (max |gpu − ref| / max |ref| per row): 2 planes carry 16 significant bits of
//! each x value (relative error ≤ 2^-17 per value) → 3e-5; 3 planes carry every bit
//! of the x preparation (~22 bits) → 2e-6, the same as the GEMV (`gemv_at`, 2e-5).
//! Without CUDA the device test prints a loud skip and passes (`FAVLO_REQUIRE_CUDA=1`
//! makes a skip fail). Their kernels' NVRTC compile checks (every arch from sm_80) are in `cuda_warm.rs`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{MxGemm, MxTiled, PrefillOps, XPrep, mx_gemm_k, tile_mx};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::rand_vec;

#[test]
fn mx_gemm_matches_f64() {
    let Some(ctx) = common::cuda::open_or_skip("the CUDA MX GEMM test") else {
        return;
    };
    let ops = PrefillOps::load(&ctx).unwrap();
    let owner = Owner::mint("cuda-mx-gemm");
    let mut rng = StdRng::seed_from_u64(29);
    let cases = [
        (ElementFormat::Fp4E2M1, 67usize, 1000usize),
        (ElementFormat::Fp8E4M3, 200, 576),
        (ElementFormat::Fp4E2M1, 384, 4096),
        (ElementFormat::Fp8E4M3, 130, 4096),
    ];
    for terms in [2usize, 3] {
        let bound = if terms == 2 { 3e-5 } else { 2e-6 };
        let mut worst = 0f64;
        for (format, rows, cols) in cases {
            let layout = MxLayout { format, rows, cols };
            let w = rand_vec(&mut rng, rows * cols, 1.0);
            let mut packed = vec![0u8; layout.total_bytes()];
            favlo_mx::pack(&w, layout, ScaleRule::default(), &mut packed).unwrap();
            let view = MxView::new(layout, &packed).unwrap();
            let wd = MxTiled::upload(&ctx, &owner, &tile_mx(view)).unwrap();
            let k = mx_gemm_k(&wd);
            let stride = k.div_ceil(256) * 256 + 256;
            for t in [1usize, 5, 70] {
                let mut g = MxGemm::new(&ctx, &owner, rows * k, t * k, terms).unwrap();
                let x = rand_vec(&mut rng, t * cols, 2.0);
                let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
                let mut prep = XPrep::new(&ctx, &owner, t * stride).unwrap();
                ops.prep_rows(&xd, cols, t, cols, stride, &mut prep)
                    .unwrap();
                for acc in [false, true] {
                    let y0 = rand_vec(&mut rng, t * rows, 1.0);
                    let mut y = ctx.upload(&owner, SpanKind::Scratch, &y0).unwrap();
                    g.run(&wd, &prep, t, stride, &mut y, acc).unwrap();
                    let got = ctx.download(&y).unwrap();
                    for i in 0..t {
                        let xr = &x[i * cols..(i + 1) * cols];
                        let mut want = reference::linear(xr, &WeightRef::Mx(view), None);
                        if acc {
                            for (w, b) in want.iter_mut().zip(&y0[i * rows..]) {
                                *w += *b as f64;
                            }
                        }
                        let max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
                        let err = want
                            .iter()
                            .zip(&got[i * rows..(i + 1) * rows])
                            .fold(0f64, |a, (w, g)| a.max((*g as f64 - w).abs()));
                        let rel = err / max;
                        worst = worst.max(rel);
                        assert!(
                            rel <= bound,
                            "{format:?} {rows}x{cols} t {t} terms {terms} acc {acc} row {i}: {rel:.2e}"
                        );
                    }
                }
            }
        }
        eprintln!(
            "MxGemm with {terms} bf16 planes: worst row error {worst:.2e} (bound {bound:.0e})"
        );
    }
    ctx.synchronize().unwrap();
}
