//! The image-generator kernels (`kernels/conv2d.cu`, `favlo_runtime::cuda::Conv2dOps`)
//! against float64 scalar references (`cpu::conv::reference` and the textbook formulas
//! below) on random non-zero inputs. Bounds (each printed with the measured value):
//! - transposed convolution at the five DCGAN geometries (K4 s1 p0 from 1×1; K4 s2 p1
//!   up to 64×64) and odd ones (K3, K5 s3, stride 1 with padding, non-square inputs,
//!   channel counts not a multiple of the kernel's 4 channels per thread), with the
//!   input channels split over 1, 2, 5 and 8 threads per output: max |gpu − ref| / max
//!   |ref| ≤ 1e-5 (as the CPU kernel's test); every output written (the buffer starts
//!   as NaN) and nothing past the batch touched;
//! - the fused epilogue (affine + none / ReLU / LeakyReLU(0.2) / tanh) equals, bit for
//!   bit, the plain convolution followed by `chan_affine_act` (same f32 operations);
//! - `chan_affine_act` vs f64 `act(x·a + b)` of the same f32 inputs: |gpu − ref| ≤
//!   1e-6 · max(1, |ref|) (one rounding of the product and the sum; tanhf ≤ 2 ulp); with
//!   affine + ReLU it equals the CPU's `batch_norm` + `relu` bit for bit;
//! - `bn_fold` vs the f64 fold: relative error ≤ 1e-6, and bit for bit the CPU's f32
//!   formula `a = γ / √(var + eps)`, `b = β − mean·a`.
//!
//! Without CUDA each device test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`; the NVRTC compile check runs wherever libnvrtc loads.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_runtime::cpu::conv::reference;
use favlo_runtime::cpu::{self, BatchNorm, ConvTranspose2d};
use favlo_runtime::cuda::{
    CONV_SPLIT_MAX, ChannelAffine, Conv2dOps, ConvAct, CudaContext, DeviceBuffer, compile_cubin,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{rand_vec, rel_err};

fn setup(what: &str) -> Option<(Arc<CudaContext>, Conv2dOps, Owner)> {
    let ctx = common::cuda::open_or_skip(what)?;
    let ops = Conv2dOps::load(&ctx).unwrap_or_else(|e| panic!("{e}"));
    Some((ctx, ops, Owner::mint(what)))
}

fn up(ctx: &CudaContext, owner: &Owner, v: &[f32]) -> DeviceBuffer<f32> {
    ctx.upload(owner, SpanKind::Scratch, v).unwrap()
}

fn geo(
    cin: usize,
    cout: usize,
    k: usize,
    s: usize,
    p: usize,
    h: usize,
    w: usize,
) -> ConvTranspose2d {
    ConvTranspose2d {
        in_channels: cin,
        out_channels: cout,
        kernel: k,
        stride: s,
        padding: p,
        in_h: h,
        in_w: w,
    }
}

/// (geometry, batch): the DCGAN generator's layers and odd shapes.
fn geometries() -> Vec<(ConvTranspose2d, usize)> {
    vec![
        (geo(100, 512, 4, 1, 0, 1, 1), 3),
        (geo(512, 256, 4, 2, 1, 4, 4), 2),
        (geo(256, 128, 4, 2, 1, 8, 8), 2),
        (geo(128, 64, 4, 2, 1, 16, 16), 1),
        (geo(64, 3, 4, 2, 1, 32, 32), 2),
        (geo(7, 5, 3, 2, 1, 5, 6), 3),
        (geo(6, 4, 3, 1, 1, 7, 5), 1),
        (geo(5, 3, 5, 3, 2, 4, 3), 2),
        (geo(3, 9, 4, 2, 0, 2, 7), 2),
        (geo(1, 2, 2, 2, 0, 3, 3), 1),
    ]
}

/// Folded batch-norm values as the CPU computes them.
fn fold_f32(w: &[f32], b: &[f32], m: &[f32], v: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let a: Vec<f32> = w.iter().zip(v).map(|(w, v)| w / (v + eps).sqrt()).collect();
    let s = b
        .iter()
        .zip(m)
        .zip(&a)
        .map(|((b, m), a)| b - m * a)
        .collect();
    (a, s)
}

fn act64(v: f64, act: ConvAct) -> f64 {
    match act {
        ConvAct::None => v,
        ConvAct::Relu => reference::relu(v),
        ConvAct::LeakyRelu(s) => {
            if v > 0.0 {
                v
            } else {
                v * f64::from(s)
            }
        }
        ConvAct::Tanh => reference::tanh(v),
    }
}

#[test]
fn conv2d_kernels_compile_with_nvrtc_for_sm90a() {
    // SAFETY: only tries `dlopen`.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("\n**** SKIPPED: libnvrtc not found; NVRTC compile check did not run ****\n");
        return;
    }
    let cubin =
        compile_cubin("conv2d", Conv2dOps::source(), "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
}

#[test]
fn conv_transpose2d_matches_f64_reference() {
    let Some((ctx, ops, owner)) = setup("conv_transpose2d vs f64") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(11);
    let mut worst = 0f64;
    for (g, batch) in geometries() {
        let x = rand_vec(&mut rng, batch * g.in_len(), 1.0);
        let w = rand_vec(&mut rng, g.weight_len(), 0.1);
        let n = batch * g.out_len();
        let (dx, dw) = (up(&ctx, &owner, &x), up(&ctx, &owner, &w));
        let want = reference::conv_transpose2d(&x, &w, g, batch);
        let auto = Conv2dOps::auto_splits(g);
        assert!((1..=CONV_SPLIT_MAX).contains(&auto));
        for splits in [1, 2, 5, CONV_SPLIT_MAX] {
            // One extra image of NaN past the batch: it must stay untouched.
            let mut out = up(&ctx, &owner, &vec![f32::NAN; n + g.out_len()]);
            ops.conv_transpose2d_split(&dx, &dw, g, batch, &mut out, None, ConvAct::None, splits)
                .unwrap();
            let got = ctx.download(&out).unwrap();
            assert!(
                got[n..].iter().all(|v| v.is_nan()),
                "{g:?} splits {splits}: wrote past the batch"
            );
            assert!(
                got[..n].iter().all(|v| v.is_finite()),
                "{g:?} splits {splits}: output not written"
            );
            let e = rel_err(&got[..n], &want);
            worst = worst.max(e);
            assert!(
                e <= 1e-5,
                "{g:?} batch {batch} splits {splits}: rel err {e}"
            );
        }
    }
    eprintln!("conv_transpose2d: max rel err {worst:.2e} (bound 1e-5)");
}

#[test]
fn fused_epilogue_equals_conv_then_affine_act() {
    let Some((ctx, ops, owner)) = setup("conv_transpose2d fused epilogue") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(12);
    let acts = [
        ConvAct::None,
        ConvAct::Relu,
        ConvAct::LeakyRelu(0.2),
        ConvAct::Tanh,
    ];
    for (i, (g, batch)) in geometries().into_iter().enumerate() {
        let act = acts[i % acts.len()];
        let x = rand_vec(&mut rng, batch * g.in_len(), 1.0);
        let w = rand_vec(&mut rng, g.weight_len(), 0.1);
        let c = g.out_channels;
        let scale = rand_vec(&mut rng, c, 2.0);
        let shift = rand_vec(&mut rng, c, 0.5);
        let (dx, dw) = (up(&ctx, &owner, &x), up(&ctx, &owner, &w));
        let (ds, dh) = (up(&ctx, &owner, &scale), up(&ctx, &owner, &shift));
        let aff = ChannelAffine {
            scale: &ds,
            shift: &dh,
        };
        let n = batch * g.out_len();
        let mut fused = up(&ctx, &owner, &vec![f32::NAN; n]);
        ops.conv_transpose2d(&dx, &dw, g, batch, &mut fused, Some(aff), act)
            .unwrap();
        let mut plain = up(&ctx, &owner, &vec![f32::NAN; n]);
        ops.conv_transpose2d(&dx, &dw, g, batch, &mut plain, None, ConvAct::None)
            .unwrap();
        let spatial = g.out_h() * g.out_w();
        ops.channel_affine_act(&mut plain, batch, c, spatial, Some(aff), act)
            .unwrap();
        let (f, p) = (ctx.download(&fused).unwrap(), ctx.download(&plain).unwrap());
        assert!(f.iter().all(|v| v.is_finite()), "{g:?}");
        let same = f
            .iter()
            .zip(&p)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count();
        assert_eq!(
            same, n,
            "{g:?} {act:?}: fused differs from conv + affine_act"
        );
    }
}

#[test]
fn channel_affine_act_matches_f64_and_cpu() {
    let Some((ctx, ops, owner)) = setup("chan_affine_act vs f64") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(13);
    let (batch, c, spatial) = (3, 37, 129);
    let x = rand_vec(&mut rng, batch * c * spatial, 4.0);
    let scale = rand_vec(&mut rng, c, 2.0);
    let shift = rand_vec(&mut rng, c, 1.0);
    let (ds, dh) = (up(&ctx, &owner, &scale), up(&ctx, &owner, &shift));
    for act in [
        ConvAct::None,
        ConvAct::Relu,
        ConvAct::LeakyRelu(0.01),
        ConvAct::Tanh,
    ] {
        for affine in [true, false] {
            let mut d = up(&ctx, &owner, &x);
            let aff = affine.then_some(ChannelAffine {
                scale: &ds,
                shift: &dh,
            });
            ops.channel_affine_act(&mut d, batch, c, spatial, aff, act)
                .unwrap();
            let got = ctx.download(&d).unwrap();
            let mut worst = 0f64;
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                let ch = (i / spatial) % c;
                let pre = if affine {
                    f64::from(v) * f64::from(scale[ch]) + f64::from(shift[ch])
                } else {
                    f64::from(v)
                };
                let want = act64(pre, act);
                let e = (f64::from(g) - want).abs() / want.abs().max(1.0);
                worst = worst.max(e);
            }
            eprintln!("chan_affine_act {act:?} affine {affine}: max err {worst:.2e} (bound 1e-6)");
            assert!(worst <= 1e-6, "{act:?} affine {affine}: {worst}");
        }
    }
    // Affine + ReLU equals the CPU's batch_norm + relu bit for bit (same fold, same ops).
    let (w, b) = (rand_vec(&mut rng, c, 1.5), rand_vec(&mut rng, c, 0.3));
    let m = rand_vec(&mut rng, c, 0.3);
    let v: Vec<f32> = (0..c).map(|_| rng.random_range(0.2f32..2.0)).collect();
    let (a, s) = fold_f32(&w, &b, &m, &v, 1e-5);
    let (da, dsh) = (up(&ctx, &owner, &a), up(&ctx, &owner, &s));
    let mut d = up(&ctx, &owner, &x);
    let aff = ChannelAffine {
        scale: &da,
        shift: &dsh,
    };
    ops.channel_affine_act(&mut d, batch, c, spatial, Some(aff), ConvAct::Relu)
        .unwrap();
    let got = ctx.download(&d).unwrap();
    let mut cpu_x = x.clone();
    let bn = BatchNorm {
        weight: &w,
        bias: &b,
        running_mean: &m,
        running_var: &v,
        eps: 1e-5,
    };
    cpu::batch_norm(&mut cpu_x, spatial, bn);
    cpu::relu(&mut cpu_x);
    assert!(
        got.iter()
            .zip(&cpu_x)
            .all(|(g, c)| g.to_bits() == c.to_bits()),
        "affine + ReLU differs from the CPU's batch_norm + relu"
    );
}

#[test]
fn bn_fold_matches_f64_and_cpu_bits() {
    let Some((ctx, ops, owner)) = setup("bn_fold vs f64") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(14);
    let c = 517;
    let (w, b) = (rand_vec(&mut rng, c, 1.5), rand_vec(&mut rng, c, 0.3));
    let m = rand_vec(&mut rng, c, 0.5);
    let v: Vec<f32> = (0..c).map(|_| rng.random_range(1e-3f32..3.0)).collect();
    let eps = 1e-5f32;
    let (dw, db, dm, dv) = (
        up(&ctx, &owner, &w),
        up(&ctx, &owner, &b),
        up(&ctx, &owner, &m),
        up(&ctx, &owner, &v),
    );
    let mut sc = up(&ctx, &owner, &vec![f32::NAN; c]);
    let mut sh = up(&ctx, &owner, &vec![f32::NAN; c]);
    ops.fold_batch_norm(&dw, &db, &dm, &dv, eps, &mut sc, &mut sh)
        .unwrap();
    let (a, s) = (ctx.download(&sc).unwrap(), ctx.download(&sh).unwrap());
    let mut worst = 0f64;
    for i in 0..c {
        let a64 = f64::from(w[i]) / (f64::from(v[i]) + f64::from(eps)).sqrt();
        let s64 = f64::from(b[i]) - f64::from(m[i]) * a64;
        worst = worst.max((f64::from(a[i]) - a64).abs() / a64.abs());
        worst = worst.max((f64::from(s[i]) - s64).abs() / s64.abs().max(a64.abs()));
    }
    eprintln!("bn_fold: max rel err {worst:.2e} (bound 1e-6)");
    assert!(worst <= 1e-6, "{worst}");
    let (ca, cs) = fold_f32(&w, &b, &m, &v, eps);
    assert!(a.iter().zip(&ca).all(|(x, y)| x.to_bits() == y.to_bits()));
    assert!(s.iter().zip(&cs).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn shapes_are_checked() {
    let Some((ctx, ops, owner)) = setup("conv2d shape checks") else {
        return;
    };
    let g = geo(4, 4, 4, 2, 1, 2, 2);
    let x = up(&ctx, &owner, &vec![1.0; g.in_len()]);
    let w = up(&ctx, &owner, &vec![1.0; g.weight_len()]);
    let mut short = up(&ctx, &owner, &vec![0.0; g.out_len() - 1]);
    assert!(
        ops.conv_transpose2d(&x, &w, g, 1, &mut short, None, ConvAct::None)
            .is_err()
    );
    let mut out = up(&ctx, &owner, &vec![0.0; 2 * g.out_len()]);
    // Two images of input expected, one given.
    assert!(
        ops.conv_transpose2d(&x, &w, g, 2, &mut out, None, ConvAct::None)
            .is_err()
    );
    for splits in [0, CONV_SPLIT_MAX + 1] {
        assert!(
            ops.conv_transpose2d_split(&x, &w, g, 1, &mut out, None, ConvAct::None, splits)
                .is_err()
        );
    }
    let three = up(&ctx, &owner, &[1.0; 3]);
    let aff = ChannelAffine {
        scale: &three,
        shift: &three,
    };
    assert!(
        ops.conv_transpose2d(&x, &w, g, 1, &mut out, Some(aff), ConvAct::Relu)
            .is_err()
    );
}
