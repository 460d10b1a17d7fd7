//! The kernel benchmark behind `favlo bench kernels`: times the CPU kernels at
//! realistic shapes and prints each figure next to a ceiling measured in the
//! same run (memory copy bandwidth, the `gemm` crate's f32 GFLOP/s).
//!
//! Key design choice: it lives in the library (not only as an example) so the
//! shipped binary can print the table on the user's own machine. Bandwidth
//! figures count the bytes a call must read (packed weights + scales, or the
//! K/V rows), so those rows are set against the read-only ceiling (a streaming
//! sum over 256 MB); kernels that read and write (norms) against the copy
//! ceiling, which counts bytes read + written; GEMMs against `gemm`'s f32 rate.

use crate::cpu::{self, AttnShape, WeightRef};
use favlo_mx::{ElementFormat, MxLayout, MxView, ScaleRule};
use half::bf16;
use rayon::prelude::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Median seconds per call over a time budget (after one warm-up call).
fn time(budget: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let mut v = Vec::new();
    let start = Instant::now();
    while v.len() < 3 || (start.elapsed() < budget && v.len() < 1000) {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0 + 0.001
        })
        .collect()
}

struct Row {
    name: String,
    secs: f64,
    rate: f64,
    unit: &'static str,
    ceiling: f64,
    ceiling_name: &'static str,
}

fn print(rows: &[Row]) {
    println!("| kernel | time | achieved | ceiling | % of ceiling |");
    println!("|---|---:|---:|---|---:|");
    for r in rows {
        let t = if r.secs < 1e-3 {
            format!("{:.1} µs", r.secs * 1e6)
        } else {
            format!("{:.2} ms", r.secs * 1e3)
        };
        println!(
            "| {} | {} | {:.1} {} | {} {:.1} | {:.0}% |",
            r.name,
            t,
            r.rate,
            r.unit,
            r.ceiling_name,
            r.ceiling,
            100.0 * r.rate / r.ceiling
        );
    }
}

/// Runs the kernel benchmark and prints its table to stdout. `quick` shortens
/// the time budget and the shape list; `sections` filters (gemv, gemm, attn,
/// gguf, norm; empty = all). Uses the current rayon pool's threads.
pub fn kernels(quick: bool, sections: &[&str]) -> Result<(), favlo_mx::MxError> {
    let want = |s: &str| sections.is_empty() || sections.contains(&s);
    let budget = Duration::from_millis(if quick { 150 } else { 600 });
    let threads = rayon::current_num_threads();
    println!("threads: {threads}, isa: {:?}", cpu::simd::isa());

    // Ceilings: 256 MB copy (read + write counted) with all threads, and gemm f32.
    let len = 64 << 20; // 64 Mi floats = 256 MB
    let src = noise(len, 1);
    let mut dst = vec![0f32; len];
    let chunk = len / threads.max(1);
    let copy_s = time(budget, || {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        black_box(&dst);
    });
    let copy_bw = 2.0 * (len * 4) as f64 / copy_s / 1e9;
    let read_s = time(budget, || {
        let s: f32 = src
            .par_chunks(chunk)
            .map(|c| {
                let acc = c.chunks_exact(16).fold([0f32; 16], |mut a, v| {
                    for i in 0..16 {
                        a[i] += v[i];
                    }
                    a
                });
                acc.iter().sum::<f32>()
            })
            .sum();
        black_box(s);
    });
    let read_bw = (len * 4) as f64 / read_s / 1e9;
    drop(dst);
    let g = 1024;
    let (a, b) = (noise(g * g, 2), noise(g * g, 3));
    let mut c = vec![0f32; g * g];
    let gemm_s = time(budget, || cpu::matmul(&a, &b, &mut c, g, g, g));
    let gflops = 2.0 * (g * g * g) as f64 / gemm_s / 1e9;
    println!(
        "ceilings: copy {copy_bw:.1} GB/s (256 MB, read+write), read-only sum {read_bw:.1} GB/s, gemm f32 1024³ {gflops:.1} GFLOP/s\n"
    );

    let mut rows = Vec::new();
    let shapes: &[(usize, usize)] = if quick {
        &[(896, 4864), (4864, 896)]
    } else {
        &[(896, 4864), (4864, 896), (4096, 4096), (4096, 14336)]
    };
    for &(n, k) in shapes {
        let w = noise(n * k, (n * 31 + k) as u64);
        let x1 = noise(k, 5);
        let x32 = noise(32 * k, 6);
        let mut y = vec![0f32; 32 * n];
        let nb = k.div_ceil(32);
        let mut packs = Vec::new();
        for (fmt, label, bytes_per_row) in [
            (ElementFormat::Fp4E2M1, "MXFP4", nb * 17),
            (ElementFormat::Fp8E4M3, "MXFP8", nb * 33),
        ] {
            let layout = MxLayout {
                format: fmt,
                rows: n,
                cols: k,
            };
            let mut p = vec![0u8; layout.total_bytes()];
            favlo_mx::pack(&w, layout, ScaleRule::Ceil, &mut p)?;
            packs.push((layout, p, label, bytes_per_row));
        }
        let bf: Vec<bf16> = w.iter().map(|v| bf16::from_f32(*v)).collect();
        let mut cases: Vec<(String, WeightRef<'_>, usize)> = Vec::new();
        for (layout, p, label, bpr) in &packs {
            cases.push((
                label.to_string(),
                WeightRef::Mx(MxView::new(*layout, p)?),
                bpr * n,
            ));
        }
        cases.push((
            "bf16".into(),
            WeightRef::Bf16 { data: &bf, n, k },
            n * k * 2,
        ));
        cases.push(("f32".into(), WeightRef::F32 { data: &w, n, k }, n * k * 4));
        for (label, wr, bytes) in cases.iter().filter(|_| want("gemv")) {
            let s = time(budget, || cpu::linear(&x1, *wr, None, &mut y[..n]));
            rows.push(Row {
                name: format!("GEMV {label} {n}×{k} (m=1)"),
                secs: s,
                rate: *bytes as f64 / s / 1e9,
                unit: "GB/s",
                ceiling: read_bw,
                ceiling_name: "read",
            });
        }
        if n * k <= 4096 * 4096 && want("gemm") {
            for (label, wr, _) in &cases {
                let s = time(budget, || cpu::linear(&x32, *wr, None, &mut y));
                rows.push(Row {
                    name: format!("GEMM {label} {n}×{k} (m=32)"),
                    secs: s,
                    rate: 2.0 * (32 * n * k) as f64 / s / 1e9,
                    unit: "GFLOP/s",
                    ceiling: gflops,
                    ceiling_name: "gemm f32",
                });
            }
        }
    }

    if want("attn") {
        attention(&mut rows, budget, read_bw, gflops);
    }
    if want("gguf") {
        gguf(&mut rows, budget, read_bw, gflops, quick);
    }
    if want("norm") {
        norms(&mut rows, budget, copy_bw);
    }
    print(&rows);
    Ok(())
}

fn attention(rows: &mut Vec<Row>, budget: Duration, read_bw: f64, gflops: f64) {
    // Attention decode at 4k context: 32 heads, 8 kv heads, head dim 128.
    let shape = AttnShape {
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
    };
    let ctx = 4096;
    let kv = noise(ctx * 8 * 128, 7);
    let vv = noise(ctx * 8 * 128, 8);
    let q = noise(32 * 128, 9);
    let mut o = vec![0f32; 32 * 128];
    let s = time(budget, || {
        cpu::attention_causal(&q, &kv, &vv, &mut o, shape, ctx - 1, 1, 0.088)
    });
    rows.push(Row {
        name: "attention decode ctx 4096, 32/8 heads, hd 128".into(),
        secs: s,
        rate: (2 * ctx * 8 * 128 * 4) as f64 / s / 1e9,
        unit: "GB/s",
        ceiling: read_bw,
        ceiling_name: "read",
    });
    let t = 128;
    let qp = noise(t * 32 * 128, 10);
    let mut op = vec![0f32; t * 32 * 128];
    let s = time(budget, || {
        cpu::attention_causal(&qp, &kv, &vv, &mut op, shape, 512 - t, t, 0.088)
    });
    let flops = 4.0 * (32 * 128) as f64 * (t as f64 * (512 - t) as f64 + (t * (t + 1) / 2) as f64);
    rows.push(Row {
        name: format!("attention prefill t={t} ctx 512, 32/8 heads, hd 128"),
        secs: s,
        rate: flops / s / 1e9,
        unit: "GFLOP/s",
        ceiling: gflops,
        ceiling_name: "gemm f32",
    });
}

/// GGUF-block GEMV (decode) and 32-row GEMM (prefill) at Qwen2.5-0.5B's FFN shapes
/// and one DRAM-sized shape. Random code bytes with sane f16 block scales.
fn gguf(rows: &mut Vec<Row>, budget: Duration, read_bw: f64, gflops: f64, quick: bool) {
    use crate::cpu::gguf_dot::{GgufMatrix, GgufType};
    let types = [
        ("Q4_0", GgufType::Q4_0),
        ("Q4_1", GgufType::Q4_1),
        ("Q5_0", GgufType::Q5_0),
        ("Q8_0", GgufType::Q8_0),
        ("Q4_K", GgufType::Q4_K),
        ("Q6_K", GgufType::Q6_K),
    ];
    let shapes: &[(usize, usize)] = if quick {
        &[(4864, 896)]
    } else {
        &[(4864, 896), (896, 4864), (4096, 14336)]
    };
    for &(n, k) in shapes {
        let x1 = noise(k, 21);
        let x32 = noise(32 * k, 22);
        let mut y = vec![0f32; 32 * n];
        for (label, ty) in types {
            if !k.is_multiple_of(ty.block_size()) {
                continue;
            }
            let data = gguf_blocks(ty, n, k);
            let w = GgufMatrix {
                ty,
                data: &data,
                n,
                k,
            };
            let s = time(budget, || cpu::gguf_linear(&x1, w, None, &mut y[..n]));
            rows.push(Row {
                name: format!("GEMV {label} {n}×{k} (m=1)"),
                secs: s,
                rate: data.len() as f64 / s / 1e9,
                unit: "GB/s",
                ceiling: read_bw,
                ceiling_name: "read",
            });
            if n * k <= 4096 * 4096 {
                let s = time(budget, || cpu::gguf_linear(&x32, w, None, &mut y));
                rows.push(Row {
                    name: format!("GEMM {label} {n}×{k} (m=32)"),
                    secs: s,
                    rate: 2.0 * (32 * n * k) as f64 / s / 1e9,
                    unit: "GFLOP/s",
                    ceiling: gflops,
                    ceiling_name: "gemm f32",
                });
            }
        }
    }
}

/// `n` rows of `k` random codes in `ty`'s blocks, with every f16 scale/min field set
/// to a small finite value (as a quantizer would leave them).
fn gguf_blocks(ty: crate::cpu::gguf_dot::GgufType, n: usize, k: usize) -> Vec<u8> {
    use crate::cpu::gguf_dot::GgufType;
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut data: Vec<u8> = (0..n * ty.row_bytes(k))
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect();
    let put = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
    };
    for b in data.chunks_exact_mut(ty.type_size()) {
        match ty {
            GgufType::Q4_0 | GgufType::Q5_0 | GgufType::Q8_0 => put(b, 0, 0.01),
            GgufType::Q4_1 | GgufType::Q5_1 => {
                put(b, 0, 0.01);
                put(b, 2, -0.1);
            }
            GgufType::Q4_K | GgufType::Q5_K => {
                put(b, 0, 0.001);
                put(b, 2, 0.005);
            }
            GgufType::Q6_K => put(b, 208, 0.001),
        }
    }
    data
}

fn norms(rows: &mut Vec<Row>, budget: Duration, copy_bw: f64) {
    for (r, d) in [(1usize, 4096usize), (32, 4096)] {
        let x = noise(r * d, 11);
        let wgt = noise(d, 12);
        let mut out = vec![0f32; r * d];
        let s = time(budget, || cpu::rms_norm(&x, &wgt, 1e-6, &mut out));
        rows.push(Row {
            name: format!("rms_norm {r}×{d}"),
            secs: s,
            rate: (2 * r * d * 4) as f64 / s / 1e9,
            unit: "GB/s",
            ceiling: copy_bw,
            ceiling_name: "copy",
        });
    }
}
