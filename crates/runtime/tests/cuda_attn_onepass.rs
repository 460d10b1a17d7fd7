//! The one-launch attention decode (`AttentionDecode` with `AttnKernel::OnePass`) and
//! its fused prologue (`decode_qkv`: bias, q/k RMSNorm, RoPE and the KV store from the
//! q|k|v projection) against float64 CPU references on random non-zero inputs.
//!
//! Cases: heads of 64 and 128, GQA groups 1..8, f16 and f32 caches, contexts 1…4096,
//! f32 output and output into the x preparation, plain and PDL launches, the block
//! count forced to 1 (no merge), to 64 (the largest merge) and left to occupancy, both
//! fence orders of the merge (`light_fence`), and several calls on one partials buffer
//! (the kernel's counters must return to zero); f16 caches with the FMA loop and with the
//! tensor-core loop (`AttentionDecode::set_onepass_tc`; f32 caches run the FMA loop).
//! Tolerances as `cuda_decode`: attention max|err|/(1+|ref|) ≤ 1e-5 (f16 caches are
//! compared on the values they hold); the stored k, v rows 1e-5 (f32) / 2e-3 (f16,
//! against the f16-rounded reference); every other cache row untouched.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_runtime::cpu::{AttnShape, RopeLayout, reference};
use favlo_runtime::cuda::{
    AttentionDecode, AttnKernel, AttnOut, CudaContext, DeviceBuffer, KvCache, QkvRope, XPrep,
    attn_partials_len, rope_tables,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{max_abs_scaled, rand_vec};

fn setup() -> Option<Arc<CudaContext>> {
    common::cuda::open_or_skip("the CUDA one-pass attention test")
}

#[derive(Clone, Copy, Debug)]
struct Case {
    hd: usize,
    nh: usize,
    nkv: usize,
    len: usize,
    cap: usize,
}

const fn case(hd: usize, nh: usize, nkv: usize, len: usize, cap: usize) -> Case {
    Case {
        hd,
        nh,
        nkv,
        len,
        cap,
    }
}

/// Runs `run` with f32 output, then with x-prep output, `calls` times each on one
/// partials buffer; every result must match `want`.
fn check_outputs(
    ctx: &Arc<CudaContext>,
    owner: &Owner,
    c: Case,
    want: &[f64],
    calls: usize,
    what: &str,
    mut run: impl FnMut(&mut DeviceBuffer<f32>, AttnOut<'_>),
) -> f64 {
    let n = c.nh * c.hd;
    let mut part = ctx
        .alloc::<f32>(owner, SpanKind::Scratch, attn_partials_len(c.nh, c.cap))
        .unwrap();
    let mut worst = 0f64;
    for _ in 0..calls {
        let mut out = ctx
            .upload(owner, SpanKind::Scratch, &vec![f32::NAN; n])
            .unwrap();
        run(&mut part, AttnOut::F32(&mut out));
        let e = max_abs_scaled(&ctx.download(&out).unwrap(), want);
        assert!(e <= 1e-5, "{what} {c:?}: {e:.3e}");
        worst = worst.max(e);
        let mut prep = XPrep::new(ctx, owner, n).unwrap();
        run(&mut part, AttnOut::Prep(&mut prep));
        let e = max_abs_scaled(&prep.values(ctx, n).unwrap(), want);
        assert!(e <= 1e-5, "{what} -> prep {c:?}: {e:.3e}");
        worst = worst.max(e);
    }
    worst
}

const CASES: [Case; 16] = [
    case(128, 32, 8, 1, 64),
    case(128, 32, 8, 1025, 1100),
    case(128, 32, 8, 4096, 4096),
    case(128, 32, 8, 2049, 4100),
    case(128, 8, 8, 37, 100),
    case(128, 16, 2, 777, 800),
    case(128, 9, 3, 300, 320),
    case(128, 14, 2, 65, 70),
    case(128, 40, 5, 129, 200),
    case(128, 48, 8, 3000, 3001),
    case(64, 9, 3, 1000, 1024),
    case(64, 14, 2, 513, 600),
    case(64, 5, 1, 64, 64),
    case(64, 8, 1, 4000, 4096),
    case(64, 16, 8, 31, 64),
    case(64, 28, 4, 2, 40),
];

#[test]
fn onepass_attention_matches_reference() {
    let Some(ctx) = setup() else { return };
    let mut a = AttentionDecode::load(&ctx).unwrap();
    a.kernel = AttnKernel::OnePass;
    let mut worst = 0f64;
    for (ci, &c) in CASES.iter().enumerate() {
        // The same inputs for both loops over an f16 cache.
        for (f16_cache, tc) in [(true, false), (true, true), (false, false)] {
            a.set_onepass_tc(tc).unwrap();
            let mut rng = StdRng::seed_from_u64(100 + ci as u64 * 2 + u64::from(f16_cache));
            let owner = Owner::mint("cuda-test-attn1");
            let q = rand_vec(&mut rng, c.nh * c.hd, 1.0);
            let k = rand_vec(&mut rng, c.cap * c.nkv * c.hd, 1.0);
            let v = rand_vec(&mut rng, c.cap * c.nkv * c.hd, 2.0);
            let mut cache =
                KvCache::with_head_dim(&ctx, &owner, f16_cache, c.cap, c.nkv, c.hd).unwrap();
            let (k, v) = cache.fill(&ctx, &k, &v).unwrap();
            let scale = 1.0 / (c.hd as f32).sqrt();
            let shape = AttnShape {
                n_heads: c.nh,
                n_kv_heads: c.nkv,
                head_dim: c.hd,
            };
            let n = c.len * c.nkv * c.hd;
            let want =
                reference::attention_causal(&q, &k[..n], &v[..n], shape, c.len - 1, 1, scale);
            let qd = ctx.upload(&owner, SpanKind::Scratch, &q).unwrap();
            // len = *lenp + len_add, read on the device.
            let lenp = ctx
                .upload(&owner, SpanKind::Scratch, &[c.len as i32 - 2])
                .unwrap();
            // PDL alternates with the case; the block count: occupancy, 1, 64; the merge's
            // fences.
            a.pdl = ci % 2 == 1 && common::cuda::pdl_ok(&ctx);
            for (splits, min_keys, light) in [
                (None, 64, false),
                (Some(1), 64, false),
                (Some(64), 1, false),
                (Some(64), 1, true),
                (None, 64, true),
            ] {
                a.splits = splits;
                a.min_keys = min_keys;
                a.light_fence = light;
                let e = check_outputs(&ctx, &owner, c, &want, 2, "attn1", |part, out| {
                    a.decode_hd(
                        &qd, &cache, c.cap, c.nh, c.nkv, c.hd, &lenp, 2, scale, part, out,
                    )
                    .unwrap()
                });
                eprintln!(
                    "attn1 {c:?} f16 {f16_cache} tc {tc} pdl {} splits {splits:?} light {light}: {e:.3e}",
                    a.pdl
                );
                worst = worst.max(e);
            }
            drop((qd, lenp, cache));
            ctx.sweep(&owner).unwrap();
        }
    }
    eprintln!("attn1 worst {worst:.3e}");
}

/// The fused prologue: q|k|v (+ bias) → RMSNorm (optional) → RoPE → KV store, then
/// attention over keys 0..=pos.
#[test]
fn fused_qkv_attention_matches_reference() {
    let Some(ctx) = setup() else { return };
    let mut a = AttentionDecode::load(&ctx).unwrap();
    let (eps, theta) = (1e-6f32, 1_000_000f32);
    let mut worst = [0f64; 3];
    for (ci, &c) in CASES.iter().enumerate() {
        // Each variant with the FMA loop, then (f16 caches) the tensor-core loop, on the
        // same inputs.
        for (variant, tc) in [(0, false), (0, true), (1, false), (1, true)] {
            // 0: q/k norm, NeoX, no bias (Qwen3); 1: bias, no norm, interleaved on odd
            // cases (Llama GGUF) and NeoX on even ones (Qwen2).
            let f16_cache = (ci + variant) % 2 == 0;
            if tc && !f16_cache {
                continue;
            }
            a.set_onepass_tc(tc).unwrap();
            let interleaved = variant == 1 && ci % 2 == 1;
            let mut rng = StdRng::seed_from_u64(500 + ci as u64 * 2 + variant as u64);
            let owner = Owner::mint("cuda-test-attn1-fused");
            let (hd, nh, nkv, cap) = (c.hd, c.nh, c.nkv, c.cap);
            let pos = c.len - 1;
            let heads = nh + 2 * nkv;
            let qkv = rand_vec(&mut rng, heads * hd, 3.0);
            let bias = rand_vec(&mut rng, heads * hd, 0.5);
            let qw = rand_vec(&mut rng, hd, 1.5);
            let kw = rand_vec(&mut rng, hd, 1.5);
            let k0 = rand_vec(&mut rng, cap * nkv * hd, 1.0);
            let v0 = rand_vec(&mut rng, cap * nkv * hd, 2.0);
            let mut cache = KvCache::with_head_dim(&ctx, &owner, f16_cache, cap, nkv, hd).unwrap();
            let (k0, v0) = cache.fill(&ctx, &k0, &v0).unwrap();
            let positions: Vec<usize> = (0..cap).collect();
            let (cs, sn) = rope_tables(&positions, hd, hd, theta);
            let up = |x: &[f32]| ctx.upload(&owner, SpanKind::Scratch, x).unwrap();
            let (qkvd, biasd, qwd, kwd, cd, sd) =
                (up(&qkv), up(&bias), up(&qw), up(&kw), up(&cs), up(&sn));
            let posd = ctx
                .upload(&owner, SpanKind::Scratch, &[pos as i32])
                .unwrap();
            let src = QkvRope {
                qkv: &qkvd,
                bias: (variant == 1).then_some(&biasd),
                qk_norm: (variant == 0).then_some((&qwd, &kwd, eps)),
                cos: &cd,
                sin: &sd,
                interleaved,
            };
            // f64 reference of q and the new k, v.
            let x: Vec<f32> = if variant == 1 {
                qkv.iter().zip(&bias).map(|(a, b)| a + b).collect()
            } else {
                qkv.clone()
            };
            let (qx, rest) = x.split_at(nh * hd);
            let (kx, vx) = rest.split_at(nkv * hd);
            let layout = if interleaved {
                RopeLayout::Interleaved
            } else {
                RopeLayout::NeoX
            };
            let prep = |x: &[f32], w: &[f32], n: usize| -> Vec<f64> {
                let normed: Vec<f32> = if variant == 0 {
                    reference::rms_norm(x, w, eps)
                        .iter()
                        .map(|v| *v as f32)
                        .collect()
                } else {
                    x.to_vec()
                };
                reference::rope(&normed, &[pos], n, hd, hd, theta, layout)
            };
            let want_q = prep(qx, &qw, nh);
            let want_k = prep(kx, &kw, nkv);
            a.pdl = ci % 2 == 0 && common::cuda::pdl_ok(&ctx);
            a.splits = if variant == 1 && ci % 3 == 0 {
                Some(64)
            } else {
                None
            };
            a.min_keys = if a.splits.is_some() { 1 } else { 64 };
            a.light_fence = (ci + variant) % 3 != 0;
            let scale = 1.0 / (hd as f32).sqrt();
            // One call to fill the row; the reference then reads the cache as held.
            let mut part = ctx
                .alloc::<f32>(&owner, SpanKind::Scratch, attn_partials_len(nh, cap))
                .unwrap();
            let mut tmp = ctx
                .alloc::<f32>(&owner, SpanKind::Scratch, nh * hd)
                .unwrap();
            a.decode_qkv(
                &src,
                &mut cache,
                cap,
                nh,
                nkv,
                hd,
                &posd,
                scale,
                &mut part,
                AttnOut::F32(&mut tmp),
            )
            .unwrap();
            let (kh, vh) = cache.held(&ctx).unwrap();
            let row = pos * nkv * hd..(pos + 1) * nkv * hd;
            let (ek, ev, tol) = common::cuda::stored_kv_errors(
                f16_cache,
                &kh[row.clone()],
                &vh[row.clone()],
                &want_k,
                vx,
            );
            assert!(ek <= tol && ev <= tol, "{c:?} stored k {ek:.3e} v {ev:.3e}");
            let untouched = |held: &[f32], was: &[f32]| {
                held.iter()
                    .zip(was)
                    .enumerate()
                    .all(|(i, (h, w))| row.contains(&i) || h.to_bits() == w.to_bits())
            };
            assert!(
                untouched(&kh, &k0) && untouched(&vh, &v0),
                "{c:?}: other rows"
            );
            let q32: Vec<f32> = want_q.iter().map(|v| *v as f32).collect();
            let shape = AttnShape {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
            };
            let n = c.len * nkv * hd;
            let want = reference::attention_causal(&q32, &kh[..n], &vh[..n], shape, pos, 1, scale);
            let e = check_outputs(&ctx, &owner, c, &want, 2, "fused", |part, out| {
                a.decode_qkv(&src, &mut cache, cap, nh, nkv, hd, &posd, scale, part, out)
                    .unwrap()
            });
            eprintln!(
                "fused {c:?} v{variant} tc {tc} f16 {f16_cache} il {interleaved} pdl {} splits {:?} \
                 light {}: attn {e:.3e} k {ek:.3e} v {ev:.3e}",
                a.pdl, a.splits, a.light_fence
            );
            worst[0] = worst[0].max(e);
            worst[usize::from(f16_cache) + 1] = worst[usize::from(f16_cache) + 1].max(ek.max(ev));
            drop((qkvd, biasd, qwd, kwd, cd, sd, posd, part, tmp, cache));
            ctx.sweep(&owner).unwrap();
        }
    }
    eprintln!(
        "fused worst: attn {:.3e}, kv f32 {:.3e}, kv f16 {:.3e}",
        worst[0], worst[1], worst[2]
    );
}
