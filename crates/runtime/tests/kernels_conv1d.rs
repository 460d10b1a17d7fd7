//! 1-D convolutions, the channel-major norm/activations and windowed
//! relative-position attention against f64 scalar references written here from
//! the PyTorch definitions, on seeded random non-zero inputs, at the VITS / HiFi-GAN
//! geometries (dilated K=3/5/7, depthwise DDSConv, transposed K=16 s=8 p=4 and
//! K=8 s=4 p=2) and odd ones. Tolerance: max |a − b| / max |b| ≤ 1e-5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use favlo_runtime::cpu::{self, Conv1d, ConvFuse, ConvTranspose1d, RelAttnShape};
use rand::SeedableRng;
use rand::rngs::StdRng;

use common::{rand_vec, rel_err};

fn lrelu(x: &[f32], slope: f32) -> Vec<f32> {
    x.iter()
        .map(|v| if *v < 0.0 { slope * v } else { *v })
        .collect()
}

fn conv1d_ref(
    x: &[f32],
    len: usize,
    w: &[f32],
    b: Option<&[f32]>,
    s: Conv1d,
    groups: usize,
) -> Vec<f64> {
    let lo = s.out_len(len);
    let cin_g = s.in_channels / groups;
    let cout_g = s.out_channels / groups;
    let mut out = vec![0f64; s.out_channels * lo];
    for co in 0..s.out_channels {
        let g = co / cout_g;
        for t in 0..lo {
            let mut acc = b.map_or(0.0, |b| b[co] as f64);
            for cil in 0..cin_g {
                let ci = g * cin_g + cil;
                for k in 0..s.kernel {
                    let pos = t as isize + (k * s.dilation) as isize - s.padding as isize;
                    if pos >= 0 && (pos as usize) < len {
                        acc += w[(co * cin_g + cil) * s.kernel + k] as f64
                            * x[ci * len + pos as usize] as f64;
                    }
                }
            }
            out[co * lo + t] = acc;
        }
    }
    out
}

fn conv_t_ref(x: &[f32], len: usize, w: &[f32], b: Option<&[f32]>, s: ConvTranspose1d) -> Vec<f64> {
    let lo = s.out_len(len);
    let mut out = vec![0f64; s.out_channels * lo];
    for co in 0..s.out_channels {
        for t in 0..lo {
            out[co * lo + t] = b.map_or(0.0, |b| b[co] as f64);
        }
    }
    for ci in 0..s.in_channels {
        for ti in 0..len {
            for co in 0..s.out_channels {
                for k in 0..s.kernel {
                    let pos = (ti * s.stride + k) as isize - s.padding as isize;
                    if pos >= 0 && (pos as usize) < lo {
                        out[co * lo + pos as usize] += x[ci * len + ti] as f64
                            * w[(ci * s.out_channels + co) * s.kernel + k] as f64;
                    }
                }
            }
        }
    }
    out
}

#[test]
fn conv1d_matches_reference() {
    use favlo_runtime::cpu::simd::{available_isas, set_isa_cap};
    let mut rng = StdRng::seed_from_u64(11);
    for isa in available_isas() {
        set_isa_cap(Some(isa));
        // (cin, cout, k, d, p, len)
        for &(cin, cout, k, d, p, len) in &[
            (192, 256, 7, 1, 3, 40),  // HiFi-GAN conv_pre
            (64, 64, 7, 12, 36, 300), // dilated resblock conv
            (32, 32, 5, 6, 12, 500),
            (192, 384, 5, 1, 2, 33), // WaveNet in_layer
            (192, 768, 3, 1, 1, 17), // FFN conv_1
            (192, 29, 1, 1, 0, 21),  // 1x1 (no scratch)
            (32, 1, 7, 1, 3, 64),    // conv_post (no bias below)
            (5, 3, 4, 2, 0, 19),     // even kernel, no padding
        ] {
            let s = Conv1d {
                in_channels: cin,
                out_channels: cout,
                kernel: k,
                dilation: d,
                padding: p,
            };
            let x = rand_vec(&mut rng, cin * len, 1.0);
            let w = rand_vec(&mut rng, s.weight_len(), 0.1);
            let b = rand_vec(&mut rng, cout, 0.5);
            let bias = (cout != 1).then_some(&b[..]);
            let lo = s.out_len(len);
            let mut out = vec![f32::NAN; cout * lo];
            let mut scratch = vec![f32::NAN; s.scratch_len(len)];
            cpu::conv1d(&x, len, &w, bias, s, &mut out, &mut scratch);
            let want = conv1d_ref(&x, len, &w, bias, s, 1);
            let e = rel_err(&out, &want);
            assert!(e <= 1e-5, "{isa:?} {s:?} len {len}: rel err {e}");
            // Fused: out = residual + conv(leaky_relu(x)), and residual alone.
            let res = rand_vec(&mut rng, cout * lo, 1.0);
            for slope in [Some(0.1f32), None] {
                let fuse = ConvFuse {
                    input_slope: slope,
                    residual: Some(&res),
                };
                cpu::conv1d_fused(&x, len, &w, bias, s, &mut out, &mut scratch, fuse);
                let xa = slope.map_or(x.clone(), |sl| lrelu(&x, sl));
                let want: Vec<f64> = conv1d_ref(&xa, len, &w, bias, s, 1)
                    .iter()
                    .zip(&res)
                    .map(|(a, r)| a + *r as f64)
                    .collect();
                let e = rel_err(&out, &want);
                assert!(e <= 1e-5, "{s:?} len {len} fused {slope:?}: rel err {e}");
            }
        }
    }
    set_isa_cap(None);
}

#[test]
fn conv1d_depthwise_matches_reference() {
    let mut rng = StdRng::seed_from_u64(12);
    for &(c, k, d, p, len) in &[
        (192, 3, 1, 1, 30),
        (192, 3, 3, 3, 30),
        (192, 3, 9, 9, 30),
        (16, 3, 9, 9, 5),
        (7, 5, 2, 1, 400),
    ] {
        let s = Conv1d {
            in_channels: c,
            out_channels: c,
            kernel: k,
            dilation: d,
            padding: p,
        };
        let x = rand_vec(&mut rng, c * len, 1.0);
        let w = rand_vec(&mut rng, c * k, 0.5);
        let b = rand_vec(&mut rng, c, 0.5);
        let mut out = vec![f32::NAN; c * s.out_len(len)];
        cpu::conv1d_depthwise(&x, len, &w, Some(&b), s, &mut out);
        let e = rel_err(&out, &conv1d_ref(&x, len, &w, Some(&b), s, c));
        assert!(e <= 1e-5, "{s:?} len {len}: rel err {e}");
    }
}

#[test]
fn conv_transpose1d_matches_reference() {
    let mut rng = StdRng::seed_from_u64(13);
    // (cin, cout, k, s, p, len)
    for &(cin, cout, k, st, p, len) in &[
        (256, 128, 16, 8, 4, 12), // HiFi-GAN ups.0
        (128, 64, 16, 8, 4, 20),
        (64, 32, 8, 4, 2, 50), // ups.2
        (6, 5, 3, 2, 1, 9),    // odd kernel
        (4, 3, 2, 3, 0, 7),    // kernel < stride: a phase without taps
        (5, 4, 7, 3, 2, 1),    // one input step
    ] {
        let s = ConvTranspose1d {
            in_channels: cin,
            out_channels: cout,
            kernel: k,
            stride: st,
            padding: p,
        };
        let x = rand_vec(&mut rng, cin * len, 1.0);
        let w = rand_vec(&mut rng, s.weight_len(), 0.1);
        let b = rand_vec(&mut rng, cout, 0.5);
        let lo = s.out_len(len);
        let mut out = vec![f32::NAN; cout * lo];
        let mut scratch = vec![f32::NAN; s.scratch_len(len)];
        cpu::conv_transpose1d(&x, len, &w, Some(&b), s, &mut out, &mut scratch, None);
        let e = rel_err(&out, &conv_t_ref(&x, len, &w, Some(&b), s));
        assert!(e <= 1e-5, "{s:?} len {len}: rel err {e}");
        // Fused leaky ReLU on the input.
        cpu::conv_transpose1d(&x, len, &w, Some(&b), s, &mut out, &mut scratch, Some(0.1));
        let xa = lrelu(&x, 0.1);
        let e = rel_err(&out, &conv_t_ref(&xa, len, &w, Some(&b), s));
        assert!(e <= 1e-5, "{s:?} len {len} fused: rel err {e}");
    }
}

#[test]
fn channel_ops_match_reference() {
    let mut rng = StdRng::seed_from_u64(14);
    let (c, t) = (192, 37);
    let x: Vec<f32> = rand_vec(&mut rng, c * t, 2.0)
        .iter()
        .map(|v| v + 0.3)
        .collect();
    let g = rand_vec(&mut rng, c, 1.0);
    let b = rand_vec(&mut rng, c, 1.0);
    let mut out = vec![f32::NAN; c * t];
    cpu::layer_norm_channels(&x, c, t, &g, &b, 1e-5, &mut out);
    let mut want = vec![0f64; c * t];
    for j in 0..t {
        let m = (0..c).map(|i| x[i * t + j] as f64).sum::<f64>() / c as f64;
        let v = (0..c)
            .map(|i| (x[i * t + j] as f64 - m).powi(2))
            .sum::<f64>()
            / c as f64;
        for i in 0..c {
            want[i * t + j] =
                (x[i * t + j] as f64 - m) / (v + 1e-5).sqrt() * g[i] as f64 + b[i] as f64;
        }
    }
    let e = rel_err(&out, &want);
    assert!(e <= 1e-5, "layer_norm_channels rel err {e}");

    let mut lr = vec![f32::NAN; x.len()];
    cpu::leaky_relu(&x, 0.1, &mut lr);
    let want: Vec<f64> = x
        .iter()
        .map(|v| {
            if *v >= 0.0 {
                *v as f64
            } else {
                0.1 * *v as f64
            }
        })
        .collect();
    assert!(rel_err(&lr, &want) <= 1e-6);

    // The gate on every ISA, at moderate and saturating inputs.
    use favlo_runtime::cpu::simd::{available_isas, set_isa_cap};
    let (c2, t2) = (96, 37);
    for isa in available_isas() {
        set_isa_cap(Some(isa));
        for scale in [1.0f32, 30.0] {
            let a: Vec<f32> = x[..2 * c2 * t2].iter().map(|v| v * scale).collect();
            let mut gate = vec![f32::NAN; c2 * t2];
            cpu::gated_tanh_sigmoid(&a, c2, t2, &mut gate);
            let want: Vec<f64> = (0..c2 * t2)
                .map(|i| (a[i] as f64).tanh() / (1.0 + (-(a[c2 * t2 + i] as f64)).exp()))
                .collect();
            let e = rel_err(&gate, &want);
            assert!(
                e <= 1e-5,
                "{isa:?} scale {scale}: gated_tanh_sigmoid rel err {e}"
            );
        }
    }
    set_isa_cap(None);
}

#[test]
fn attention_rel_window_matches_reference() {
    let mut rng = StdRng::seed_from_u64(15);
    for &(heads, d, t, w) in &[(2, 96, 23, 4), (2, 8, 3, 4), (3, 16, 40, 2)] {
        let n = heads * d * t;
        let q = rand_vec(&mut rng, n, 1.0);
        let k = rand_vec(&mut rng, n, 1.0);
        let v = rand_vec(&mut rng, n, 1.0);
        let ek = rand_vec(&mut rng, (2 * w + 1) * d, 1.0);
        let ev = rand_vec(&mut rng, (2 * w + 1) * d, 1.0);
        let shape = RelAttnShape {
            heads,
            head_dim: d,
            len: t,
            window: w,
        };
        let mut out = vec![f32::NAN; n];
        let mut scratch = vec![f32::NAN; shape.scratch_len()];
        cpu::attention_rel_window(&q, &k, &v, &ek, &ev, shape, &mut out, &mut scratch);
        let mut want = vec![0f64; n];
        let f = |s: &[f32], h: usize, c: usize, i: usize| s[(h * d + c) * t + i] as f64;
        for h in 0..heads {
            for i in 0..t {
                let mut sc = vec![0f64; t];
                for (j, s) in sc.iter_mut().enumerate() {
                    let rel = j as isize - i as isize;
                    for c in 0..d {
                        let mut kk = f(&k, h, c, j);
                        if rel.unsigned_abs() <= w {
                            kk += ek[(rel + w as isize) as usize * d + c] as f64;
                        }
                        *s += f(&q, h, c, i) * kk;
                    }
                    *s /= (d as f64).sqrt();
                }
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
                for (j, s) in sc.iter().enumerate() {
                    let p = (s - m).exp() / z;
                    let rel = j as isize - i as isize;
                    for c in 0..d {
                        let mut vv = f(&v, h, c, j);
                        if rel.unsigned_abs() <= w {
                            vv += ev[(rel + w as isize) as usize * d + c] as f64;
                        }
                        want[(h * d + c) * t + i] += p * vv;
                    }
                }
            }
        }
        let e = rel_err(&out, &want);
        assert!(e <= 1e-5, "heads {heads} d {d} t {t} w {w}: rel err {e}");
    }
}

#[test]
fn sgemm_matches_reference_on_every_isa() {
    use favlo_runtime::cpu::simd::{available_isas, set_isa_cap};
    let mut rng = StdRng::seed_from_u64(16);
    for isa in available_isas() {
        set_isa_cap(Some(isa));
        // (m, n, k, lda pad, ldb pad, ldc pad): micro-tile remainders in m and n.
        for &(m, n, k, pa, pb, pc) in &[
            (32, 200, 224, 0, 0, 0),
            (7, 47, 3, 1, 2, 3),
            (9, 49, 17, 0, 5, 1),
            (1, 5, 1, 0, 0, 0),
            (384, 500, 192, 0, 0, 0),
        ] {
            let (lda, ldb, ldc) = (k + pa, n + pb, n + pc);
            let a = rand_vec(&mut rng, m * lda, 1.0);
            let b = rand_vec(&mut rng, k * ldb, 1.0);
            let mut c = vec![f32::NAN; m * ldc];
            let mut c2 = vec![f32::NAN; m * ldc];
            cpu::sgemm_nn(m, n, k, &a, lda, &b, ldb, &mut c, ldc);
            cpu::sgemm_nn_par(m, n, k, &a, lda, &b, ldb, &mut c2, ldc);
            let mut got = Vec::new();
            let mut got2 = Vec::new();
            let mut want = Vec::new();
            for i in 0..m {
                for j in 0..n {
                    got.push(c[i * ldc + j]);
                    got2.push(c2[i * ldc + j]);
                    want.push(
                        (0..k)
                            .map(|p| a[i * lda + p] as f64 * b[p * ldb + j] as f64)
                            .sum::<f64>(),
                    );
                }
                // Padding columns of C are never written.
                assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|v| v.is_nan()));
            }
            let e = rel_err(&got, &want).max(rel_err(&got2, &want));
            assert!(e <= 1e-5, "{isa:?} m {m} n {n} k {k}: rel err {e}");
        }
    }
    set_isa_cap(None);
}
