//! The CUDA decode path against the CPU references (`favlo_runtime::cpu::reference`,
//! f64) on random non-zero inputs: the tensor-core MX GEMV (x prepared as f16 hi + lo),
//! attention decode over f16/f32 KV caches, q/k norm + RoPE + cache store, fused SwiGLU.
//! Run: `cargo test -p favlo-runtime --features cuda --test cuda_decode`.
//!
//! Without CUDA every device test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`. Tolerances: GEMV max|y−ref|/max|ref| ≤ 1e-5 (x keeps ~22
//! bits per 32-value block; f32 tensor-core accumulation); the rest max|err|/(1+|ref|)
//! ≤ 1e-5 (f32 arithmetic; f16 caches are compared with the f16-rounded values the
//! kernel stored, so rounding to f16 is part of the input, not of the error).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxView};
use favlo_runtime::cpu::{AttnShape, RopeLayout, WeightRef, reference};
use favlo_runtime::cuda::{
    AttentionDecode, AttnKernel, AttnOut, CudaContext, DecodeOps, GemvKernel, GemvMma, KvCache,
    MxTiled, XPrep, attn_partials_len, rope_tables, tile_mx,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use half::f16;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn setup() -> Option<Arc<CudaContext>> {
    common::cuda::open_or_skip("the CUDA decode test")
}

use common::{blockwise, max_abs_scaled, max_rel, rand_vec};

/// x with per-32-block magnitudes spread over 2^-20..2^20, so the per-block scaling
/// of the hi/lo split is exercised.
fn spread_x(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let mut x = rand_vec(rng, n, 1.0);
    for (b, blk) in x.chunks_mut(32).enumerate() {
        let m = 2f32.powi(((b * 7) % 41) as i32 - 20);
        blk.iter_mut().for_each(|v| *v *= m);
    }
    x
}

fn check_gemv_mma(
    ctx: &Arc<CudaContext>,
    g: &GemvMma,
    format: ElementFormat,
    rows: usize,
    cols: usize,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (layout, packed) = common::packed_rows(&mut rng, format, rows, cols);
    let view = MxView::new(layout, &packed).unwrap();
    let owner = Owner::mint("cuda-test-gemv-mma");
    let wd = MxTiled::upload(ctx, &owner, &tile_mx(view)).unwrap();
    for (xi, x) in [rand_vec(&mut rng, cols, 2.0), spread_x(&mut rng, cols)]
        .into_iter()
        .enumerate()
    {
        let want = reference::linear(&x, &WeightRef::Mx(view), None);
        let mut xp = x.clone();
        xp.resize(layout.padded_cols(), 0.0);
        let xd = ctx.upload(&owner, SpanKind::Scratch, &xp).unwrap();
        let mut prep = XPrep::new(ctx, &owner, layout.padded_cols()).unwrap();
        g.prep_x(&xd, layout.padded_cols(), &mut prep).unwrap();
        let mut yd = ctx
            .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; rows])
            .unwrap();
        g.gemv(&wd, &prep, &mut yd, false).unwrap();
        let got = ctx.download(&yd).unwrap();
        let e = max_rel(&got, &want);
        eprintln!("gemv_mma {format:?} {rows}x{cols} x#{xi}: max rel err {e:.3e}");
        assert!(
            e <= 1e-5,
            "gemv_mma {format:?} {rows}x{cols} x#{xi}: {e:.3e}"
        );
        // Accumulate: y0 + W·x.
        let y0 = rand_vec(&mut rng, rows, 3.0);
        let mut yd = ctx.upload(&owner, SpanKind::Scratch, &y0).unwrap();
        g.gemv(&wd, &prep, &mut yd, true).unwrap();
        let want2: Vec<f64> = want.iter().zip(&y0).map(|(a, b)| a + *b as f64).collect();
        let e = max_rel(&ctx.download(&yd).unwrap(), &want2);
        assert!(e <= 1e-5, "gemv_mma accumulate {format:?}: {e:.3e}");
    }
    drop(wd);
    ctx.sweep(&owner).unwrap();
}

#[test]
fn gemv_mma_matches_reference() {
    let Some(ctx) = setup() else { return };
    let mut g = GemvMma::load(&ctx).unwrap();
    let hopper = common::cuda::pdl_ok(&ctx);
    // The register-buffer kernel, the ring with its own choice, and rings of 1..16
    // warps and depth 2..4 (warps past the chunk count, uneven chunk splits).
    let kernels = [
        (GemvKernel::Regs, None, false),
        (GemvKernel::PingPong, None, false),
        (GemvKernel::Auto, None, false),
        (GemvKernel::Ring, None, false),
        (GemvKernel::Ring, Some((1, 2)), false),
        (GemvKernel::Ring, Some((3, 3)), false),
        (GemvKernel::Ring, Some((5, 4)), false),
        (GemvKernel::Ring, Some((16, 2)), false),
        (GemvKernel::Tma, None, false),
        (GemvKernel::Tma, Some((1, 2)), false),
        (GemvKernel::Tma, Some((3, 3)), false),
        (GemvKernel::Tma, Some((5, 4)), false),
        (GemvKernel::Tma, Some((16, 2)), false),
        // Programmatic dependent launch (each GEMV right after its x preparation).
        (GemvKernel::Regs, None, true),
        (GemvKernel::PingPong, None, true),
        (GemvKernel::Ring, None, true),
        (GemvKernel::Ring, Some((3, 3)), true),
        (GemvKernel::Tma, None, true),
    ];
    // The ping-pong kernel with its L2 prefetch 2 and 3 steps ahead, plain and PDL.
    for (pi, (pd, pdl)) in [(2u8, false), (3, false), (3, true)]
        .into_iter()
        .enumerate()
    {
        g.kernel = GemvKernel::PingPong;
        g.ring_override = None;
        g.pp_prefetch = pd;
        g.pdl = pdl && hopper;
        for (i, format) in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3]
            .into_iter()
            .enumerate()
        {
            let s = 10 * i as u64 + 1000 + 100 * pi as u64;
            check_gemv_mma(&ctx, &g, format, 67, 1000, s + 1);
            check_gemv_mma(&ctx, &g, format, 256, 4096, s + 2);
            check_gemv_mma(&ctx, &g, format, 1000, 3072, s + 4);
        }
    }
    g.pp_prefetch = 0;
    for (ki, (kernel, ov, pdl)) in kernels.into_iter().enumerate() {
        // The bulk-copy kernel and PDL need sm_90 (Hopper); rings past the shared
        // memory of a block (an RTX 30xx/40xx has 99 KB) are refused there.
        let fits = ov.is_none_or(|(w, d)| g.ring_fits(ElementFormat::Fp4E2M1, w, d));
        if !hopper && (pdl || kernel == GemvKernel::Tma) || !fits {
            eprintln!("kernel {kernel:?} {ov:?} pdl {pdl}: not on this GPU");
            continue;
        }
        g.kernel = kernel;
        g.ring_override = ov;
        g.pdl = pdl;
        eprintln!("kernel {kernel:?} {ov:?} pdl {pdl}");
        for (i, format) in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3]
            .into_iter()
            .enumerate()
        {
            let s = 10 * i as u64 + 100 * ki as u64;
            check_gemv_mma(&ctx, &g, format, 67, 1000, s + 1);
            check_gemv_mma(&ctx, &g, format, 256, 4096, s + 2);
            check_gemv_mma(&ctx, &g, format, 5, 96, s + 3);
            check_gemv_mma(&ctx, &g, format, 1000, 3072, s + 4);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_attention(
    ctx: &Arc<CudaContext>,
    a: &AttentionDecode,
    f16_cache: bool,
    nh: usize,
    nkv: usize,
    len: usize,
    cap: usize,
    seed: u64,
) {
    let hd = 128;
    let mut rng = StdRng::seed_from_u64(seed);
    let owner = Owner::mint("cuda-test-attn");
    let q = rand_vec(&mut rng, nh * hd, 1.0);
    let k = rand_vec(&mut rng, cap * nkv * hd, 1.0);
    let v = rand_vec(&mut rng, cap * nkv * hd, 2.0);
    let mut cache = KvCache::new(ctx, &owner, f16_cache, cap, nkv).unwrap();
    // The reference sees the values the cache holds.
    let (k, v) = cache.fill(ctx, &k, &v).unwrap();
    let scale = 1.0 / (hd as f32).sqrt();
    let shape = AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    };
    let want = reference::attention_causal(
        &q,
        &k[..len * nkv * hd],
        &v[..len * nkv * hd],
        shape,
        len - 1,
        1,
        scale,
    );
    let qd = ctx.upload(&owner, SpanKind::Scratch, &q).unwrap();
    // The length is read on the device: *lenp + len_add.
    let lenp = ctx
        .upload(&owner, SpanKind::Scratch, &[len as i32 - 1])
        .unwrap();
    // NaN partials: the combine must read only the splits this step wrote (those
    // holding keys), so a stale or unwritten one would show. The one-pass kernel's
    // counters at the end start zeroed, as the buffer's contract says.
    let mut nan = vec![f32::NAN; attn_partials_len(nh, cap)];
    let counters = attn_partials_len(0, cap);
    let at = nan.len() - counters;
    nan[at..].fill(0.0);
    let mut part = ctx.upload(&owner, SpanKind::Scratch, &nan).unwrap();
    let mut out = ctx
        .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; nh * hd])
        .unwrap();
    a.decode(
        &qd,
        &cache,
        cap,
        nh,
        nkv,
        &lenp,
        1,
        scale,
        &mut part,
        AttnOut::F32(&mut out),
    )
    .unwrap();
    let e = max_abs_scaled(&ctx.download(&out).unwrap(), &want);
    eprintln!(
        "attn decode {:?} tc={} f16={f16_cache} {nh}/{nkv} len {len} cap {cap}: {e:.3e}",
        a.kernel,
        a.onepass_tc()
    );
    assert!(e <= 1e-5, "attention {nh}/{nkv} len {len}: {e:.3e}");
    // The same, combined straight into the next GEMV's x preparation.
    let mut prep = XPrep::new(ctx, &owner, nh * hd).unwrap();
    a.decode(
        &qd,
        &cache,
        cap,
        nh,
        nkv,
        &lenp,
        1,
        scale,
        &mut part,
        AttnOut::Prep(&mut prep),
    )
    .unwrap();
    let e = max_abs_scaled(&prep.values(ctx, nh * hd).unwrap(), &want);
    assert!(e <= 1e-5, "attention -> prep {nh}/{nkv} len {len}: {e:.3e}");
    drop((qd, lenp, part, out, cache, prep));
    ctx.sweep(&owner).unwrap();
}

#[test]
fn attention_decode_matches_reference() {
    let Some(ctx) = setup() else { return };
    let mut a = AttentionDecode::load(&ctx).unwrap();
    // Plain launches, then programmatic dependent launch (the kernels wait first); the
    // two-pass kernel, then the one-pass default, then the one-pass kernel's tensor-core
    // loop (more cases: `cuda_attn_onepass`).
    // (f32 caches run the FMA loop either way: the tensor-core loop only over f16.)
    let kernels = [
        (AttnKernel::TwoPass, false),
        (AttnKernel::OnePass, false),
        (AttnKernel::OnePass, true),
    ];
    for (f16_cache, pdl, (kernel, tc)) in [false, true]
        .into_iter()
        .flat_map(|pdl| {
            kernels
                .into_iter()
                .flat_map(move |k| [(true, pdl, k), (false, pdl, k)])
        })
        .filter(|&(f16_cache, _, (_, tc))| f16_cache || !tc)
    {
        a.pdl = pdl && common::cuda::pdl_ok(&ctx);
        a.kernel = kernel;
        a.set_onepass_tc(tc).unwrap();
        check_attention(&ctx, &a, f16_cache, 32, 8, 1024, 1024, 1);
        check_attention(&ctx, &a, f16_cache, 32, 8, 1, 64, 2);
        check_attention(&ctx, &a, f16_cache, 8, 8, 37, 100, 3);
        check_attention(&ctx, &a, f16_cache, 16, 2, 777, 800, 4);
        check_attention(&ctx, &a, f16_cache, 4, 2, 300, 333, 5);
        // Few keys in a large capacity (most splits idle; the two-pass combine reads
        // one round of 64, then two of 128).
        check_attention(&ctx, &a, f16_cache, 32, 8, 100, 4096, 6);
        check_attention(&ctx, &a, f16_cache, 32, 8, 2100, 4096, 7);
        // A full cache (128 splits, two full rounds), and three rounds with a ragged last
        // split (5000 keys: 157 splits, the last of 8 keys).
        check_attention(&ctx, &a, f16_cache, 32, 8, 4096, 4096, 8);
        check_attention(&ctx, &a, f16_cache, 16, 2, 5000, 8192, 9);
    }
}

#[test]
fn qk_norm_rope_store_and_swiglu_match_reference() {
    let Some(ctx) = setup() else { return };
    let mut ops = DecodeOps::load(&ctx).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let owner = Owner::mint("cuda-test-decode-ops");
    let (nh, nkv, hd, cap, eps, theta) = (32, 8, 128, 2048, 1e-6f32, 1_000_000f32);
    let positions: Vec<usize> = (0..cap).collect();
    let (c, s) = rope_tables(&positions, hd, hd, theta);
    let cd = ctx.upload(&owner, SpanKind::Scratch, &c).unwrap();
    let sd = ctx.upload(&owner, SpanKind::Scratch, &s).unwrap();
    let qw = rand_vec(&mut rng, hd, 1.5);
    let kw = rand_vec(&mut rng, hd, 1.5);
    let qwd = ctx.upload(&owner, SpanKind::Scratch, &qw).unwrap();
    let kwd = ctx.upload(&owner, SpanKind::Scratch, &kw).unwrap();
    for (f16_cache, pos, pdl) in [
        (true, 5usize, false),
        (false, 1777, false),
        (true, 2047, false),
        (false, 9, true),
        (true, 1000, true),
    ] {
        ops.pdl = pdl && common::cuda::pdl_ok(&ctx);
        let qkv = rand_vec(&mut rng, (nh + 2 * nkv) * hd, 4.0);
        let qkvd = ctx.upload(&owner, SpanKind::Scratch, &qkv).unwrap();
        let posd = ctx
            .upload(&owner, SpanKind::Scratch, &[pos as i32])
            .unwrap();
        let mut qo = ctx
            .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; nh * hd])
            .unwrap();
        let mut cache = KvCache::new(&ctx, &owner, f16_cache, cap, nkv).unwrap();
        ops.qk_norm_rope_store(
            &qkvd, &qwd, &kwd, &cd, &sd, &posd, nh, nkv, eps, &mut qo, &mut cache,
        )
        .unwrap();
        let normed = |x: &[f32], w: &[f32]| -> Vec<f32> {
            reference::rms_norm(x, w, eps)
                .iter()
                .map(|v| *v as f32)
                .collect()
        };
        let (qx, rest) = qkv.split_at(nh * hd);
        let (kx, vx) = rest.split_at(nkv * hd);
        let want_q = reference::rope(
            &normed(qx, &qw),
            &[pos],
            nh,
            hd,
            hd,
            theta,
            RopeLayout::NeoX,
        );
        let want_k = reference::rope(
            &normed(kx, &kw),
            &[pos],
            nkv,
            hd,
            hd,
            theta,
            RopeLayout::NeoX,
        );
        let e = max_abs_scaled(&ctx.download(&qo).unwrap(), &want_q);
        assert!(e <= 1e-5, "q norm+rope at {pos}: {e:.3e}");
        let row = pos * nkv * hd..(pos + 1) * nkv * hd;
        let (gk, gv): (Vec<f32>, Vec<f32>) = match &cache {
            KvCache::F16 { k, v } => {
                let f = |b: Vec<u16>| -> Vec<f32> {
                    b[row.clone()]
                        .iter()
                        .map(|x| f16::from_bits(*x).to_f32())
                        .collect()
                };
                (f(ctx.download(k).unwrap()), f(ctx.download(v).unwrap()))
            }
            KvCache::F32 { k, v } => (
                ctx.download(k).unwrap()[row.clone()].to_vec(),
                ctx.download(v).unwrap()[row.clone()].to_vec(),
            ),
        };
        let (ek, ev, tol) = common::cuda::stored_kv_errors(f16_cache, &gk, &gv, &want_k, vx);
        eprintln!("qk_norm_rope_store f16={f16_cache} pos {pos}: q {e:.3e} k {ek:.3e} v {ev:.3e}");
        assert!(ek <= tol && ev <= tol, "k {ek:.3e} v {ev:.3e}");
    }
    // Fused SwiGLU: out = silu(gate)·up over [gate | up].
    let n = 12288;
    let gu = rand_vec(&mut rng, 2 * n, 8.0);
    let gud = ctx.upload(&owner, SpanKind::Scratch, &gu).unwrap();
    let mut od = ctx
        .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; n])
        .unwrap();
    ops.swiglu_fused(&gud, &mut od).unwrap();
    let want: Vec<f64> = (0..n)
        .map(|i| reference::silu(gu[i] as f64) * gu[n + i] as f64)
        .collect();
    let e = max_abs_scaled(&ctx.download(&od).unwrap(), &want);
    eprintln!("swiglu_fused: {e:.3e}");
    assert!(e <= 1e-5, "swiglu_fused {e:.3e}");
    // The position counter.
    let mut posd = ctx.upload(&owner, SpanKind::Scratch, &[41i32]).unwrap();
    ops.advance_pos(&mut posd).unwrap();
    assert_eq!(ctx.download(&posd).unwrap(), vec![42]);
}

/// The fused producers of the GEMV's x preparation: prep_x itself, RMSNorm → prep,
/// SwiGLU → prep; the prepared values (hi + lo)·2^-e against the f64 reference.
#[test]
fn prep_producers_match_reference() {
    let Some(ctx) = setup() else { return };
    let g = GemvMma::load(&ctx).unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    let owner = Owner::mint("cuda-test-prep");
    let n = 4096;
    let x = spread_x(&mut rng, n);
    let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
    let mut prep = XPrep::new(&ctx, &owner, 3 * n).unwrap();
    g.prep_x(&xd, n, &mut prep).unwrap();
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    // Relative to each 32-value block's max (the split keeps ~22 bits of it).
    let e = blockwise(&prep.values(&ctx, n).unwrap(), &want);
    eprintln!("prep_x: {e:.3e}");
    assert!(e <= 1e-6, "prep_x {e:.3e}");
    let w = rand_vec(&mut rng, n, 1.5);
    let wd = ctx.upload(&owner, SpanKind::Scratch, &w).unwrap();
    let h = rand_vec(&mut rng, n, 3.0);
    let hd = ctx.upload(&owner, SpanKind::Scratch, &h).unwrap();
    g.rms_norm_prep(&hd, &wd, 1e-6, &mut prep).unwrap();
    let e = max_abs_scaled(
        &prep.values(&ctx, n).unwrap(),
        &reference::rms_norm(&h, &w, 1e-6),
    );
    eprintln!("rms_norm_prep: {e:.3e}");
    assert!(e <= 1e-5, "rms_norm_prep {e:.3e}");
    let m = 3 * n;
    let gu = rand_vec(&mut rng, 2 * m, 8.0);
    let gud = ctx.upload(&owner, SpanKind::Scratch, &gu).unwrap();
    g.swiglu_prep(&gud, m, &mut prep).unwrap();
    let want: Vec<f64> = (0..m)
        .map(|i| reference::silu(gu[i] as f64) * gu[m + i] as f64)
        .collect();
    let e = max_abs_scaled(&prep.values(&ctx, m).unwrap(), &want);
    eprintln!("swiglu_prep: {e:.3e}");
    assert!(e <= 1e-5, "swiglu_prep {e:.3e}");
    drop((xd, wd, hd, gud, prep));
    ctx.sweep(&owner).unwrap();
}
