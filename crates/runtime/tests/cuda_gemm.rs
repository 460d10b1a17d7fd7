//! The MXFP8 tensor-core GEMM (`favlo_runtime::cuda::GemmMx`) against float64 CPU
//! references on random non-zero inputs.
//! Run: `cargo test -p favlo-runtime --features cuda --test cuda_gemm`.
//!
//! * Activation quantization: R (per row), C (per 128-token tile and 32-value block) and
//!   every code equal a CPU replica of the rule exactly; the quantized values stay within
//!   E4M3's half-ulp (2^-4 relative) of x, plus half the smallest subnormal step.
//! * GEMM (every consumer loop, `GemmKernel::Persistent`, `Wide3`, `Pipelined`, `Serial`; odd and even
//!   numbers of 128-value k blocks): `y = xq · wᵀ` (and `y += …`) against an f64 product of the *same* quantized
//!   activations (decoded from the device) and the favlo-mx decoded weights:
//!   max|y − ref| / max|ref| ≤ 1e-3 (the FP8 tensor cores add the 32 exact products of a
//!   k step with reduced internal precision, then the kernel promotes in f32).
//!
//! * MXFP4 weights (folded exactly into E4M3 codes with one scale per (row, 128 k)) with
//!   grouped activations (one C per (tile, 128 k)): the grouped persistent kernel (2 and
//!   4 stages per call), the grouped `Wide3` loop and the per-step loops, against the
//!   same f64 product, ≤ 1e-3.
//! * Row scales written by the f32-row producers (`PrefillOps::rms_norm_quantize` /
//!   `swiglu_quantize`, the FP8 prefill's path): the same row scales, block scales and
//!   codes, bit for bit, as the producer's rows quantized with the GEMM's own pass, on
//!   ragged row counts, a zero row, grouped and per-32 scales.
//! * Every `TileStore` (per-thread stores; through shared memory and the copy engine,
//!   `y +=` as its reduce-add; 16-byte row stores; the lean epilogue, which must equal
//!   `VectorAdd` bit for bit) on every shape above, and the staged kinds' fallback to
//!   per-thread stores when n is not a multiple of 4 (33×130×256).
//!
//! Without CUDA (or without an sm_90a device) every device test prints a loud SKIPPED
//! line and passes, unless `FAVLO_REQUIRE_CUDA=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cuda::{
    CudaContext, CudaError, GemmActs, GemmKernel, GemmMx, GemmWeights, PrefillOps, TileStore,
    tile_gemm, tile_gemm_swiglu,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

fn skip(reason: &str) -> Option<(Arc<CudaContext>, GemmMx)> {
    if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
        panic!("FAVLO_REQUIRE_CUDA=1 but the GEMM cannot run: {reason}");
    }
    eprintln!("\n**** SKIPPED: {reason}; the CUDA GEMM test did not run ****\n");
    None
}

fn setup() -> Option<(Arc<CudaContext>, GemmMx)> {
    match CudaContext::open(0, None) {
        Ok(ctx) => match GemmMx::load(&ctx) {
            Ok(g) => Some((ctx, g)),
            Err(CudaError::Unavailable { reason }) => skip(&reason),
            Err(e) => panic!("GEMM kernels failed to load: {e}"),
        },
        Err(CudaError::Unavailable { reason }) => skip(&format!("CUDA unavailable ({reason})")),
        Err(e) => panic!("CUDA present but failed to open: {e}"),
    }
}

/// Row `r` scaled by 2^((r % 11) - 5) and column blocks by 2^((c/32 % 5) - 2), so row
/// and block scales differ.
fn rand_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let rm = 2f32.powi((r % 11) as i32 - 5);
        for c in 0..cols {
            let cm = 2f32.powi(((c / 32) % 5) as i32 - 2);
            v.push((rng.random_range(-1.0f32..1.0) + 0.01) * rm * cm);
        }
    }
    v
}

/// Random packed MXFP8 bytes (faster than packing f32 for the big shapes): codes
/// uniform without NaN / inf, scales 2^-10..2^-4 on the real blocks.
fn random_packed(layout: MxLayout, rng: &mut StdRng) -> Vec<u8> {
    let mut b = vec![0u8; layout.total_bytes()];
    for r in 0..layout.rows {
        let n = if layout.format == ElementFormat::Fp4E2M1 {
            layout.cols / 2
        } else {
            layout.cols
        };
        let row = &mut b[r * layout.data_row_bytes()..][..n];
        rng.fill(row);
        for v in row.iter_mut() {
            match layout.format {
                ElementFormat::Fp8E4M3 if (*v & 0x7f) == 0x7f => *v &= 0xfe,
                ElementFormat::Fp8E5M2 if (*v & 0x7c) == 0x7c => *v &= 0xfb,
                _ => {}
            }
        }
        let s = &mut b[layout.scale_offset() + r * layout.scale_row_bytes()..]
            [..layout.cols.div_ceil(32)];
        s.iter_mut()
            .for_each(|v| *v = rng.random_range(117u8..=123));
    }
    b
}

/// The quantization rule on the CPU: (R per row, C per (tile, block), decoded values);
/// `grouped`: C from the whole 128-value k block, repeated in its four slots.
fn cpu_quantize(x: &[f32], m: usize, k: usize, grouped: bool) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let kblocks = k.div_ceil(128);
    let r: Vec<f32> = (0..m)
        .map(|row| {
            let amax = x[row * k..(row + 1) * k]
                .iter()
                .fold(0u32, |a, v| a.max(v.to_bits() & 0x7fff_ffff));
            let e = amax & 0x7f80_0000;
            if e == 0 || e == 0x7f80_0000 {
                1.0
            } else {
                f32::from_bits(e)
            }
        })
        .collect();
    let v: Vec<f32> = (0..m * k).map(|i| x[i] * (1.0 / r[i / k])).collect();
    let tiles = m.div_ceil(128);
    let mut c = vec![0f32; tiles * kblocks * 4];
    for t in 0..tiles {
        for b in 0..kblocks * 4 {
            let mut amax = 0u32;
            let cols = if grouped {
                (b / 4) * 128..((b / 4) * 128 + 128).min(k)
            } else {
                b * 32..(b * 32 + 32).min(k)
            };
            for row in t * 128..(t * 128 + 128).min(m) {
                for col in cols.clone() {
                    amax = amax.max(v[row * k + col].to_bits() & 0x7fff_ffff);
                }
            }
            c[t * kblocks * 4 + b] = if amax == 0 {
                1.0
            } else {
                let mut biased = (amax >> 23) as i32 - 8;
                if amax & 0x7f_ffff > 0x60_0000 {
                    biased += 1;
                }
                f32::from_bits((biased.clamp(1, 254) as u32) << 23)
            };
        }
    }
    let q = (0..m * k)
        .map(|i| {
            let (row, col) = (i / k, i % k);
            let cs = c[(row / 128) * kblocks * 4 + col / 32];
            favlo_mx::decode_fp8_e4m3(favlo_mx::encode_fp8_e4m3(v[i] * (1.0 / cs))) * r[row] * cs
        })
        .collect();
    (r, c, q)
}

#[test]
fn quantize_matches_the_cpu_rule() {
    let Some((ctx, g)) = setup() else { return };
    let owner = Owner::mint("cuda-test-gemm-quant");
    let mut rng = StdRng::seed_from_u64(7);
    for (m, k, grouped) in [
        (1, 128, false),
        (17, 1000, false),
        (300, 4096, false),
        (129, 96, false),
        (17, 1000, true),
        (300, 4096, true),
        (129, 96, true),
    ] {
        let mut x = rand_matrix(&mut rng, m, k);
        // A zero row, a row with one huge value, and a zero block.
        if m > 3 {
            x[k..2 * k].iter_mut().for_each(|v| *v = 0.0);
            x[2 * k + 5] = 3.0e5;
            x[3 * k..3 * k + 32].iter_mut().for_each(|v| *v = 0.0);
        }
        let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
        let mut acts = GemmActs::new(&ctx, &owner, m, k).unwrap().grouped(grouped);
        g.quantize(&xd, m, k, k, &mut acts).unwrap();
        let got = acts.values(&ctx).unwrap();
        let (r, c) = acts.scales(&ctx).unwrap();
        let (wr, wc, wq) = cpu_quantize(&x, m, k, grouped);
        assert_eq!(r, wr, "row scales {m}x{k}");
        assert_eq!(c, wc, "block scales {m}x{k}");
        let mut worst = 0f64;
        for i in 0..m * k {
            assert_eq!(got[i].to_bits(), wq[i].to_bits(), "value {i} of {m}x{k}");
            let (row, col) = (i / k, i % k);
            let step = (r[row] * c[(row / 128) * acts.kblocks * 4 + col / 32]) as f64;
            let err = (got[i] as f64 - x[i] as f64).abs();
            let bound = x[i].abs() as f64 / 16.0 + step * 2f64.powi(-10);
            assert!(
                err <= bound,
                "{m}x{k} [{row},{col}]: {} vs {}",
                got[i],
                x[i]
            );
            // Relative error where the scaled value is in E4M3's normal range.
            if x[i].abs() as f64 >= step * 2f64.powi(-6) {
                worst = worst.max(err / x[i].abs() as f64);
            }
        }
        eprintln!(
            "quantize {m}x{k} (grouped {grouped}): exact vs CPU rule; max rel err vs x (normal range) {worst:.3e}"
        );
        assert!(worst <= 1.0 / 16.0, "{m}x{k}: {worst:.3e}");
        drop((xd, acts));
    }
    ctx.sweep(&owner).unwrap();
}

#[test]
fn producer_row_scales_equal_the_quantization_pass() {
    let Some((ctx, g)) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let owner = Owner::mint("cuda-test-gemm-fused-scales");
    let mut rng = StdRng::seed_from_u64(8);
    for (t, dim, grouped) in [
        (1, 128, false),
        (37, 1000, false),
        (130, 576, true),
        (300, 4096, true),
    ] {
        // RMSNorm of h (a zero row among them) with a weight; SwiGLU of gate|up.
        let mut h = rand_matrix(&mut rng, t, dim);
        if t > 2 {
            h[dim..2 * dim].iter_mut().for_each(|v| *v = 0.0);
        }
        let w: Vec<f32> = (0..dim).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let gu = rand_matrix(&mut rng, t, 2 * dim);
        let hd = ctx.upload(&owner, SpanKind::Scratch, &h).unwrap();
        let wd = ctx.upload(&owner, SpanKind::Scratch, &w).unwrap();
        let gud = ctx.upload(&owner, SpanKind::Scratch, &gu).unwrap();
        let mut rows = ctx
            .alloc::<f32>(&owner, SpanKind::Scratch, t * dim)
            .unwrap();
        for swiglu in [false, true] {
            let what = format!(
                "{} {t}x{dim} grouped {grouped}",
                if swiglu { "swiglu" } else { "rms" }
            );
            let mut fused = GemmActs::new(&ctx, &owner, t, dim)
                .unwrap()
                .grouped(grouped);
            let mut plain = GemmActs::new(&ctx, &owner, t, dim)
                .unwrap()
                .grouped(grouped);
            if swiglu {
                ops.swiglu_quantize(&gud, 2 * dim, t, dim, &mut rows, dim, &g, &mut fused)
                    .unwrap();
                ops.swiglu_rows(&gud, 2 * dim, t, dim, &mut rows, dim)
                    .unwrap();
            } else {
                ops.rms_norm_quantize(&hd, dim, t, &wd, 1e-6, &mut rows, dim, &g, &mut fused)
                    .unwrap();
                ops.rms_norm_rows(&hd, dim, t, &wd, 1e-6, &mut rows, dim)
                    .unwrap();
            }
            g.quantize(&rows, t, dim, dim, &mut plain).unwrap();
            let (fr, fc) = fused.scales(&ctx).unwrap();
            let (pr, pc) = plain.scales(&ctx).unwrap();
            assert!(
                fr.iter().zip(&pr).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: row scales"
            );
            assert!(
                fc.iter().zip(&pc).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: block scales"
            );
            let (a, b) = (fused.values(&ctx).unwrap(), plain.values(&ctx).unwrap());
            assert_eq!(a.len(), t * dim, "{what}");
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{what}: codes"
            );
            // And both follow the CPU rule on the rows the producer wrote.
            let x = ctx.download(&rows).unwrap();
            let (wr, _, _) = cpu_quantize(&x, t, dim, grouped);
            assert_eq!(fr, wr, "{what}: row scales vs the CPU rule");
            eprintln!("{what}: producer row scales = the quantization's pass, bit for bit");
        }
    }
    ctx.sweep(&owner).unwrap();
}

/// Runs `y (+)= xq · wᵀ` for an `m × k` input and an `n × k` weight and checks the
/// tokens in `check` (all columns) against the f64 reference. Returns the max rel err.
#[allow(clippy::too_many_arguments)]
fn check_gemm(
    ctx: &Arc<CudaContext>,
    g: &mut GemmMx,
    rng: &mut StdRng,
    format: ElementFormat,
    m: usize,
    n: usize,
    k: usize,
    packed_f32: bool,
    accumulate: bool,
) -> f64 {
    let grouped = format == ElementFormat::Fp4E2M1;
    let owner = Owner::mint("cuda-test-gemm");
    let layout = MxLayout::new(format, n, k);
    let packed = if packed_f32 {
        let w = rand_matrix(rng, n, k);
        let mut p = vec![0u8; layout.total_bytes()];
        favlo_mx::pack(&w, layout, ScaleRule::Ceil, &mut p).unwrap();
        p
    } else {
        random_packed(layout, rng)
    };
    let view = MxView::new(layout, &packed).unwrap();
    let wf = view.dequantize();
    let wd = GemmWeights::upload(ctx, &owner, &tile_gemm(view).unwrap()).unwrap();
    assert_eq!(wd.grouped, grouped, "MXFP4 weights fold to grouped E4M3");
    let x = rand_matrix(rng, m, k);
    let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
    let mut acts = GemmActs::new(ctx, &owner, m, k).unwrap().grouped(grouped);
    g.quantize(&xd, m, k, k, &mut acts).unwrap();
    let xq = acts.values(ctx).unwrap();
    let y0: Vec<f32> = if accumulate {
        (0..m * n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    } else {
        vec![f32::NAN; m * n]
    };
    let mut ys = Vec::new();
    // Persistent with 4 and 2 grouped stages per call (grouped weights; Wide3 has a
    // grouped loop too), with every way of storing a tile.
    for (kernel, stages, store) in [
        (GemmKernel::Persistent, 4, TileStore::Direct),
        (GemmKernel::Persistent, 2, TileStore::Direct),
        (GemmKernel::Persistent, 4, TileStore::Bulk),
        (GemmKernel::Persistent, 4, TileStore::Vector),
        (GemmKernel::Persistent, 4, TileStore::VectorAdd),
        (GemmKernel::Persistent, 4, TileStore::Lean),
        (GemmKernel::Wide3, 4, TileStore::Direct),
        (GemmKernel::Pipelined, 4, TileStore::Direct),
        (GemmKernel::Serial, 4, TileStore::Direct),
    ] {
        g.kernel = kernel;
        g.group_stages = stages;
        g.store = store;
        let mut yd = ctx.upload(&owner, SpanKind::Scratch, &y0).unwrap();
        g.gemm(&acts, &wd, &mut yd, accumulate).unwrap();
        let y = ctx.download(&yd).unwrap();
        let label = format!("{kernel:?} {stages} stages {store:?}");
        assert!(
            y.iter().all(|v| v.is_finite()),
            "{m}x{n}x{k} {label}: non-finite (unwritten) output"
        );
        ys.push((label, y));
    }
    g.kernel = GemmKernel::Persistent;
    g.group_stages = 4;
    g.store = TileStore::VectorAdd;
    // The lean epilogue writes VectorAdd's values, bit for bit (every element).
    let out = |store: TileStore| {
        let label = format!("Persistent 4 stages {store:?}");
        ys.iter()
            .find(|(l, _)| *l == label)
            .map(|(_, y)| y)
            .unwrap()
    };
    let (va, lean) = (out(TileStore::VectorAdd), out(TileStore::Lean));
    let differ = va
        .iter()
        .zip(lean)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(
        differ,
        0,
        "{m}x{n}x{k}{}: Lean differs from VectorAdd in {differ} outputs",
        if accumulate { " (y +=)" } else { "" }
    );
    // Tokens checked: all for small m, else a spread that touches every 128-token tile.
    let toks: Vec<usize> = if m * n * k <= 1 << 28 {
        (0..m).collect()
    } else {
        let mut t: Vec<usize> = (0..m).step_by(61).collect();
        t.push(m - 1);
        t
    };
    let refs: Vec<(usize, Vec<f64>)> = toks
        .par_iter()
        .map(|&tok| {
            let xr = &xq[tok * k..(tok + 1) * k];
            let row: Vec<f64> = (0..n)
                .map(|c| {
                    let wr = &wf[c * k..(c + 1) * k];
                    let dot: f64 = xr.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    dot + if accumulate {
                        y0[tok * n + c] as f64
                    } else {
                        0.0
                    }
                })
                .collect();
            (tok, row)
        })
        .collect();
    let mut worst = 0f64;
    for (label, y) in &ys {
        let mut max_ref = 0f64;
        let mut max_err = 0f64;
        for (tok, row) in &refs {
            for (c, want) in row.iter().enumerate() {
                max_ref = max_ref.max(want.abs());
                max_err = max_err.max((y[tok * n + c] as f64 - want).abs());
            }
        }
        let e = max_err / max_ref.max(1e-30);
        eprintln!(
            "gemm {label} {format:?} m {m} n {n} k {k}{}: {} tokens checked, max rel err {e:.3e}",
            if accumulate { " (y +=)" } else { "" },
            toks.len()
        );
        worst = worst.max(e);
    }
    drop((wd, xd, acts));
    ctx.sweep(&owner).unwrap();
    worst
}

#[test]
fn gemm_matches_f64_reference_small_and_ragged() {
    let Some((ctx, mut g)) = setup() else { return };
    let mut rng = StdRng::seed_from_u64(11);
    for (m, n, k, acc) in [
        (1, 256, 512, false),
        (17, 300, 1000, false),
        (300, 640, 4096, false),
        (300, 640, 4096, true),
        (129, 136, 96, true),
        (65, 200, 300, false),
        (33, 130, 256, true),
    ] {
        let e = check_gemm(
            &ctx,
            &mut g,
            &mut rng,
            ElementFormat::Fp8E4M3,
            m,
            n,
            k,
            true,
            acc,
        );
        assert!(e <= 1e-3, "E4M3 {m}x{n}x{k}: {e:.3e}");
    }
    let e = check_gemm(
        &ctx,
        &mut g,
        &mut rng,
        ElementFormat::Fp8E5M2,
        200,
        384,
        2048,
        true,
        false,
    );
    assert!(e <= 1e-3, "E5M2: {e:.3e}");
}

#[test]
fn gemm_matches_f64_reference_on_qwen3_8b_matrices() {
    let Some((ctx, mut g)) = setup() else { return };
    let mut rng = StdRng::seed_from_u64(12);
    // q|k|v, o, gate|up, down of Qwen3-8B at a 2048-token prefill (o also ragged).
    for (m, n, k, acc) in [
        (2048, 6144, 4096, false),
        (2048, 4096, 4096, true),
        (300, 4096, 4096, false),
        (2048, 24576, 4096, false),
        (2048, 4096, 12288, true),
    ] {
        let e = check_gemm(
            &ctx,
            &mut g,
            &mut rng,
            ElementFormat::Fp8E4M3,
            m,
            n,
            k,
            false,
            acc,
        );
        assert!(e <= 1e-3, "{m}x{n}x{k}: {e:.3e}");
    }
}

#[test]
fn gemm_refuses_mismatched_shapes() {
    let Some((ctx, g)) = setup() else { return };
    let owner = Owner::mint("cuda-test-gemm-shapes");
    let layout = MxLayout::new(ElementFormat::Fp8E4M3, 128, 256);
    let mut rng = StdRng::seed_from_u64(3);
    let packed = random_packed(layout, &mut rng);
    let w = GemmWeights::upload(
        &ctx,
        &owner,
        &tile_gemm(MxView::new(layout, &packed).unwrap()).unwrap(),
    )
    .unwrap();
    let x = ctx
        .upload(&owner, SpanKind::Scratch, &vec![1f32; 4 * 512])
        .unwrap();
    let mut acts = GemmActs::new(&ctx, &owner, 4, 512).unwrap();
    g.quantize(&x, 4, 512, 512, &mut acts).unwrap();
    let mut y = ctx
        .alloc::<f32>(&owner, SpanKind::Scratch, 4 * 128)
        .unwrap();
    assert!(matches!(
        g.gemm(&acts, &w, &mut y, false),
        Err(CudaError::Shape { .. })
    ));
    assert!(matches!(
        g.quantize(&x, 5, 512, 512, &mut acts),
        Err(CudaError::Shape { .. })
    ));
    drop((w, x, acts, y));
    ctx.sweep(&owner).unwrap();
}

/// MXFP4 weights folded into grouped E4M3 codes, grouped activations: small and ragged
/// shapes (weights packed from f32) and the Qwen3-8B matrices (random codes, block
/// scales spread over 7 binades).
#[test]
fn gemm_mxfp4_grouped_matches_f64_reference() {
    let Some((ctx, mut g)) = setup() else { return };
    let mut rng = StdRng::seed_from_u64(13);
    for (m, n, k, acc, packed_f32) in [
        (1, 256, 512, false, true),
        (17, 300, 1000, false, true),
        (129, 136, 96, true, true),
        (65, 200, 300, false, true),
        (33, 130, 256, true, true),
        (300, 640, 4096, true, true),
        // More tiles (144) than an H100's or H200's 132 multiprocessors, ragged in
        // tokens and rows (the lean epilogue's partial tiles beside full ones; k = 256:
        // a tile is one call of two stages).
        (1000, 2200, 256, true, true),
        (700, 3000, 1000, false, true),
        (2048, 6144, 4096, false, false),
        (2048, 4096, 12288, true, false),
    ] {
        let e = check_gemm(
            &ctx,
            &mut g,
            &mut rng,
            ElementFormat::Fp4E2M1,
            m,
            n,
            k,
            packed_f32,
            acc,
        );
        assert!(e <= 1e-3, "MXFP4 {m}x{n}x{k}: {e:.3e}");
    }
}

/// The SwiGLU GEMM (`gemm_swiglu` over `tile_gemm_swiglu` weights) against the plain
/// GEMM followed by the SwiGLU rows kernel (bit for bit: the same f32 products and the
/// same `silu_fp8`); each element against f64 silu(gate)·up of the plain GEMM's f32 gate
/// and up (≤ 1.5e-5 of the value, `silu_fp8`'s bound; where gate ≤ -83.18, at most
/// |gate · up| · 2^-119 in size, as `silu_fp8` clamps there); and against f64
/// silu(x·gateᵀ)·(x·upᵀ) from the quantized x and the weights (≤ 1e-3, as the GEMM's own
/// bound), MXFP8 and grouped MXFP4, ragged tokens and k.
#[test]
fn gemm_swiglu_matches_gemm_then_swiglu() {
    let Some((ctx, mut g)) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    for format in [ElementFormat::Fp8E4M3, ElementFormat::Fp4E2M1] {
        for (m, ff, k) in [
            (1, 64, 256),
            (37, 192, 1000),
            (130, 320, 576),
            (300, 1536, 4096),
        ] {
            let grouped = format == ElementFormat::Fp4E2M1;
            let owner = Owner::mint("cuda-test-gemm-swiglu");
            let layout = MxLayout::new(format, 2 * ff, k);
            let packed = random_packed(layout, &mut rng);
            let view = MxView::new(layout, &packed).unwrap();
            let wf = view.dequantize();
            let plain = GemmWeights::upload(&ctx, &owner, &tile_gemm(view).unwrap()).unwrap();
            let paired =
                GemmWeights::upload(&ctx, &owner, &tile_gemm_swiglu(view).unwrap()).unwrap();
            let x = rand_matrix(&mut rng, m, k);
            let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
            let mut acts = GemmActs::new(&ctx, &owner, m, k).unwrap().grouped(grouped);
            g.quantize(&xd, m, k, k, &mut acts).unwrap();
            let mut gu = ctx
                .alloc::<f32>(&owner, SpanKind::Scratch, m * 2 * ff)
                .unwrap();
            g.gemm(&acts, &plain, &mut gu, false).unwrap();
            let mut want_d = ctx.alloc::<f32>(&owner, SpanKind::Scratch, m * ff).unwrap();
            ops.swiglu_rows(&gu, 2 * ff, m, ff, &mut want_d, ff)
                .unwrap();
            let nan = vec![f32::NAN; m * ff];
            let mut got_d = ctx.upload(&owner, SpanKind::Scratch, &nan).unwrap();
            g.gemm_swiglu(&acts, &paired, &mut got_d).unwrap();
            let (got, want) = (
                ctx.download(&got_d).unwrap(),
                ctx.download(&want_d).unwrap(),
            );
            let what = format!("{format:?} m {m} ff {ff} k {k}");
            assert!(
                got.iter().all(|v| v.is_finite()),
                "{what}: unwritten output"
            );
            let max = want.iter().fold(0f32, |a, b| a.max(b.abs()));
            let diff = got
                .iter()
                .zip(&want)
                .fold(0f32, |a, (p, q)| a.max((p - q).abs()));
            // Every element against f64 silu of the f32 gate times the f32 up, and how
            // many gates lie where silu_fp8 clamps (g ≤ -83.18).
            let gates = ctx.download(&gu).unwrap();
            let (mut clamped, mut worst) = (0usize, 0f64);
            for (tok, row) in gates.chunks(2 * ff).enumerate() {
                for j in 0..ff {
                    let (gv, uv) = (f64::from(row[j]), f64::from(row[ff + j]));
                    let v = f64::from(got[tok * ff + j]);
                    // silu_fp8 clamps where its f32 product g · -log2 e reaches 120.
                    if row[j] * -std::f32::consts::LOG2_E >= 120.0 {
                        clamped += 1;
                        assert!(
                            v.abs() <= (gv * uv).abs() * 2f64.powi(-119) + 1e-44,
                            "{what}: token {tok} column {j}: gate {gv:e} up {uv:e}: got {v:e}"
                        );
                        continue;
                    }
                    let r = gv / (1.0 + (-gv).exp()) * uv;
                    let d = (v - r).abs();
                    assert!(
                        d <= 1.5e-5 * r.abs() + 1e-44,
                        "{what}: token {tok} column {j}: gate {gv:e} up {uv:e}: got {v:e}, f64 {r:e}"
                    );
                    if r != 0.0 {
                        worst = worst.max(d / r.abs());
                    }
                }
            }
            // Every element whose bits differ, with its gate and up value.
            let mut differing = 0usize;
            for (i, (p, q)) in got.iter().zip(&want).enumerate() {
                if p.to_bits() != q.to_bits() {
                    differing += 1;
                    let (tok, j) = (i / ff, i % ff);
                    let (gv, uv) = (gates[tok * 2 * ff + j], gates[tok * 2 * ff + ff + j]);
                    eprintln!(
                        "  token {tok} column {j}: gate {gv:e} ({:#010x}) up {uv:e}: \
                         got {p:e} ({:#010x}), want {q:e} ({:#010x})",
                        gv.to_bits(),
                        p.to_bits(),
                        q.to_bits()
                    );
                }
            }
            let same = differing == 0;
            eprintln!(
                "gemm_swiglu {what}: vs gemm + SwiGLU rows {:.3e} (bit-identical {same}); \
                 per element vs f64 silu·up ≤ {worst:.2e}; gates ≤ -83.18 {clamped}",
                diff / max
            );
            assert!(
                same,
                "{what}: {differing} elements not bit-identical, {:.3e}",
                diff / max
            );
            // f64 on a spread of tokens.
            let xq = acts.values(&ctx).unwrap();
            let (mut err, mut big) = (0f64, 0f64);
            for tok in (0..m).step_by(29).chain([m - 1]) {
                let xr = &xq[tok * k..(tok + 1) * k];
                let dot = |r: usize| -> f64 {
                    xr.iter()
                        .zip(&wf[r * k..(r + 1) * k])
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum()
                };
                for j in 0..ff {
                    let (gv, uv) = (dot(j), dot(ff + j));
                    let v = gv / (1.0 + (-gv).exp()) * uv;
                    big = big.max(v.abs());
                    err = err.max((f64::from(got[tok * ff + j]) - v).abs());
                }
            }
            eprintln!("gemm_swiglu {what}: vs f64 {:.3e}", err / big);
            assert!(err <= 1e-3 * big, "{what}: vs f64 {:.3e}", err / big);
            // The paired tiling is refused by the plain GEMM.
            assert!(g.gemm(&acts, &paired, &mut gu, false).is_err(), "{what}");
            drop((plain, paired, xd, acts, gu, want_d, got_d));
            ctx.sweep(&owner).unwrap();
        }
    }
    g.kernel = GemmKernel::Persistent;
}

#[test]
fn tensor_ceiling_runs_every_stage_and_refuses_a_short_sink() {
    let Some((ctx, g)) = setup() else { return };
    let owner = Owner::mint("cuda-test-gemm-ceiling");
    let n = g.tensor_ceiling_threads();
    let mut sink = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n).unwrap();
    // Each thread's sum of its accumulators: the 4 slots' products, once per 4 stages,
    // so 8 stages give twice what 4 give (all codes are positive and finite), within
    // the tensor cores' own accumulation error (they add with ~14 significant bits, so
    // 16 more k steps onto a sum may lose a few 2^-13 of it: bound 1%; a stage that did
    // not run would miss by 12% or more).
    g.tensor_ceiling(4, &mut sink).unwrap();
    let four = ctx.download(&sink).unwrap();
    g.tensor_ceiling(8, &mut sink).unwrap();
    let eight = ctx.download(&sink).unwrap();
    for (i, (a, b)) in four.iter().zip(&eight).enumerate() {
        assert!(a.is_finite() && *a > 0.0, "thread {i}: 4 stages gave {a}");
        let r = *b as f64 / (2.0 * *a as f64);
        assert!(
            (r - 1.0).abs() < 1e-2,
            "thread {i}: 8 stages {b} against 4 stages {a}"
        );
    }
    let mut short = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n - 1).unwrap();
    assert!(matches!(
        g.tensor_ceiling(4, &mut short),
        Err(CudaError::Shape { .. })
    ));
    drop((sink, short));
    ctx.sweep(&owner).unwrap();
}
