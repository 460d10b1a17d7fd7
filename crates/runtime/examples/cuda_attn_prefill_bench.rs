//! Prefill attention benchmark: the causal attention of a Qwen3-8B-shaped layer (32 query
//! heads, 8 kv heads of 128, f16 KV cache) over a 2048-token prompt, as one chunk
//! (t = 2048) and as two chunks of 1024 (the second after 1024 cached keys), for each
//! precision (`Split`: q and p as f16 hi + lo, the exact prefill; `Half`: single halves,
//! the FP8 prefill).
//!
//! FLOPs = 4 · head_dim · heads · (causal query–key pairs): the two products S = Q·Kᵀ and
//! O = P·V, no softmax. Reported: median µs of 9 after 2 warm-ups (CUDA events) and
//! TFLOP/s against the H200's dense f16 tensor-core figure (989 TFLOP/s; `mma.sync`
//! reaches about two thirds of it). Before timing, the `Half` output is compared with
//! the `Split` output (max |Δ| / max |ref| printed; the kernels themselves
//! are checked against f64 in `tests/cuda_attn_prefill.rs`).
//!
//! Run: `cargo run --release -p favlo-runtime --features cuda --example cuda_attn_prefill_bench`

use favlo_runtime::cuda::{
    AttnPrecision, CudaContext, CudaError, DeviceBuffer, KvCache, PrefillOps, PrefillShape, time_ms,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The H200's dense f16 tensor-core rate from the datasheet (TFLOP/s).
const F16_PEAK_TFLOPS: f64 = 989.0;
const HEADS: usize = 32;
const KV_HEADS: usize = 8;
const HD: usize = 128;
const TOKENS: usize = 2048;

/// One chunk: its shape, its q rows and its output rows.
type Chunk = (PrefillShape, DeviceBuffer<f32>, DeviceBuffer<f32>);

fn random(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match CudaContext::open(0, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cuda_attn_prefill_bench: {e}");
            std::process::exit(2);
        }
    };
    let owner = Owner::mint("attn-prefill-bench");
    let ops = PrefillOps::load(&ctx)?;
    let mut rng = StdRng::seed_from_u64(7);
    let kv = TOKENS * KV_HEADS * HD;
    let bits =
        |v: Vec<f32>| -> Vec<u16> { v.iter().map(|x| f16::from_f32(*x).to_bits()).collect() };
    let cache = KvCache::F16 {
        k: ctx.upload(&owner, SpanKind::Scratch, &bits(random(&mut rng, kv, 1.0)))?,
        v: ctx.upload(&owner, SpanKind::Scratch, &bits(random(&mut rng, kv, 1.0)))?,
    };
    let row = HEADS * HD;
    let q_all = random(&mut rng, TOKENS * row, 2.5);
    let scale = 1.0 / (HD as f32).sqrt();
    println!(
        "device {} ({}), {HEADS} heads / {KV_HEADS} kv × {HD}, f16 cache, {TOKENS}-token prompt",
        ctx.name(),
        ctx.arch()
    );
    // (label, chunks as (t, n_past)).
    let layouts: [(&str, &[(usize, usize)]); 2] = [
        ("one chunk of 2048", &[(2048, 0)]),
        ("two chunks of 1024", &[(1024, 0), (1024, 1024)]),
    ];
    let pairs: usize = (1..=TOKENS).sum();
    let flops = 4.0 * (HD * HEADS * pairs) as f64;
    println!(
        "{:<20} {:<6} {:>10} {:>9} {:>7} {:>12}",
        "chunks", "prec", "µs", "TFLOP/s", "% peak", "max rel Δ"
    );
    for (label, chunks) in layouts {
        let mut bufs: Vec<Chunk> = Vec::new();
        for &(t, n_past) in chunks {
            let s = PrefillShape {
                t,
                n_past,
                n_heads: HEADS,
                n_kv_heads: KV_HEADS,
                head_dim: HD,
            };
            let q = ctx.upload(&owner, SpanKind::Scratch, &q_all[n_past * row..][..t * row])?;
            let out: DeviceBuffer<f32> = ctx.alloc(&owner, SpanKind::Scratch, t * row)?;
            bufs.push((s, q, out));
        }
        let mut reference: Option<Vec<f32>> = None;
        for precision in [AttnPrecision::Split, AttnPrecision::Half] {
            let run = |bufs: &mut [Chunk]| {
                for (s, q, out) in bufs.iter_mut() {
                    ops.attention(q, row, &cache, *s, scale, out, row, precision)?;
                }
                Ok::<(), CudaError>(())
            };
            run(&mut bufs)?;
            let mut got = Vec::with_capacity(TOKENS * row);
            for (_, _, out) in &bufs {
                got.extend(ctx.download(out)?);
            }
            let delta = match &reference {
                None => {
                    reference = Some(got);
                    0.0
                }
                Some(r) => {
                    let max = r.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let d = r
                        .iter()
                        .zip(&got)
                        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                    f64::from(d / max)
                }
            };
            let ms = time_ms(&ctx, 2, 9, || run(&mut bufs))?;
            let tf = flops / (ms * 1e-3) / 1e12;
            println!(
                "{label:<20} {:<6} {:>10.1} {:>9.1} {:>6.1}% {:>12.2e}",
                format!("{precision:?}"),
                ms * 1e3,
                tf,
                100.0 * tf / F16_PEAK_TFLOPS,
                delta
            );
        }
    }
    Ok(())
}
