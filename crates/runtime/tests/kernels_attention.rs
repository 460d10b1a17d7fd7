//! Causal (prefill with n_past > 0, decode, GQA) and bidirectional masked attention
//! against the f64 reference. Tolerance: max |a - b| / max |b| ≤ 1e-5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_runtime::cpu::{self, AttnShape, reference, simd};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{rand_vec, rel_err};

#[test]
fn causal_prefill_and_decode_gqa() {
    let mut rng = StdRng::seed_from_u64(21);
    for isa in simd::available_isas() {
        simd::set_isa_cap(Some(isa));
        // (heads, kv heads, head dim, n_past, t): GQA 4, MHA, odd head dims, t > token block.
        for &(nh, nkv, hd, n_past, t) in &[
            (8, 2, 40, 7, 5),
            (8, 2, 64, 33, 1),
            (4, 4, 33, 0, 9),
            (12, 3, 17, 5, 37),
            (32, 8, 128, 300, 1),
        ] {
            let shape = AttnShape {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
            };
            let cap = n_past + t + 3; // capacity larger than used: extra rows must be ignored
            let q = rand_vec(&mut rng, t * nh * hd, 1.0);
            let k = rand_vec(&mut rng, cap * nkv * hd, 1.0);
            let v = rand_vec(&mut rng, cap * nkv * hd, 1.0);
            let scale = 1.0 / (hd as f32).sqrt();
            let mut out = vec![f32::NAN; t * nh * hd];
            cpu::attention_causal(&q, &k, &v, &mut out, shape, n_past, t, scale);
            let want = reference::attention_causal(&q, &k, &v, shape, n_past, t, scale);
            let e = rel_err(&out, &want);
            assert!(e <= 1e-5, "{isa:?} {shape:?} n_past={n_past} t={t}: {e}");
        }
    }
    simd::set_isa_cap(None);
}

#[test]
fn full_attention_with_key_mask() {
    let mut rng = StdRng::seed_from_u64(22);
    for &(nh, nkv, hd, s) in &[(4, 4, 32, 11), (12, 12, 64, 40), (6, 2, 24, 19)] {
        let shape = AttnShape {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        let q = rand_vec(&mut rng, s * nh * hd, 2.0);
        let k = rand_vec(&mut rng, s * nkv * hd, 2.0);
        let v = rand_vec(&mut rng, s * nkv * hd, 1.0);
        let mask: Vec<bool> = (0..s).map(|j| j % 4 != 3 && j < s - 2).collect();
        let scale = 1.0 / (hd as f32).sqrt();
        for m in [None, Some(mask.as_slice())] {
            let mut out = vec![f32::NAN; s * nh * hd];
            cpu::attention_full(&q, &k, &v, &mut out, shape, s, m, scale);
            let e = rel_err(
                &out,
                &reference::attention_full(&q, &k, &v, shape, s, m, scale),
            );
            assert!(e <= 1e-5, "{shape:?} s={s} masked={}: {e}", m.is_some());
        }
    }
}
