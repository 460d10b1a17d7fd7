//! The 1-D convolution kernels (`kernels/conv1d.cu`, `favlo_runtime::cuda::Conv1dOps`)
//! against float64 scalar references written here from the definitions, on random
//! non-zero inputs. Bounds (each printed with the measured value):
//! - dense convolution (HiFi-GAN's conv_pre k7, the residual blocks' dilated k3/k5/k7,
//!   conv_post to one channel, odd shapes with channel counts not a multiple of the
//!   kernel's 4 channels per thread, an output shorter than the input) with and without
//!   the fused leaky ReLU, bias, residual and accumulation: max |gpu − ref| / max |ref|
//!   ≤ 1e-5 (as the CPU kernel's test); every output written (the buffer starts as NaN
//!   unless accumulating);
//! - transposed convolution (the ×8 k16 p4 and ×4 k8 p2 upsamplers, stride 1, odd
//!   shapes), with and without the fused activation and bias: the same bound;
//! - tanh vs f64 tanh of the same f32 inputs: |gpu − ref| ≤ 1e-6 · max(1, |ref|).
//!
//! Without CUDA each device test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`; the NVRTC compile check runs wherever libnvrtc loads.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_runtime::cpu::{Conv1d, ConvTranspose1d};
use favlo_runtime::cuda::{Conv1dEpilogue, Conv1dOps, CudaContext, DeviceBuffer, compile_cubin};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{rand_vec, rel_err};

fn setup(what: &str) -> Option<(Arc<CudaContext>, Conv1dOps, Owner)> {
    let ctx = common::cuda::open_or_skip(what)?;
    let ops = Conv1dOps::load(&ctx).unwrap_or_else(|e| panic!("{e}"));
    Some((ctx, ops, Owner::mint(what)))
}

fn up(ctx: &CudaContext, owner: &Owner, v: &[f32]) -> DeviceBuffer<f32> {
    ctx.upload(owner, SpanKind::Scratch, v).unwrap()
}

fn lrelu64(v: f32, slope: Option<f32>) -> f64 {
    let v = v as f64;
    match slope {
        Some(s) if v < 0.0 => v * s as f64,
        _ => v,
    }
}

/// f64 dense convolution of `x[Cin, len]`, weight `[Cout, Cin, K]`, on lrelu(x).
fn conv_ref(
    x: &[f32],
    len: usize,
    w: &[f32],
    b: Option<&[f32]>,
    g: Conv1d,
    slope: Option<f32>,
) -> Vec<f64> {
    let lout = g.out_len(len);
    let mut y = vec![0f64; g.out_channels * lout];
    for co in 0..g.out_channels {
        for t in 0..lout {
            let mut acc = b.map_or(0.0, |b| b[co] as f64);
            for ci in 0..g.in_channels {
                for k in 0..g.kernel {
                    let ti = t as isize - g.padding as isize + (k * g.dilation) as isize;
                    if ti >= 0 && (ti as usize) < len {
                        acc += w[(co * g.in_channels + ci) * g.kernel + k] as f64
                            * lrelu64(x[ci * len + ti as usize], slope);
                    }
                }
            }
            y[co * lout + t] = acc;
        }
    }
    y
}

/// f64 transposed convolution, weight `[Cin, Cout, K]`: input i feeds output
/// `i·s + k − p`.
fn conv_t_ref(
    x: &[f32],
    len: usize,
    w: &[f32],
    b: Option<&[f32]>,
    g: ConvTranspose1d,
    slope: Option<f32>,
) -> Vec<f64> {
    let lout = g.out_len(len);
    let mut y = vec![0f64; g.out_channels * lout];
    for co in 0..g.out_channels {
        let bias = b.map_or(0.0, |b| b[co] as f64);
        y[co * lout..(co + 1) * lout].fill(bias);
    }
    for ci in 0..g.in_channels {
        for i in 0..len {
            let xv = lrelu64(x[ci * len + i], slope);
            for co in 0..g.out_channels {
                for k in 0..g.kernel {
                    let o = (i * g.stride + k) as isize - g.padding as isize;
                    if o >= 0 && (o as usize) < lout {
                        y[co * lout + o as usize] +=
                            w[(ci * g.out_channels + co) * g.kernel + k] as f64 * xv;
                    }
                }
            }
        }
    }
    y
}

fn dense(cin: usize, cout: usize, k: usize, d: usize, p: usize) -> Conv1d {
    Conv1d {
        in_channels: cin,
        out_channels: cout,
        kernel: k,
        dilation: d,
        padding: p,
    }
}

fn transposed(cin: usize, cout: usize, k: usize, s: usize, p: usize) -> ConvTranspose1d {
    ConvTranspose1d {
        in_channels: cin,
        out_channels: cout,
        kernel: k,
        stride: s,
        padding: p,
    }
}

#[test]
fn conv1d_kernels_compile_with_nvrtc_for_sm90a() {
    // SAFETY: only tries `dlopen`.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("\n**** SKIPPED: libnvrtc not found; NVRTC compile check did not run ****\n");
        return;
    }
    let cubin =
        compile_cubin("conv1d", Conv1dOps::source(), "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
}

#[test]
fn conv1d_matches_f64_reference() {
    let Some((ctx, ops, owner)) = setup("conv1d_matches_f64_reference") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0xC0_1D);
    // (geometry, len): conv_pre, the residual blocks' convolutions, conv_post, odd ones.
    let cases = [
        (dense(192, 256, 7, 1, 3), 37),
        (dense(128, 128, 3, 1, 1), 300),
        (dense(64, 64, 5, 6, 12), 257),
        (dense(32, 32, 7, 12, 36), 200),
        (dense(32, 1, 7, 1, 3), 513),
        (dense(5, 7, 3, 2, 1), 19),
        (dense(3, 6, 4, 1, 0), 11),
        (dense(9, 2, 1, 1, 0), 5),
    ];
    let mut worst = 0f64;
    for (g, len) in cases {
        let lout = g.out_len(len);
        let n = g.out_channels * lout;
        let x = rand_vec(&mut rng, g.in_channels * len, 2.0);
        let w = rand_vec(&mut rng, g.weight_len(), 0.2);
        let b = rand_vec(&mut rng, g.out_channels, 0.5);
        let res = rand_vec(&mut rng, n, 1.0);
        let old = rand_vec(&mut rng, n, 1.0);
        let (dx, dw, db, dres) = (
            up(&ctx, &owner, &x),
            up(&ctx, &owner, &w),
            up(&ctx, &owner, &b),
            up(&ctx, &owner, &res),
        );
        // (slope, bias, residual, accumulate)
        for (slope, with_b, with_r, accum) in [
            (None, false, false, false),
            (Some(0.1f32), true, false, false),
            (Some(0.1), true, true, false),
            (Some(0.01), false, true, true),
            (None, true, false, true),
        ] {
            let mut dy = up(
                &ctx,
                &owner,
                &if accum {
                    old.clone()
                } else {
                    vec![f32::NAN; n]
                },
            );
            let epi = Conv1dEpilogue {
                residual: with_r.then_some(&dres),
                accumulate: accum,
            };
            ops.conv1d(&dx, len, &dw, with_b.then_some(&db), g, slope, epi, &mut dy)
                .unwrap();
            let got = ctx.download(&dy).unwrap();
            let mut want = conv_ref(&x, len, &w, with_b.then_some(&b[..]), g, slope);
            for (i, v) in want.iter_mut().enumerate() {
                if with_r {
                    *v += res[i] as f64;
                }
                if accum {
                    *v += old[i] as f64;
                }
            }
            assert!(
                got.iter().all(|v| v.is_finite()),
                "{g:?}: an output was not written"
            );
            let e = rel_err(&got, &want);
            worst = worst.max(e);
            assert!(
                e <= 1e-5,
                "{g:?} len {len} slope {slope:?} b {with_b} r {with_r} acc {accum}: {e:e}"
            );
        }
    }
    println!("conv1d: max rel err {worst:e} (bound 1e-5)");
}

#[test]
fn conv_transpose1d_matches_f64_reference() {
    let Some((ctx, ops, owner)) = setup("conv_transpose1d_matches_f64_reference") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x7_1D);
    let cases = [
        (transposed(256, 128, 16, 8, 4), 23),
        (transposed(128, 64, 16, 8, 4), 40),
        (transposed(64, 32, 8, 4, 2), 97),
        (transposed(7, 5, 3, 2, 1), 13),
        (transposed(6, 3, 3, 1, 1), 9),
        (transposed(3, 9, 5, 3, 0), 4),
    ];
    let mut worst = 0f64;
    for (g, len) in cases {
        let n = g.out_channels * g.out_len(len);
        let x = rand_vec(&mut rng, g.in_channels * len, 2.0);
        let w = rand_vec(&mut rng, g.weight_len(), 0.2);
        let b = rand_vec(&mut rng, g.out_channels, 0.5);
        let (dx, dw, db) = (
            up(&ctx, &owner, &x),
            up(&ctx, &owner, &w),
            up(&ctx, &owner, &b),
        );
        for (slope, with_b) in [(None, false), (Some(0.1f32), true), (Some(0.1), false)] {
            let mut dy = up(&ctx, &owner, &vec![f32::NAN; n + 5]);
            ops.conv_transpose1d(&dx, len, &dw, with_b.then_some(&db), g, slope, &mut dy)
                .unwrap();
            let got = ctx.download(&dy).unwrap();
            assert!(
                got[n..].iter().all(|v| v.is_nan()),
                "{g:?}: wrote past the output"
            );
            let want = conv_t_ref(&x, len, &w, with_b.then_some(&b[..]), g, slope);
            assert!(
                got[..n].iter().all(|v| v.is_finite()),
                "{g:?}: an output was not written"
            );
            let e = rel_err(&got[..n], &want);
            worst = worst.max(e);
            assert!(
                e <= 1e-5,
                "{g:?} len {len} slope {slope:?} bias {with_b}: {e:e}"
            );
        }
    }
    println!("conv_transpose1d: max rel err {worst:e} (bound 1e-5)");
}

#[test]
fn tanh_matches_f64() {
    let Some((ctx, ops, owner)) = setup("tanh_matches_f64") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x7A);
    let x = rand_vec(&mut rng, 10_007, 6.0);
    let mut d = up(&ctx, &owner, &x);
    ops.tanh(&mut d, x.len()).unwrap();
    let got = ctx.download(&d).unwrap();
    let worst = got
        .iter()
        .zip(&x)
        .map(|(g, v)| {
            let r = (*v as f64).tanh();
            (*g as f64 - r).abs() / r.abs().max(1.0)
        })
        .fold(0f64, f64::max);
    println!("tanh: max err {worst:e} (bound 1e-6)");
    assert!(worst <= 1e-6, "{worst:e}");
}

#[test]
fn conv1d_shapes_are_checked() {
    let Some((ctx, ops, owner)) = setup("conv1d_shapes_are_checked") else {
        return;
    };
    let g = dense(4, 4, 3, 1, 1);
    let x = up(&ctx, &owner, &[1.0; 4 * 10]);
    let w = up(&ctx, &owner, &[1.0; 4 * 4 * 3]);
    let mut short = up(&ctx, &owner, &[0.0; 4 * 9]);
    let e = ops.conv1d(
        &x,
        10,
        &w,
        None,
        g,
        None,
        Conv1dEpilogue::default(),
        &mut short,
    );
    assert!(e.is_err());
    let t = transposed(4, 4, 4, 2, 1);
    let e = ops.conv_transpose1d(&x, 10, &w, None, t, None, &mut short);
    assert!(e.is_err());
}
