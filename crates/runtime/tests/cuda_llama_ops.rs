//! CUDA kernels the Llama / Qwen2 decode needs beyond the Qwen3 set, against float64
//! CPU references on random non-zero inputs: attention decode with heads of 64 and
//! groups of 3 and 7 (SmolLM2-135M: 9/3 heads, Qwen2.5-0.5B: 14/2), bias + RoPE + KV
//! store in both pair layouts, and the RMSNorm x preparation over a row that is not a
//! multiple of 128 feeding a GEMV whose K is padded (hidden 576 and 896).
//!
//! Without CUDA each device test prints a loud skip and passes (`FAVLO_REQUIRE_CUDA=1`
//! makes a skip fail). Their kernels' NVRTC compile checks (every arch from sm_80) are in `cuda_warm.rs`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cpu::{AttnShape, WeightRef, reference};
use favlo_runtime::cuda::{
    AttentionDecode, AttnKernel, AttnOut, CudaContext, CudaError, GemvMma, KvCache, MxTiled,
    RopeStore, XPrep, attn_partials_len, tile_mx,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

fn setup() -> Option<Arc<CudaContext>> {
    common::cuda::open_or_skip("the CUDA llama-op test")
}

use common::{max_abs_scaled, max_rel, rand_vec};

#[test]
fn attention_decode_head_dim_64_and_odd_groups() {
    let Some(ctx) = setup() else { return };
    let mut a = AttentionDecode::load(&ctx).unwrap();
    // (head_dim, heads, kv heads, len, capacity): SmolLM2 9/3, Qwen2.5-0.5B 14/2,
    // groups 1..8 at 64, and group 3 at 128.
    let cases = [
        (64, 9, 3, 1, 32),
        (64, 9, 3, 77, 96),
        (64, 9, 3, 1000, 1024),
        (64, 14, 2, 5, 64),
        (64, 14, 2, 513, 600),
        (64, 8, 8, 33, 40),
        (64, 16, 8, 31, 64),
        (64, 8, 2, 200, 256),
        (64, 5, 1, 64, 64),
        (64, 6, 1, 100, 130),
        (64, 8, 1, 9, 32),
        (128, 9, 3, 300, 320),
        (128, 14, 2, 65, 70),
    ];
    for (pdl, kernel) in [
        (false, AttnKernel::TwoPass),
        (true, AttnKernel::TwoPass),
        (false, AttnKernel::OnePass),
        (true, AttnKernel::OnePass),
    ] {
        a.pdl = pdl && common::cuda::pdl_ok(&ctx);
        a.kernel = kernel;
        for (ci, &(hd, nh, nkv, len, cap)) in cases.iter().enumerate() {
            for f16_cache in [true, false] {
                let mut rng = StdRng::seed_from_u64(ci as u64 * 7 + u64::from(f16_cache));
                let owner = Owner::mint("cuda-test-attn64");
                let q = rand_vec(&mut rng, nh * hd, 1.0);
                let k = rand_vec(&mut rng, cap * nkv * hd, 1.0);
                let v = rand_vec(&mut rng, cap * nkv * hd, 2.0);
                let mut cache =
                    KvCache::with_head_dim(&ctx, &owner, f16_cache, cap, nkv, hd).unwrap();
                let (k, v) = cache.fill(&ctx, &k, &v).unwrap();
                let scale = 1.0 / (hd as f32).sqrt();
                let shape = AttnShape {
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                };
                let n = len * nkv * hd;
                let want =
                    reference::attention_causal(&q, &k[..n], &v[..n], shape, len - 1, 1, scale);
                let qd = ctx.upload(&owner, SpanKind::Scratch, &q).unwrap();
                let lenp = ctx
                    .upload(&owner, SpanKind::Scratch, &[len as i32 - 1])
                    .unwrap();
                let mut part = ctx
                    .alloc::<f32>(&owner, SpanKind::Scratch, attn_partials_len(nh, cap))
                    .unwrap();
                let mut out = ctx
                    .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; nh * hd])
                    .unwrap();
                a.decode_hd(
                    &qd,
                    &cache,
                    cap,
                    nh,
                    nkv,
                    hd,
                    &lenp,
                    1,
                    scale,
                    &mut part,
                    AttnOut::F32(&mut out),
                )
                .unwrap();
                let e = max_abs_scaled(&ctx.download(&out).unwrap(), &want);
                eprintln!(
                    "attn {kernel:?} hd {hd} {nh}/{nkv} len {len} f16 {f16_cache} pdl {pdl}: {e:.3e}"
                );
                assert!(e <= 1e-5, "attention hd {hd} {nh}/{nkv} len {len}: {e:.3e}");
                let mut prep = XPrep::new(&ctx, &owner, nh * hd).unwrap();
                a.decode_hd(
                    &qd,
                    &cache,
                    cap,
                    nh,
                    nkv,
                    hd,
                    &lenp,
                    1,
                    scale,
                    &mut part,
                    AttnOut::Prep(&mut prep),
                )
                .unwrap();
                let e = max_abs_scaled(&prep.values(&ctx, nh * hd).unwrap(), &want);
                assert!(e <= 1e-5, "attention -> prep hd {hd} {nh}/{nkv}: {e:.3e}");
                drop((qd, lenp, part, out, cache, prep));
                ctx.sweep(&owner).unwrap();
            }
        }
    }
    // A group the kernels lack and a head size they lack are errors, not faults.
    let owner = Owner::mint("cuda-test-attn64-bad");
    let cache = KvCache::with_head_dim(&ctx, &owner, true, 32, 1, 64).unwrap();
    let q = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 9 * 64).unwrap();
    let lenp = ctx.upload(&owner, SpanKind::Scratch, &[0i32]).unwrap();
    let mut part = ctx
        .alloc::<f32>(&owner, SpanKind::Scratch, attn_partials_len(9, 32))
        .unwrap();
    let mut out = ctx.alloc::<f32>(&owner, SpanKind::Scratch, 9 * 64).unwrap();
    for (nh, hd) in [(9, 64), (1, 96)] {
        let r = a.decode_hd(
            &q,
            &cache,
            32,
            nh,
            1,
            hd,
            &lenp,
            1,
            0.1,
            &mut part,
            AttnOut::F32(&mut out),
        );
        assert!(
            matches!(r, Err(CudaError::Shape { .. })),
            "{nh} heads × {hd}"
        );
    }
    drop((cache, q, lenp, part, out));
    ctx.sweep(&owner).unwrap();
}

/// f64 RoPE of one head at `pos` with θ, pair layout `interleaved`.
fn rope_ref(x: &[f64], pos: usize, theta: f64, interleaved: bool) -> Vec<f64> {
    let hd = x.len();
    let half = hd / 2;
    let mut y = x.to_vec();
    for i in 0..half {
        let a = pos as f64 * theta.powf(-(2.0 * i as f64) / hd as f64);
        let (c, s) = (a.cos(), a.sin());
        let (ia, ib) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        y[ia] = x[ia] * c - x[ib] * s;
        y[ib] = x[ia] * s + x[ib] * c;
    }
    y
}

#[test]
fn bias_rope_store_matches_reference() {
    let Some(ctx) = setup() else { return };
    let mut r = RopeStore::load(&ctx).unwrap();
    let theta = 1e5f64;
    // (head_dim, heads, kv heads, position, capacity, bias, interleaved)
    let cases = [
        (64, 9, 3, 0, 16, false, true),
        (64, 9, 3, 13, 16, false, true),
        (64, 14, 2, 1777, 2048, true, false),
        (64, 14, 2, 5, 16, true, true),
        (128, 8, 2, 1000, 1024, true, false),
        (128, 4, 4, 7, 8, false, true),
    ];
    for pdl in [false, true] {
        r.pdl = pdl && common::cuda::pdl_ok(&ctx);
        for (ci, &(hd, nh, nkv, pos, cap, with_bias, il)) in cases.iter().enumerate() {
            for f16_cache in [true, false] {
                let mut rng = StdRng::seed_from_u64(100 + ci as u64);
                let owner = Owner::mint("cuda-test-rope-store");
                let heads = nh + 2 * nkv;
                let qkv = rand_vec(&mut rng, heads * hd, 2.0);
                let bias = rand_vec(&mut rng, heads * hd, 0.5);
                let positions: Vec<usize> = (0..cap).collect();
                let (c, s) = favlo_runtime::cuda::rope_tables(&positions, hd, hd, theta as f32);
                let qkvd = ctx.upload(&owner, SpanKind::Scratch, &qkv).unwrap();
                let bd = ctx.upload(&owner, SpanKind::Resident, &bias).unwrap();
                let cd = ctx.upload(&owner, SpanKind::Resident, &c).unwrap();
                let sd = ctx.upload(&owner, SpanKind::Resident, &s).unwrap();
                let pd = ctx
                    .upload(&owner, SpanKind::Scratch, &[pos as i32])
                    .unwrap();
                let mut q = ctx
                    .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; nh * hd])
                    .unwrap();
                let mut cache =
                    KvCache::with_head_dim(&ctx, &owner, f16_cache, cap, nkv, hd).unwrap();
                r.bias_rope_store(
                    &qkvd,
                    with_bias.then_some(&bd),
                    &cd,
                    &sd,
                    &pd,
                    nh,
                    nkv,
                    hd,
                    il,
                    &mut q,
                    &mut cache,
                )
                .unwrap();
                let x: Vec<f64> = qkv
                    .iter()
                    .zip(&bias)
                    .map(|(a, b)| *a as f64 + if with_bias { *b as f64 } else { 0.0 })
                    .collect();
                let mut want_q = Vec::new();
                for h in 0..nh {
                    want_q.extend(rope_ref(&x[h * hd..(h + 1) * hd], pos, theta, il));
                }
                let mut want_k = Vec::new();
                for h in nh..nh + nkv {
                    want_k.extend(rope_ref(&x[h * hd..(h + 1) * hd], pos, theta, il));
                }
                let want_v = &x[(nh + nkv) * hd..];
                let e = max_abs_scaled(&ctx.download(&q).unwrap(), &want_q);
                let (kc, vc) = cache.held(&ctx).unwrap();
                let row = pos * nkv * hd..(pos + 1) * nkv * hd;
                // f16 storage: compare with the reference rounded to f16 (1 ulp slack).
                let tol = if f16_cache { 2e-3 } else { 1e-5 };
                let ek = max_abs_scaled(&kc[row.clone()], &want_k);
                let ev = max_abs_scaled(&vc[row.clone()], want_v);
                eprintln!(
                    "rope store hd {hd} {nh}/{nkv} pos {pos} bias {with_bias} il {il} f16 {f16_cache} pdl {pdl}: q {e:.2e} k {ek:.2e} v {ev:.2e}"
                );
                assert!(e <= 1e-5, "q {e:.3e}");
                assert!(ek <= tol && ev <= tol, "k {ek:.3e} v {ev:.3e}");
                // Other rows untouched (zero).
                assert!(kc[..row.start].iter().all(|v| *v == 0.0));
                assert!(vc[row.end..].iter().all(|v| *v == 0.0));
                drop((qkvd, bd, cd, sd, pd, q, cache));
                ctx.sweep(&owner).unwrap();
            }
        }
    }
}

/// RMSNorm over a row that is not a multiple of 128 into the x preparation, then a GEMV
/// whose K (576, 896) is padded by the MX layout, with the preparation first holding
/// other (finite) values past the row: the padded weight codes are zero, so the tail
/// contributes nothing. Reference: f64 RMSNorm then the f64 MX linear.
#[test]
fn rms_norm_prep_then_padded_gemv() {
    let Some(ctx) = setup() else { return };
    let mut g = GemvMma::load(&ctx).unwrap();
    for pdl in [false, true] {
        g.pdl = pdl && common::cuda::pdl_ok(&ctx);
        for (ci, &(rows, cols)) in [(576, 576), (1536, 576), (896, 896), (200, 864)]
            .iter()
            .enumerate()
        {
            for format in [ElementFormat::Fp8E4M3, ElementFormat::Fp4E2M1] {
                let mut rng = StdRng::seed_from_u64(300 + ci as u64);
                let owner = Owner::mint("cuda-test-rms-gemv");
                let w = rand_vec(&mut rng, rows * cols, 1.0);
                let layout = MxLayout { format, rows, cols };
                let mut packed = vec![0u8; layout.total_bytes()];
                favlo_mx::pack(&w, layout, ScaleRule::default(), &mut packed).unwrap();
                let view = MxView::new(layout, &packed).unwrap();
                let wd = MxTiled::upload(&ctx, &owner, &tile_mx(view)).unwrap();
                let x = rand_vec(&mut rng, cols, 3.0);
                let nw = rand_vec(&mut rng, cols, 1.0);
                let eps = 1e-5f32;
                let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / cols as f64;
                let inv = 1.0 / (ms + eps as f64).sqrt();
                let xn: Vec<f32> = x
                    .iter()
                    .zip(&nw)
                    .map(|(a, b)| (*a as f64 * inv * *b as f64) as f32)
                    .collect();
                let xn64: Vec<f64> = x
                    .iter()
                    .zip(&nw)
                    .map(|(a, b)| *a as f64 * inv * *b as f64)
                    .collect();
                let want = reference::linear(&xn, &WeightRef::Mx(view), None);
                // The preparation first holds a longer vector (stale tail blocks).
                let big = 2048;
                let mut prep = XPrep::new(&ctx, &owner, big).unwrap();
                let other = ctx
                    .upload(&owner, SpanKind::Scratch, &rand_vec(&mut rng, big, 5.0))
                    .unwrap();
                g.prep_x(&other, big, &mut prep).unwrap();
                let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
                let nd = ctx.upload(&owner, SpanKind::Resident, &nw).unwrap();
                g.rms_norm_prep(&xd, &nd, eps, &mut prep).unwrap();
                let e_prep = max_abs_scaled(&prep.values(&ctx, cols).unwrap(), &xn64);
                assert!(e_prep <= 1e-5, "rms_norm_prep {cols}: {e_prep:.3e}");
                let mut y = ctx
                    .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; rows])
                    .unwrap();
                g.gemv(&wd, &prep, &mut y, false).unwrap();
                let e = max_rel(&ctx.download(&y).unwrap(), &want);
                eprintln!(
                    "rms_norm_prep + gemv {format:?} {rows}x{cols} (K padded to {}) pdl {pdl}: prep {e_prep:.2e}, y {e:.2e}",
                    layout.padded_cols()
                );
                assert!(e <= 1e-5, "gemv {format:?} {rows}x{cols}: {e:.3e}");
                drop((wd, prep, other, xd, nd, y));
                ctx.sweep(&owner).unwrap();
            }
        }
    }
}
