//! Transposed convolution, inference batch norm, ReLU and tanh against the f64
//! scalar reference in `cpu::conv::reference`, on random non-zero inputs, at the
//! DCGAN geometries (K=4 s=1 p=0 from a 1×1 input; K=4 s=2 p=1) and odd ones.
//! Tolerance: max |a - b| / max |b| ≤ 1e-5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_runtime::cpu::conv::reference;
use favlo_runtime::cpu::{self, BatchNorm, ConvTranspose2d};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::{rand_vec, rel_err};

#[test]
fn conv_transpose2d_matches_reference() {
    let mut rng = StdRng::seed_from_u64(7);
    // (cin, cout, k, s, p, h, w, batch)
    for &(cin, cout, k, s, p, h, w, batch) in &[
        (100, 64, 4, 1, 0, 1, 1, 3), // DCGAN first layer (z → 4×4)
        (64, 32, 4, 2, 1, 4, 4, 2),  // DCGAN inner layer
        (32, 3, 4, 2, 1, 16, 16, 2), // DCGAN last layer (to RGB)
        (48, 40, 4, 2, 1, 8, 8, 1),  // big enough for the parallel scatter
        (7, 5, 3, 2, 1, 5, 6, 2),    // odd kernel, non-square input
        (6, 4, 3, 1, 1, 7, 5, 1),    // stride 1 with padding
        (5, 3, 5, 3, 2, 4, 3, 2),    // stride 3
    ] {
        let shape = ConvTranspose2d {
            in_channels: cin,
            out_channels: cout,
            kernel: k,
            stride: s,
            padding: p,
            in_h: h,
            in_w: w,
        };
        let x = rand_vec(&mut rng, batch * shape.in_len(), 1.0);
        let wt = rand_vec(&mut rng, shape.weight_len(), 0.1);
        let mut out = vec![f32::NAN; batch * shape.out_len()];
        let mut cols = vec![f32::NAN; shape.cols_len()];
        cpu::conv_transpose2d(&x, &wt, shape, batch, &mut out, &mut cols);
        let want = reference::conv_transpose2d(&x, &wt, shape, batch);
        let e = rel_err(&out, &want);
        assert!(e <= 1e-5, "{shape:?} batch {batch}: rel err {e}");
        // Same inputs, same bits (the summation order is fixed).
        let mut again = vec![0f32; out.len()];
        cpu::conv_transpose2d(&x, &wt, shape, batch, &mut again, &mut cols);
        assert!(
            out.iter()
                .zip(&again)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

#[test]
fn conv_transpose2d_output_geometry() {
    let s = ConvTranspose2d {
        in_channels: 512,
        out_channels: 256,
        kernel: 4,
        stride: 2,
        padding: 1,
        in_h: 4,
        in_w: 4,
    };
    assert_eq!((s.out_h(), s.out_w()), (8, 8));
    let first = ConvTranspose2d {
        in_channels: 100,
        out_channels: 512,
        kernel: 4,
        stride: 1,
        padding: 0,
        in_h: 1,
        in_w: 1,
    };
    assert_eq!((first.out_h(), first.out_w()), (4, 4));
    let empty = ConvTranspose2d {
        padding: 3,
        ..first
    };
    assert!(!empty.is_valid());
}

#[test]
fn batch_norm_matches_reference() {
    let mut rng = StdRng::seed_from_u64(8);
    for &(batch, c, spatial) in &[(2, 5, 9), (3, 64, 256), (1, 512, 16)] {
        let x = rand_vec(&mut rng, batch * c * spatial, 3.0);
        let weight = rand_vec(&mut rng, c, 1.0);
        let bias = rand_vec(&mut rng, c, 0.5);
        let mean = rand_vec(&mut rng, c, 0.5);
        let var: Vec<f32> = (0..c).map(|_| rng.random_range(0.01f32..2.0)).collect();
        let mut y = x.clone();
        cpu::batch_norm(
            &mut y,
            spatial,
            BatchNorm {
                weight: &weight,
                bias: &bias,
                running_mean: &mean,
                running_var: &var,
                eps: 1e-5,
            },
        );
        let want = reference::batch_norm(&x, spatial, &weight, &bias, &mean, &var, 1e-5);
        let e = rel_err(&y, &want);
        assert!(e <= 1e-5, "batch {batch} c {c}: rel err {e}");
    }
}

#[test]
fn relu_and_tanh_match_reference() {
    let mut rng = StdRng::seed_from_u64(9);
    for n in [17, 70_000] {
        let x = rand_vec(&mut rng, n, 4.0);
        let mut r = x.clone();
        cpu::relu(&mut r);
        let want: Vec<f64> = x.iter().map(|v| reference::relu(*v as f64)).collect();
        assert_eq!(rel_err(&r, &want), 0.0);
        let mut t = x.clone();
        cpu::tanh(&mut t);
        let want: Vec<f64> = x.iter().map(|v| reference::tanh(*v as f64)).collect();
        let e = rel_err(&t, &want);
        assert!(e <= 1e-6, "tanh rel err {e}");
    }
}
