//! Prefill kernels (`kernels/attn_prefill.cu`) against float64 CPU references on random
//! non-zero inputs:
//! - causal prefill attention over the contiguous KV cache: heads of 64 and 128, GQA
//!   groups 1..8, ragged chunk lengths (1, 17, 70, 130, …), n_past 0 and > 0, f16 and
//!   f32 caches, padded row strides; the reference reads the cache as stored (f16
//!   rounded). Bound: max |gpu − ref| ≤ 5e-5 · max |ref| (the kernel's f16 hi + lo
//!   fragments keep ~22 bits; f32 accumulation); the single-half kernel of the FP8
//!   prefill (`AttnPrecision::Half`, q and p as one f16 each) on the same cases ≤ `HALF_TOL`;
//! - bias + RoPE + KV store over t rows (both pair layouts, with and without bias, with
//!   and without Qwen3's per-head q/k RMSNorm):
//!   q and cache rows ≤ 1e-6 (f32) / 1e-3 (f16 cache, half an f16 ulp) of 1 + |ref|,
//!   cache rows outside the chunk untouched;
//! - RMSNorm, SwiGLU and plain x preparation over t rows: the prepared values ≤ 2e-6 of
//!   the row's max |ref| (the x preparation keeps ~22 bits per 32-value block), and the
//!   padding past the row exactly 0;
//! - `GemvMma::gemv_at` on row i of such a preparation into row i of a multi-row y (MXFP8
//!   and MXFP4, with and without PDL, y = and y +=): each row ≤ 2e-5 of its max |ref|
//!   (the f64 MX linear of the f32 rows), rows and padding it must not touch untouched.
//!
//! Without CUDA each device test prints a loud skip and passes (`FAVLO_REQUIRE_CUDA=1`
//! makes a skip fail). Their kernels' NVRTC compile checks (every arch from sm_80) are in `cuda_warm.rs`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cpu::{WeightRef, reference};
use favlo_runtime::cuda::{
    AttnPrecision, CudaContext, GemvMma, KvCache, MxTiled, PrefillOps, PrefillShape, QkNorm, XPrep,
    tile_mx,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn setup() -> Option<Arc<CudaContext>> {
    common::cuda::open_or_skip("the CUDA prefill test")
}

use common::rand_vec;

/// (stored values as f32, the cache) for random k and v of `n` values.
fn make_cache(
    ctx: &CudaContext,
    owner: &Owner,
    f16c: bool,
    k: &[f32],
    v: &[f32],
) -> (KvCache, Vec<f32>, Vec<f32>) {
    if f16c {
        let kb: Vec<u16> = k.iter().map(|x| f16::from_f32(*x).to_bits()).collect();
        let vb: Vec<u16> = v.iter().map(|x| f16::from_f32(*x).to_bits()).collect();
        let back = |b: &[u16]| b.iter().map(|x| f16::from_bits(*x).to_f32()).collect();
        (
            KvCache::F16 {
                k: ctx.upload(owner, SpanKind::Scratch, &kb).unwrap(),
                v: ctx.upload(owner, SpanKind::Scratch, &vb).unwrap(),
            },
            back(&kb),
            back(&vb),
        )
    } else {
        (
            KvCache::F32 {
                k: ctx.upload(owner, SpanKind::Scratch, k).unwrap(),
                v: ctx.upload(owner, SpanKind::Scratch, v).unwrap(),
            },
            k.to_vec(),
            v.to_vec(),
        )
    }
}

fn cache_values(ctx: &CudaContext, c: &KvCache) -> (Vec<f32>, Vec<f32>) {
    match c {
        KvCache::F16 { k, v } => {
            let f = |b: Vec<u16>| b.iter().map(|x| f16::from_bits(*x).to_f32()).collect();
            (f(ctx.download(k).unwrap()), f(ctx.download(v).unwrap()))
        }
        KvCache::F32 { k, v } => (ctx.download(k).unwrap(), ctx.download(v).unwrap()),
    }
}

/// One attention case: returns max |gpu − ref| / max |ref|.
#[allow(clippy::too_many_arguments)]
fn attention_case(
    ctx: &Arc<CudaContext>,
    ops: &PrefillOps,
    rng: &mut StdRng,
    hd: usize,
    nkv: usize,
    group: usize,
    t: usize,
    n_past: usize,
    (f16c, half): (bool, bool),
) -> f64 {
    let owner = Owner::mint("cuda-attn-prefill");
    let nh = nkv * group;
    let cap = n_past + t + 5;
    let kv = cap * nkv * hd;
    let (k, v) = (rand_vec(rng, kv, 1.0), rand_vec(rng, kv, 1.0));
    let (cache, kf, vf) = make_cache(ctx, &owner, f16c, &k, &v);
    let (ldq, ldo) = (nh * hd + 6, nh * hd + 10);
    let q = rand_vec(rng, t * ldq, 2.5);
    let qd = ctx.upload(&owner, SpanKind::Scratch, &q).unwrap();
    let poison = vec![f32::NAN; t * ldo];
    let mut out = ctx.upload(&owner, SpanKind::Scratch, &poison).unwrap();
    let scale = 1.0 / (hd as f32).sqrt();
    let s = PrefillShape {
        t,
        n_past,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    };
    let precision = if half {
        AttnPrecision::Half
    } else {
        AttnPrecision::Split
    };
    ops.attention(&qd, ldq, &cache, s, scale, &mut out, ldo, precision)
        .unwrap();
    let got = ctx.download(&out).unwrap();
    let mut err = 0f64;
    let mut max = 0f64;
    for i in 0..t {
        let keys = n_past + i + 1;
        for h in 0..nh {
            let g = h / group;
            let qr = &q[i * ldq + h * hd..][..hd];
            let sc: Vec<f64> = (0..keys)
                .map(|j| {
                    let kr = &kf[(j * nkv + g) * hd..][..hd];
                    qr.iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for d in 0..hd {
                let want: f64 = (0..keys)
                    .map(|j| p[j] * vf[(j * nkv + g) * hd + d] as f64)
                    .sum::<f64>()
                    / l;
                let gv = got[i * ldo + h * hd + d];
                assert!(gv.is_finite(), "unwritten/non-finite out[{i}][{h}][{d}]");
                err = err.max((gv as f64 - want).abs());
                max = max.max(want.abs());
            }
        }
        // The row's padding is not touched.
        assert!(
            got[i * ldo + nh * hd..(i + 1) * ldo]
                .iter()
                .all(|x| x.is_nan())
        );
    }
    let rel = err / max;
    eprintln!(
        "attn prefill hd {hd} kv {nkv} group {group} t {t} n_past {n_past} {}{}: max rel err {rel:.2e}",
        if f16c { "f16" } else { "f32" },
        if half { " (single halves)" } else { "" }
    );
    rel
}

/// Bound of the single-half kernel (`AttnPrecision::Half`): q·scale and p rounded
/// to f16 (2^-11 relative each). Measured on an H200 (2026-12-01): 2.3e-4 – 3.5e-4.
const HALF_TOL: f64 = 1e-3;

#[test]
fn prefill_attention_matches_f64() {
    let Some(ctx) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    let tol = 5e-5;
    // The default models' shapes and a Qwen3-like one, ragged t, n_past 0 and > 0.
    let cases = [
        (64, 3, 3, 37, 0, true), // SmolLM2-135M
        (64, 3, 3, 130, 45, false),
        (64, 2, 7, 70, 0, false), // Qwen2.5-0.5B
        (64, 2, 7, 17, 300, true),
        (128, 8, 4, 130, 0, true), // Qwen3-8B-like
        (128, 2, 4, 1, 77, false),
        (128, 1, 8, 64, 33, true),
    ];
    for (hd, nkv, g, t, np, f16c) in cases {
        let e = attention_case(&ctx, &ops, &mut rng, hd, nkv, g, t, np, (f16c, false));
        assert!(e <= tol, "hd {hd} group {g} t {t} n_past {np}: {e:.2e}");
        // The single-half kernel (f16 caches; an f32 cache takes the exact one).
        let e = attention_case(&ctx, &ops, &mut rng, hd, nkv, g, t, np, (f16c, true));
        let bound = if f16c { HALF_TOL } else { tol };
        assert!(
            e <= bound,
            "half: hd {hd} group {g} t {t} n_past {np}: {e:.2e}"
        );
    }
    // Every group size 1..8 on both head sizes and caches.
    for g in 1..=8 {
        for hd in [64, 128] {
            let t = rng.random_range(1..90);
            let np = rng.random_range(0..120);
            let f16c = g % 2 == 0;
            let e = attention_case(&ctx, &ops, &mut rng, hd, 2, g, t, np, (f16c, false));
            assert!(e <= tol, "hd {hd} group {g} t {t} n_past {np}: {e:.2e}");
            if f16c {
                let e = attention_case(&ctx, &ops, &mut rng, hd, 2, g, t, np, (true, true));
                assert!(e <= HALF_TOL, "half: hd {hd} group {g} t {t}: {e:.2e}");
            }
        }
    }
}

#[test]
fn rows_bias_rope_store_matches_f64() {
    let Some(ctx) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let owner = Owner::mint("cuda-prefill-rope");
    let mut rng = StdRng::seed_from_u64(11);
    for (hd, nh, nkv, t, n_past, interleaved, bias, f16c, qk_norm) in [
        (64, 9, 3, 21, 0, true, false, true, false), // SmolLM2: GGUF Llama pairs
        (64, 14, 2, 33, 50, false, true, false, false), // Qwen2.5: NeoX + q|k|v bias
        (128, 8, 2, 5, 7, false, true, true, false),
        (128, 4, 4, 9, 0, true, false, false, false),
        (128, 32, 8, 37, 0, false, false, true, true), // Qwen3-8B: q/k norms, NeoX
        (128, 16, 8, 12, 29, false, false, false, true), // Qwen3-1.7B
        (64, 6, 2, 7, 3, true, true, false, true),     // the 64-wide reduction
    ] {
        let heads = nh + 2 * nkv;
        let ld = heads * hd + 4;
        let cap = n_past + t + 3;
        let half_d = hd / 2;
        let mut cos = Vec::new();
        let mut sin = Vec::new();
        for p in 0..cap {
            for i in 0..half_d {
                let a = p as f64 * 10000f64.powf(-(2.0 * i as f64) / hd as f64);
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let qkv = rand_vec(&mut rng, t * ld, 1.5);
        let b = rand_vec(&mut rng, heads * hd, 0.5);
        let (qn, kn) = (rand_vec(&mut rng, hd, 1.0), rand_vec(&mut rng, hd, 1.0));
        let eps = 1e-6f32;
        let qn_d = ctx.upload(&owner, SpanKind::Scratch, &qn).unwrap();
        let kn_d = ctx.upload(&owner, SpanKind::Scratch, &kn).unwrap();
        let norm = qk_norm.then_some(QkNorm {
            q: &qn_d,
            k: &kn_d,
            eps,
        });
        let kv = cap * nkv * hd;
        let (k0, v0) = (rand_vec(&mut rng, kv, 1.0), rand_vec(&mut rng, kv, 1.0));
        let (mut cache, k0f, v0f) = make_cache(&ctx, &owner, f16c, &k0, &v0);
        let qkv_d = ctx.upload(&owner, SpanKind::Scratch, &qkv).unwrap();
        let bias_d = ctx.upload(&owner, SpanKind::Scratch, &b).unwrap();
        let cos_d = ctx.upload(&owner, SpanKind::Resident, &cos).unwrap();
        let sin_d = ctx.upload(&owner, SpanKind::Resident, &sin).unwrap();
        let ldq = nh * hd;
        let mut q_d = ctx
            .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; t * ldq])
            .unwrap();
        let s = PrefillShape {
            t,
            n_past,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        ops.bias_rope_store(
            &qkv_d,
            ld,
            bias.then_some(&bias_d),
            norm,
            &cos_d,
            &sin_d,
            s,
            interleaved,
            &mut q_d,
            ldq,
            &mut cache,
        )
        .unwrap();
        let q = ctx.download(&q_d).unwrap();
        let (kc, vc) = cache_values(&ctx, &cache);
        let ctol = if f16c { 1e-3 } else { 1e-6 };
        let (mut eq, mut ec) = (0f64, 0f64);
        let sc = |g: f32, w: f64| (g as f64 - w).abs() / (1.0 + w.abs());
        for i in 0..t {
            let pos = n_past + i;
            for h in 0..heads {
                let mut x: Vec<f64> = (0..hd)
                    .map(|d| {
                        qkv[i * ld + h * hd + d] as f64
                            + if bias { b[h * hd + d] as f64 } else { 0.0 }
                    })
                    .collect();
                if qk_norm && h < nh + nkv {
                    let w = if h < nh { &qn } else { &kn };
                    let ms = x.iter().map(|v| v * v).sum::<f64>() / hd as f64;
                    let inv = 1.0 / (ms + eps as f64).sqrt();
                    for (v, wd) in x.iter_mut().zip(w) {
                        *v *= inv * *wd as f64;
                    }
                }
                let rot: Vec<f64> = if h >= nh + nkv {
                    x.clone()
                } else {
                    let mut r = x.clone();
                    for j in 0..half_d {
                        let (a, bb) = if interleaved {
                            (2 * j, 2 * j + 1)
                        } else {
                            (j, j + half_d)
                        };
                        let (c, s) = (cos[pos * half_d + j] as f64, sin[pos * half_d + j] as f64);
                        r[a] = x[a] * c - x[bb] * s;
                        r[bb] = x[a] * s + x[bb] * c;
                    }
                    r
                };
                for d in 0..hd {
                    if h < nh {
                        eq = eq.max(sc(q[i * ldq + h * hd + d], rot[d]));
                    } else if h < nh + nkv {
                        ec = ec.max(sc(kc[(pos * nkv + h - nh) * hd + d], rot[d]));
                    } else {
                        ec = ec.max(sc(vc[(pos * nkv + h - nh - nkv) * hd + d], rot[d]));
                    }
                }
            }
        }
        // Rows outside the chunk keep what they held.
        for p in (0..n_past).chain(n_past + t..cap) {
            let r = p * nkv * hd..(p + 1) * nkv * hd;
            assert_eq!(kc[r.clone()], k0f[r.clone()], "k row {p} touched");
            assert_eq!(vc[r.clone()], v0f[r], "v row {p} touched");
        }
        eprintln!(
            "rows rope hd {hd} heads {nh}/{nkv} t {t} n_past {n_past} interleaved {interleaved} bias {bias} qk norm {qk_norm} f16 {f16c}: q {eq:.2e} cache {ec:.2e}"
        );
        assert!(eq <= 1e-6, "q err {eq:.2e}");
        assert!(ec <= ctol, "cache err {ec:.2e}");
    }
}

/// Checks prepared rows: values within 2e-6 of each row's max |ref|, padding exactly 0.
fn check_prep(ctx: &CudaContext, prep: &XPrep, want: &[Vec<f64>], pcols: usize, what: &str) {
    let t = want.len();
    let got = prep.values(ctx, t * pcols).unwrap();
    for (i, w) in want.iter().enumerate() {
        let row = &got[i * pcols..(i + 1) * pcols];
        let max = w.iter().fold(0f64, |a, b| a.max(b.abs()));
        let err = w
            .iter()
            .zip(row)
            .fold(0f64, |a, (w, g)| a.max((*g as f64 - w).abs()));
        assert!(
            err <= 2e-6 * max,
            "{what} row {i}: err {err:.3e} of max {max:.3e}"
        );
        assert!(
            row[w.len()..].iter().all(|v| *v == 0.0),
            "{what} row {i}: padding not zero"
        );
    }
}

#[test]
fn rows_norm_swiglu_prep_match_f64() {
    let Some(ctx) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let owner = Owner::mint("cuda-prefill-rows");
    let mut rng = StdRng::seed_from_u64(12);
    for (dim, t) in [(576usize, 7usize), (896, 3), (4096, 2)] {
        let pcols = dim.div_ceil(256) * 256 + 256;
        let ldx = dim + 32;
        let mut prep = XPrep::new(&ctx, &owner, t * pcols).unwrap();
        // Poison: a full-width prep of random rows first, so zeros must be written.
        let junk = rand_vec(&mut rng, t * pcols, 3.0);
        let junk_d = ctx.upload(&owner, SpanKind::Scratch, &junk).unwrap();
        ops.prep_rows(&junk_d, pcols, t, pcols, pcols, &mut prep)
            .unwrap();
        // RMSNorm rows.
        let x = rand_vec(&mut rng, t * ldx, 4.0);
        let w = rand_vec(&mut rng, dim, 1.0);
        let eps = 1e-5f32;
        let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
        let wd = ctx.upload(&owner, SpanKind::Resident, &w).unwrap();
        ops.rms_norm_prep(&xd, ldx, t, &wd, eps, pcols, &mut prep)
            .unwrap();
        let want: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                let r = &x[i * ldx..i * ldx + dim];
                let ms = r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / dim as f64;
                let inv = 1.0 / (ms + eps as f64).sqrt();
                r.iter()
                    .zip(&w)
                    .map(|(a, b)| *a as f64 * inv * *b as f64)
                    .collect()
            })
            .collect();
        check_prep(&ctx, &prep, &want, pcols, "rms_norm_prep");
        // Plain rows.
        ops.prep_rows(&junk_d, pcols, t, pcols, pcols, &mut prep)
            .unwrap();
        ops.prep_rows(&xd, ldx, t, dim, pcols, &mut prep).unwrap();
        let want: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                x[i * ldx..i * ldx + dim]
                    .iter()
                    .map(|v| *v as f64)
                    .collect()
            })
            .collect();
        check_prep(&ctx, &prep, &want, pcols, "prep_rows");
        // SwiGLU rows (gate|up of n = dim each).
        ops.prep_rows(&junk_d, pcols, t, pcols, pcols, &mut prep)
            .unwrap();
        let ldgu = 2 * dim + 64;
        let gu = rand_vec(&mut rng, t * ldgu, 4.0);
        let gud = ctx.upload(&owner, SpanKind::Scratch, &gu).unwrap();
        ops.swiglu_prep(&gud, ldgu, t, dim, pcols, &mut prep)
            .unwrap();
        let want: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                let r = &gu[i * ldgu..];
                (0..dim)
                    .map(|j| {
                        let g = r[j] as f64;
                        g / (1.0 + (-g).exp()) * r[dim + j] as f64
                    })
                    .collect()
            })
            .collect();
        check_prep(&ctx, &prep, &want, pcols, "swiglu_prep");
        eprintln!("rows norm / prep / swiglu dim {dim} t {t}: ok");
    }
}

#[test]
fn gemv_at_rows_match_f64() {
    let Some(ctx) = setup() else { return };
    let ops = PrefillOps::load(&ctx).unwrap();
    let mut g = GemvMma::load(&ctx).unwrap();
    let owner = Owner::mint("cuda-prefill-gemv-at");
    let mut rng = StdRng::seed_from_u64(13);
    let (rows, cols, t) = (200usize, 576usize, 5usize);
    let (pcols, ldy) = (768usize, rows + 8);
    for format in [ElementFormat::Fp8E4M3, ElementFormat::Fp4E2M1] {
        for pdl in [false, true] {
            g.pdl = pdl && common::cuda::pdl_ok(&ctx);
            let w = rand_vec(&mut rng, rows * cols, 1.0);
            let layout = MxLayout { format, rows, cols };
            let mut packed = vec![0u8; layout.total_bytes()];
            favlo_mx::pack(&w, layout, ScaleRule::default(), &mut packed).unwrap();
            let view = MxView::new(layout, &packed).unwrap();
            let wd = MxTiled::upload(&ctx, &owner, &tile_mx(view)).unwrap();
            let x = rand_vec(&mut rng, t * cols, 2.0);
            let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
            let mut prep = XPrep::new(&ctx, &owner, t * pcols).unwrap();
            ops.prep_rows(&xd, cols, t, cols, pcols, &mut prep).unwrap();
            for acc in [false, true] {
                let y0 = rand_vec(&mut rng, t * ldy, 1.0);
                let mut y = ctx.upload(&owner, SpanKind::Scratch, &y0).unwrap();
                // Rows 0, 2, 4 only: rows 1 and 3 must keep y0.
                for i in (0..t).step_by(2) {
                    g.gemv_at(&wd, &prep, i * pcols, &mut y, i * ldy, acc)
                        .unwrap();
                }
                let got = ctx.download(&y).unwrap();
                for i in 0..t {
                    let r = &got[i * ldy..(i + 1) * ldy];
                    if i % 2 == 1 {
                        assert_eq!(r, &y0[i * ldy..(i + 1) * ldy], "row {i} touched");
                        continue;
                    }
                    let mut want =
                        reference::linear(&x[i * cols..(i + 1) * cols], &WeightRef::Mx(view), None);
                    if acc {
                        for (w, b) in want.iter_mut().zip(&y0[i * ldy..]) {
                            *w += *b as f64;
                        }
                    }
                    let max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
                    let err = want
                        .iter()
                        .zip(r)
                        .fold(0f64, |a, (w, g)| a.max((*g as f64 - w).abs()));
                    assert!(
                        err <= 2e-5 * max,
                        "{format:?} pdl {pdl} acc {acc} row {i}: {:.2e}",
                        err / max
                    );
                    assert_eq!(r[rows..], y0[i * ldy + rows..(i + 1) * ldy], "row {i} tail");
                }
                eprintln!("gemv_at {format:?} {rows}x{cols} pdl {pdl} accumulate {acc}: ok");
            }
        }
    }
}
