//! `cpu::amx::gemm` (bf16 and bf16x3 tile GEMM on packed B) against an f64 scalar product of
//! the unrounded f32 inputs, on the AMX path (when this CPU has it) and on the fallback,
//! with 1 and 2 threads, both B layouts, bias / accumulate, leading dimensions wider than
//! the rows, and ragged m, n, k.
//!
//! Error measure: per element, |got − want| / Σ_p |a_ip · b_pj| (the sum of absolute
//! products, which bounds any rounding of the terms). Tolerances: bf16 ≤ 6e-3 (both
//! operands rounded to 8-bit mantissas: ≤ 2⁻⁸ per product, plus f32 summation); bf16x3
//! ≤ 2e-5 (hi+lo splits leave ≈ 2⁻¹⁶ per product, plus f32 summation over k ≤ 1536), and
//! the bf16x3 error is also required to be 100× below the bf16 one on the same shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_runtime::cpu::amx::{self, BLayout, Backend, GemmOpts, PackedB, Precision};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Case {
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldc: usize,
}

const CASES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 384, 384),
    (3, 17, 33),
    (16, 16, 32),
    (31, 47, 65),
    (32, 32, 32),
    (45, 100, 7),
    (64, 96, 384),
    (97, 130, 100),
    (200, 64, 1536),
    (300, 1152, 384),
];

/// Max over elements of |got − want| / Σ|a·b| (want and the sum in f64).
#[allow(clippy::too_many_arguments)]
fn max_err(
    c: &Case,
    a: &[f32],
    w: &[f32],
    layout: BLayout,
    bias: Option<&[f32]>,
    init: Option<&[f32]>,
    got: &[f32],
) -> f64 {
    let mut worst = 0f64;
    for i in 0..c.m {
        for j in 0..c.n {
            let (mut s, mut abs) = (0f64, 0f64);
            for p in 0..c.k {
                let b = match layout {
                    BLayout::Nk => w[j * c.k + p],
                    BLayout::Kn => w[p * c.n + j],
                };
                let t = f64::from(a[i * c.lda + p]) * f64::from(b);
                s += t;
                abs += t.abs();
            }
            if let Some(bi) = bias {
                s += f64::from(bi[j]);
                abs += f64::from(bi[j]).abs();
            }
            if let Some(init) = init {
                s += f64::from(init[i * c.ldc + j]);
                abs += f64::from(init[i * c.ldc + j]).abs();
            }
            let e = (f64::from(got[i * c.ldc + j]) - s).abs() / abs.max(1e-30);
            worst = worst.max(e);
        }
    }
    worst
}

fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::Bf16 => 6e-3,
        Precision::Bf16x3 => 2e-5,
    }
}

/// Runs one configuration and returns its max error (asserting untouched padding of C).
#[allow(clippy::too_many_arguments)]
fn run_one(
    rng: &mut StdRng,
    pool: &rayon::ThreadPool,
    c: &Case,
    precision: Precision,
    layout: BLayout,
    backend: Backend,
    with_bias: bool,
    accumulate: bool,
) -> f64 {
    let a = common::rand_vec(rng, (c.m - 1) * c.lda + c.k, 1.0);
    let w = common::rand_vec(rng, c.n * c.k, 0.5);
    let bias = common::rand_vec(rng, c.n, 0.3);
    let init = common::rand_vec(rng, (c.m - 1) * c.ldc + c.n, 0.7);
    let packed = amx::pack_b(&w, layout, c.n, c.k, precision);
    let b = PackedB::new(&packed, c.n, c.k, precision).unwrap();
    let mut got = init.clone();
    let opts = GemmOpts {
        bias: with_bias.then_some(&bias[..]),
        accumulate,
        parallel: true,
        backend,
        post: None,
    };
    pool.install(|| amx::gemm(c.m, &a, c.lda, &b, &mut got, c.ldc, &opts));
    // Columns n..ldc of each row are not C's: they must be untouched.
    for i in 0..c.m {
        for j in c.n..c.ldc.min(got.len() - i * c.ldc) {
            assert_eq!(got[i * c.ldc + j], init[i * c.ldc + j], "wrote outside C");
        }
    }
    max_err(
        c,
        &a,
        &w,
        layout,
        with_bias.then_some(&bias[..]),
        accumulate.then_some(&init[..]),
        &got,
    )
}

fn pools() -> Vec<rayon::ThreadPool> {
    [1, 2]
        .iter()
        .map(|&t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        })
        .collect()
}

fn backends() -> Vec<Backend> {
    eprintln!("AMX available: {}", amx::available());
    vec![Backend::Auto, Backend::Fallback]
}

#[test]
fn amx_gemm_matches_f64_on_ragged_shapes() {
    let mut rng = StdRng::seed_from_u64(0xA3);
    let pools = pools();
    for backend in backends() {
        for &(m, n, k) in CASES {
            let c = Case {
                m,
                n,
                k,
                lda: k,
                ldc: n,
            };
            let mut errs = [0f64; 2];
            for (pi, precision) in [Precision::Bf16, Precision::Bf16x3].into_iter().enumerate() {
                for pool in &pools {
                    let e = run_one(
                        &mut rng,
                        pool,
                        &c,
                        precision,
                        BLayout::Nk,
                        backend,
                        false,
                        false,
                    );
                    assert!(
                        e <= tolerance(precision),
                        "{backend:?} {precision:?} m={m} n={n} k={k} threads={}: {e:e}",
                        pool.current_num_threads()
                    );
                    errs[pi] = errs[pi].max(e);
                }
            }
            eprintln!(
                "{backend:?} m={m} n={n} k={k}: bf16 {:.2e}, bf16x3 {:.2e}",
                errs[0], errs[1]
            );
            // Only the AMX path rounds A; the fallback's bf16 error is B's alone.
            if k >= 32 && backend == Backend::Auto && amx::available() {
                assert!(errs[1] * 100.0 < errs[0], "bf16x3 not finer than bf16");
            }
        }
    }
}

#[test]
fn amx_gemm_bias_accumulate_strides_and_layouts() {
    let mut rng = StdRng::seed_from_u64(0xB7);
    let pools = pools();
    for backend in backends() {
        for &(m, n, k) in &[(5, 40, 70), (70, 64, 96), (33, 33, 33), (128, 96, 64)] {
            for (lda_pad, ldc_pad) in [(0, 0), (3, 5)] {
                let c = Case {
                    m,
                    n,
                    k,
                    lda: k + lda_pad,
                    ldc: n + ldc_pad,
                };
                for precision in [Precision::Bf16, Precision::Bf16x3] {
                    for layout in [BLayout::Nk, BLayout::Kn] {
                        for (bias, acc) in [(true, false), (false, true), (true, true)] {
                            let pool = &pools[rng.random_range(0..2)];
                            let e =
                                run_one(&mut rng, pool, &c, precision, layout, backend, bias, acc);
                            assert!(
                                e <= tolerance(precision),
                                "{backend:?} {precision:?} {layout:?} m={m} n={n} k={k} \
                                 lda={} ldc={} bias={bias} acc={acc}: {e:e}",
                                c.lda,
                                c.ldc
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Inputs exactly representable in bf16 with short exact sums: every path must agree with
/// the f64 product to f32 rounding (a misplaced element of the tile layout cannot hide).
#[test]
fn amx_gemm_exact_on_bf16_representable_inputs() {
    let mut rng = StdRng::seed_from_u64(0xC1);
    let (m, n, k) = (50, 70, 96);
    let small = |rng: &mut StdRng| {
        let v = rng.random_range(1..=15) as f32 / 8.0;
        if rng.random_bool(0.5) { v } else { -v }
    };
    let a: Vec<f32> = (0..m * k).map(|_| small(&mut rng)).collect();
    let w: Vec<f32> = (0..n * k).map(|_| small(&mut rng)).collect();
    for precision in [Precision::Bf16, Precision::Bf16x3] {
        let packed = amx::pack_b(&w, BLayout::Nk, n, k, precision);
        let b = PackedB::new(&packed, n, k, precision).unwrap();
        for backend in [Backend::Auto, Backend::Fallback] {
            let mut got = vec![0f32; m * n];
            let opts = GemmOpts {
                backend,
                ..Default::default()
            };
            amx::gemm(m, &a, k, &b, &mut got, n, &opts);
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|p| a[i * k + p] * w[j * k + p]).sum();
                    assert_eq!(got[i * n + j], want, "{precision:?} {backend:?} ({i}, {j})");
                }
            }
        }
    }
}

#[test]
fn packing_rejects_wrong_lengths() {
    let w = vec![1.0f32; 12];
    let mut out = vec![0u16; amx::packed_len(3, 4, Precision::Bf16)];
    assert!(amx::pack_b_into(
        &w,
        BLayout::Nk,
        3,
        4,
        Precision::Bf16,
        &mut out
    ));
    assert!(!amx::pack_b_into(
        &w,
        BLayout::Nk,
        4,
        4,
        Precision::Bf16,
        &mut out
    ));
    assert!(PackedB::new(&out, 3, 4, Precision::Bf16x3).is_none());
    assert!(PackedB::new(&out, 3, 4, Precision::Bf16).is_some());
}

/// `post` sees every element of C exactly once, after bias and accumulation, with the right
/// column offset: `post(v, j) = 2v + j` applied to the plain result, exactly.
#[test]
fn amx_gemm_post_applies_once_per_element() {
    let mut rng = StdRng::seed_from_u64(0xD4);
    let post = |row: &mut [f32], j0: usize| {
        for (i, v) in row.iter_mut().enumerate() {
            *v = 2.0 * *v + (j0 + i) as f32;
        }
    };
    let pools = pools();
    for backend in backends() {
        for &(m, n, k) in &[(7, 50, 40), (64, 96, 64), (100, 33, 100), (300, 64, 96)] {
            let a = common::rand_vec(&mut rng, m * k, 1.0);
            let w = common::rand_vec(&mut rng, n * k, 1.0);
            let bias = common::rand_vec(&mut rng, n, 1.0);
            let init = common::rand_vec(&mut rng, m * n, 1.0);
            let packed = amx::pack_b(&w, BLayout::Nk, n, k, Precision::Bf16);
            let b = PackedB::new(&packed, n, k, Precision::Bf16).unwrap();
            for accumulate in [false, true] {
                let pool = &pools[rng.random_range(0..2)];
                let mut opts = GemmOpts {
                    bias: Some(&bias),
                    accumulate,
                    backend,
                    ..Default::default()
                };
                let mut plain = init.clone();
                pool.install(|| amx::gemm(m, &a, k, &b, &mut plain, n, &opts));
                opts.post = Some(&post);
                let mut got = init.clone();
                pool.install(|| amx::gemm(m, &a, k, &b, &mut got, n, &opts));
                for i in 0..m {
                    for j in 0..n {
                        let want = 2.0 * plain[i * n + j] + j as f32;
                        assert_eq!(got[i * n + j], want, "{backend:?} m={m} n={n} ({i}, {j})");
                    }
                }
            }
        }
    }
}

/// A row's result is bit-identical whatever rows surround it (full blocks, edge blocks, row
/// or column splits): batching must not change an input's output.
#[test]
fn amx_gemm_rows_do_not_depend_on_the_batch() {
    let mut rng = StdRng::seed_from_u64(0xE5);
    let (m, n, k) = (150, 70, 90);
    let a = common::rand_vec(&mut rng, m * k, 1.0);
    let w = common::rand_vec(&mut rng, n * k, 1.0);
    let bias = common::rand_vec(&mut rng, n, 1.0);
    let pools = pools();
    for precision in [Precision::Bf16, Precision::Bf16x3] {
        let packed = amx::pack_b(&w, BLayout::Nk, n, k, precision);
        let b = PackedB::new(&packed, n, k, precision).unwrap();
        let opts = GemmOpts {
            bias: Some(&bias),
            ..Default::default()
        };
        let mut all = vec![0f32; m * n];
        pools[1].install(|| amx::gemm(m, &a, k, &b, &mut all, n, &opts));
        for (r0, rows) in [(0, 1), (37, 1), (40, 3), (100, 50), (31, 33)] {
            let mut part = vec![0f32; rows * n];
            pools[0].install(|| amx::gemm(rows, &a[r0 * k..], k, &b, &mut part, n, &opts));
            assert_eq!(
                part,
                all[r0 * n..(r0 + rows) * n],
                "{precision:?} rows {r0}+{rows}"
            );
        }
    }
}
