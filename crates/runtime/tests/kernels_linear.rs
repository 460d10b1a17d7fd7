//! `linear` (f32 / bf16 / f16 / MXFP4 / MXFP8 weights) against the f64 reference
//! product of the *decoded* weights (decoded by `half` / `favlo_mx`, not by the kernels),
//! on every ISA this CPU has. Tolerance: max |y - y_ref| / max |y_ref| ≤ 1e-5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use favlo_runtime::cpu::{self, WeightRef, reference, simd};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Unscaled inputs in (−0.99, 1.01).
fn rand_vec(rng: &mut StdRng, n: usize) -> Vec<f32> {
    common::rand_vec(rng, n, 1.0)
}

use common::rel_err;

enum Kind {
    F32,
    Bf16,
    F16,
    Mx(ElementFormat),
}

struct Owned {
    f32s: Vec<f32>,
    bf: Vec<bf16>,
    hf: Vec<f16>,
    mx: Vec<u8>,
    layout: Option<MxLayout>,
    n: usize,
    k: usize,
}

impl Owned {
    fn new(kind: &Kind, w: Vec<f32>, n: usize, k: usize) -> Owned {
        let mut o = Owned {
            f32s: Vec::new(),
            bf: Vec::new(),
            hf: Vec::new(),
            mx: Vec::new(),
            layout: None,
            n,
            k,
        };
        match kind {
            Kind::F32 => o.f32s = w,
            Kind::Bf16 => o.bf = w.iter().map(|v| bf16::from_f32(*v)).collect(),
            Kind::F16 => o.hf = w.iter().map(|v| f16::from_f32(*v)).collect(),
            Kind::Mx(format) => {
                let layout = MxLayout {
                    format: *format,
                    rows: n,
                    cols: k,
                };
                o.mx = vec![0u8; layout.total_bytes()];
                favlo_mx::pack(&w, layout, ScaleRule::Ceil, &mut o.mx).unwrap();
                o.layout = Some(layout);
            }
        }
        o
    }

    fn view(&self) -> WeightRef<'_> {
        let (n, k) = (self.n, self.k);
        if let Some(l) = self.layout {
            WeightRef::Mx(MxView::new(l, &self.mx).unwrap())
        } else if !self.bf.is_empty() {
            WeightRef::Bf16 {
                data: &self.bf,
                n,
                k,
            }
        } else if !self.hf.is_empty() {
            WeightRef::F16 {
                data: &self.hf,
                n,
                k,
            }
        } else {
            WeightRef::F32 {
                data: &self.f32s,
                n,
                k,
            }
        }
    }
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind::F32,
        Kind::Bf16,
        Kind::F16,
        Kind::Mx(ElementFormat::Fp4E2M1),
        Kind::Mx(ElementFormat::Fp8E4M3),
    ]
}

fn check(rng: &mut StdRng, kind: &Kind, m: usize, n: usize, k: usize, with_bias: bool) {
    // Wide dynamic range across blocks so MX scales differ per block.
    let w: Vec<f32> = (0..n * k)
        .map(|i| (rng.random_range(-1.0f32..1.0) + 0.01) * (1 + (i / 32) % 5) as f32)
        .collect();
    let x = rand_vec(rng, m * k);
    let bias = rand_vec(rng, n);
    let owned = Owned::new(kind, w, n, k);
    let wr = owned.view();
    let b = with_bias.then_some(bias.as_slice());
    let want = reference::linear(&x, &wr, b);
    let mut got = vec![f32::NAN; m * n];
    cpu::linear(&x, wr, b, &mut got);
    let e = rel_err(&got, &want);
    assert!(
        e <= 1e-5,
        "isa {:?} m={m} n={n} k={k}: rel err {e}",
        simd::isa()
    );
}

#[test]
fn linear_odd_shapes_every_isa_and_type() {
    let mut rng = StdRng::seed_from_u64(7);
    for isa in simd::available_isas() {
        simd::set_isa_cap(Some(isa));
        for kind in kinds() {
            for &(m, n, k) in &[
                (1, 37, 45),
                (2, 19, 100),
                (3, 5, 31),
                (4, 64, 257),
                (7, 33, 96),
                (9, 40, 77),
                (33, 70, 300),
            ] {
                check(&mut rng, &kind, m, n, k, m % 2 == 1);
            }
        }
    }
    simd::set_isa_cap(None);
}

#[test]
fn linear_realistic_896x4864() {
    let mut rng = StdRng::seed_from_u64(11);
    for kind in [
        Kind::Mx(ElementFormat::Fp4E2M1),
        Kind::Mx(ElementFormat::Fp8E4M3),
        Kind::Bf16,
    ] {
        check(&mut rng, &kind, 1, 896, 4864, false);
    }
    check(
        &mut rng,
        &Kind::Mx(ElementFormat::Fp4E2M1),
        3,
        4864,
        896,
        true,
    );
}

#[test]
fn linear_k_zero_gives_bias() {
    let w: Vec<f32> = Vec::new();
    let bias = [1.5f32, -2.0, 0.25];
    let mut out = [0f32; 6];
    cpu::linear(
        &[],
        WeightRef::F32 {
            data: &w,
            n: 3,
            k: 0,
        },
        Some(&bias),
        &mut out,
    );
    assert_eq!(out, [1.5, -2.0, 0.25, 1.5, -2.0, 0.25]);
}
