//! Norms, RoPE, activations, softmax, matmul, embedding and sampling against the f64
//! scalar reference in `cpu::reference`, on random non-zero inputs at odd shapes.
//! Tolerances: max |a - b| / max |b| ≤ 1e-5 (matmul, embedding ≤ 1e-6) unless stated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cpu::{self, Rope, RopeLayout, WeightRef, reference, simd};
use half::{bf16, f16};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{rand_vec, rel_err};

/// Elementwise relative error, for functions whose outputs span many magnitudes.
fn max_elem_rel(got: &[f32], want: &[f64], floor: f64) -> f64 {
    got.iter().zip(want).fold(0f64, |a, (g, w)| {
        a.max((*g as f64 - w).abs() / w.abs().max(floor))
    })
}

#[test]
fn matmul_matches_reference() {
    let mut rng = StdRng::seed_from_u64(1);
    for &(m, k, n) in &[(1, 7, 5), (13, 33, 17), (64, 96, 130)] {
        let a = rand_vec(&mut rng, m * k, 1.0);
        let b = rand_vec(&mut rng, k * n, 1.0);
        let mut out = vec![0f32; m * n];
        cpu::matmul(&a, &b, &mut out, m, k, n);
        let e = rel_err(&out, &reference::matmul(&a, &b, m, k, n));
        assert!(e <= 1e-5, "matmul {m}x{k}x{n}: {e}");
    }
}

#[test]
fn norms_match_reference() {
    let mut rng = StdRng::seed_from_u64(2);
    for isa in simd::available_isas() {
        simd::set_isa_cap(Some(isa));
        for &(rows, dim) in &[(1, 7), (3, 65), (40, 896), (70, 1024)] {
            let x = rand_vec(&mut rng, rows * dim, 3.0);
            let w = rand_vec(&mut rng, dim, 1.0);
            let b = rand_vec(&mut rng, dim, 1.0);
            let mut out = vec![0f32; rows * dim];
            cpu::rms_norm(&x, &w, 1e-6, &mut out);
            let e = rel_err(&out, &reference::rms_norm(&x, &w, 1e-6));
            assert!(e <= 1e-5, "rms_norm {rows}x{dim}: {e}");
            cpu::layer_norm(&x, &w, &b, 1e-5, &mut out);
            let e = rel_err(&out, &reference::layer_norm(&x, &w, &b, 1e-5));
            assert!(e <= 1e-5, "layer_norm {rows}x{dim}: {e}");
        }
    }
    simd::set_isa_cap(None);
}

#[test]
fn rope_both_layouts_partial_and_large_positions() {
    let mut rng = StdRng::seed_from_u64(3);
    for layout in [RopeLayout::Interleaved, RopeLayout::NeoX] {
        for &(hd, rot, heads) in &[(64, 64, 3), (80, 32, 2), (128, 128, 5)] {
            let t = 4;
            let x = rand_vec(&mut rng, t * heads * hd, 1.0);
            let pos = [0usize, 1, 517, 30001];
            let rope = Rope::new(hd, rot, 10000.0, layout);
            let mut got = x.clone();
            rope.apply(&mut got, &pos, heads);
            let want = reference::rope(&x, &pos, heads, hd, rot, 10000.0, layout);
            // f32 rounding of sin/cos and the products: ~1e-7 relative.
            let e = rel_err(&got, &want);
            assert!(e <= 1e-6, "{layout:?} hd={hd} rot={rot}: {e}");
            // The dims past rot_dim are untouched.
            for (g, o) in got.chunks(hd).zip(x.chunks(hd)) {
                assert_eq!(&g[rot..], &o[rot..]);
            }
        }
    }
}

#[test]
fn softmax_and_activations_match_reference() {
    let mut rng = StdRng::seed_from_u64(4);
    let x = rand_vec(&mut rng, 3 * 1001, 8.0);
    let mut s = x.clone();
    cpu::softmax(&mut s, 1001);
    assert!(max_elem_rel(&s, &reference::softmax(&x, 1001), 1e-30) <= 1e-5);

    let big = rand_vec(&mut rng, 70_001, 6.0); // large enough for the threaded path
    for (name, f, r) in [
        (
            "silu",
            cpu::silu as fn(&mut [f32]),
            reference::silu as fn(f64) -> f64,
        ),
        ("gelu", cpu::gelu, reference::gelu),
        ("gelu_tanh", cpu::gelu_tanh, reference::gelu_tanh),
    ] {
        let mut got = big.clone();
        f(&mut got);
        let want: Vec<f64> = big.iter().map(|v| r(*v as f64)).collect();
        // Per element: absolute error below 1 in magnitude, relative above; ≤ 1e-6.
        let e = max_elem_rel(&got, &want, 1.0);
        assert!(e <= 1e-6, "{name}: {e}");
    }

    let gate = rand_vec(&mut rng, 999, 4.0);
    let up = rand_vec(&mut rng, 999, 2.0);
    let mut out = vec![0f32; 999];
    cpu::swiglu(&gate, &up, &mut out);
    let want: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(g, u)| reference::silu(*g as f64) * *u as f64)
        .collect();
    assert!(rel_err(&out, &want) <= 1e-6);

    let mut acc = gate.clone();
    cpu::add(&mut acc, &up);
    let want: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(g, u)| *g as f64 + *u as f64)
        .collect();
    assert!(rel_err(&acc, &want) <= 1e-7);
}

#[test]
fn erf_absolute_error_below_1e6() {
    let mut worst = 0f64;
    for i in -8000..=8000 {
        let x = i as f32 * 0.001;
        worst = worst.max((cpu::erf(x) as f64 - reference::erf(x as f64)).abs());
    }
    assert!(worst < 1e-6, "erf max abs err {worst}");
    // The f64 reference itself, against known values (A&S table 7.1).
    assert!((reference::erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
    assert!((reference::erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-15);
}

#[test]
fn embedding_all_table_types() {
    let mut rng = StdRng::seed_from_u64(5);
    let (n, k) = (50, 70);
    let t = rand_vec(&mut rng, n * k, 2.0);
    let ids = [3u32, 0, 49, 3, 17];
    let bf: Vec<bf16> = t.iter().map(|v| bf16::from_f32(*v)).collect();
    let hf: Vec<f16> = t.iter().map(|v| f16::from_f32(*v)).collect();
    let layout = MxLayout {
        format: ElementFormat::Fp4E2M1,
        rows: n,
        cols: k,
    };
    let mut mx = vec![0u8; layout.total_bytes()];
    favlo_mx::pack(&t, layout, ScaleRule::Ceil, &mut mx).unwrap();
    let l8 = MxLayout {
        format: ElementFormat::Fp8E4M3,
        rows: n,
        cols: k,
    };
    let mut mx8 = vec![0u8; l8.total_bytes()];
    favlo_mx::pack(&t, l8, ScaleRule::Ceil, &mut mx8).unwrap();
    let tables = [
        WeightRef::F32 { data: &t, n, k },
        WeightRef::Bf16 { data: &bf, n, k },
        WeightRef::F16 { data: &hf, n, k },
        WeightRef::Mx(MxView::new(layout, &mx).unwrap()),
        WeightRef::Mx(MxView::new(l8, &mx8).unwrap()),
    ];
    for table in tables {
        let mut out = vec![0f32; ids.len() * k];
        cpu::embedding(table, &ids, &mut out);
        assert!(rel_err(&out, &reference::embedding(&table, &ids)) <= 1e-7);
    }
}

#[test]
fn argmax_and_top_k() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut x = rand_vec(&mut rng, 151_937, 10.0);
    x[1234] = 50.0;
    x[99] = 50.0; // tie: lower index wins
    assert_eq!(cpu::argmax(&x), 99);
    assert_eq!(cpu::argmax(&x), reference::argmax(&x));
    for k in [1, 5, 40] {
        assert_eq!(cpu::top_k(&x, k), reference::top_k(&x, k));
    }
    assert_eq!(cpu::top_k(&x[..3], 10).len(), 3);
    assert_eq!(cpu::argmax(&[f32::NAN, -1.0, -0.5]), 2);
}
