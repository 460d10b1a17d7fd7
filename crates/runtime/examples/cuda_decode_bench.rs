//! Batch-1 decode of a Qwen3-8B-shaped model with random MXFP4 weights on CUDA, in
//! tokens/s beside the bandwidth roofline (HBM bytes per token = weights + KV read,
//! over the device-to-device copy bandwidth measured in the same run).
//!
//! Shape (Qwen3-8B config): 36 layers, hidden 4096, 32 q / 8 kv heads of 128,
//! intermediate 12288, vocab 151936, RMSNorm eps 1e-6, NeoX RoPE θ = 1e6, q/k norm.
//! Per token and layer (10 launches): rms_norm → x prep (one kernel) → fused q|k|v GEMV →
//! q/k norm + RoPE + KV store → attention split → combine → prep (one kernel) → o GEMV
//! (+ residual) → rms_norm → prep → fused gate|up GEMV → SwiGLU → prep → down GEMV
//! (+ residual); then final norm → prep, lm_head GEMV. The step is captured once as a CUDA graph (position on the device) and
//! replayed; plain stream launches are timed too.
//!
//! Weights are random (uniform FP4 codes, E8M0 scales 2^-9..2^-7 so activations stay
//! O(1)); the KV cache is prefilled with random f16 values up to `--ctx` tokens.
//! Run: `cuda_decode_bench [--layers 36] [--ctx 1024] [--steps 32] [--f32-kv]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_mx::{ElementFormat, MxLayout, MxView};
use favlo_runtime::cuda::CudaError;
use favlo_runtime::cuda::{
    AttentionDecode, AttnOut, CudaContext, DecodeOps, DeviceBuffer, GemvKernel, GemvMma, KvCache,
    MxTiled, MxTiledHost, XPrep, attn_partials_len, copy_bandwidth_gbps, rope_tables, tile_mx,
    time_ms,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const HIDDEN: usize = 4096;
const NH: usize = 32;
const NKV: usize = 8;
const HD: usize = 128;
const INTER: usize = 12288;
const VOCAB: usize = 151936;
const EPS: f32 = 1e-6;

fn random_fp4(rows: usize, cols: usize, rng: &mut StdRng) -> (MxLayout, Vec<u8>) {
    let layout = MxLayout {
        format: ElementFormat::Fp4E2M1,
        rows,
        cols,
    };
    let mut b = vec![0u8; layout.total_bytes()];
    rng.fill(&mut b[..layout.scale_offset()]);
    b[layout.scale_offset()..]
        .iter_mut()
        .for_each(|v| *v = rng.random_range(118u8..=120));
    (layout, b)
}

struct Layer {
    qkv: MxTiled,
    o: MxTiled,
    gate_up: MxTiled,
    down: MxTiled,
    attn_norm: DeviceBuffer<f32>,
    mlp_norm: DeviceBuffer<f32>,
    q_norm: DeviceBuffer<f32>,
    k_norm: DeviceBuffer<f32>,
    cache: KvCache,
}

struct Bufs {
    h: DeviceBuffer<f32>,
    xn: DeviceBuffer<f32>,
    prep: XPrep,
    qkv: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    attn: DeviceBuffer<f32>,
    gu: DeviceBuffer<f32>,
    act: DeviceBuffer<f32>,
    logits: DeviceBuffer<f32>,
    part: DeviceBuffer<f32>,
    pos: DeviceBuffer<i32>,
    cos: DeviceBuffer<f32>,
    sin: DeviceBuffer<f32>,
    final_norm: DeviceBuffer<f32>,
}

struct Kernels {
    gemv: GemvMma,
    attn: AttentionDecode,
    ops: DecodeOps,
}

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One decode step (all layers + lm_head), then *pos += 1.
fn step(
    k: &Kernels,
    layers: &mut [Layer],
    lm_head: &MxTiled,
    b: &mut Bufs,
    cap: usize,
) -> Result<(), favlo_runtime::cuda::CudaError> {
    let scale = 1.0 / (HD as f32).sqrt();
    for l in layers.iter_mut() {
        k.gemv.rms_norm_prep(&b.h, &l.attn_norm, EPS, &mut b.prep)?;
        k.gemv.gemv(&l.qkv, &b.prep, &mut b.qkv, false)?;
        k.ops.qk_norm_rope_store(
            &b.qkv,
            &l.q_norm,
            &l.k_norm,
            &b.cos,
            &b.sin,
            &b.pos,
            NH,
            NKV,
            EPS,
            &mut b.q,
            &mut l.cache,
        )?;
        k.attn.decode(
            &b.q,
            &l.cache,
            cap,
            NH,
            NKV,
            &b.pos,
            1,
            scale,
            &mut b.part,
            AttnOut::Prep(&mut b.prep),
        )?;
        k.gemv.gemv(&l.o, &b.prep, &mut b.h, true)?;
        k.gemv.rms_norm_prep(&b.h, &l.mlp_norm, EPS, &mut b.prep)?;
        k.gemv.gemv(&l.gate_up, &b.prep, &mut b.gu, false)?;
        k.gemv.swiglu_prep(&b.gu, INTER, &mut b.prep)?;
        k.gemv.gemv(&l.down, &b.prep, &mut b.h, true)?;
    }
    k.gemv
        .rms_norm_prep(&b.h, &b.final_norm, EPS, &mut b.prep)?;
    k.gemv.gemv(lm_head, &b.prep, &mut b.logits, false)?;
    k.ops.advance_pos(&mut b.pos)
}

/// Milliseconds per replay of a CUDA graph of what `f` launches (GPU time without the
/// host's launch cost).
fn graph_ms(ctx: &CudaContext, reps: usize, f: impl FnOnce() -> Result<(), CudaError>) -> f64 {
    let stream = ctx.stream().clone();
    stream
        .begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    f().unwrap();
    let graph = stream
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("captured graph");
    time_ms(ctx, 2, reps, || {
        graph.launch().map_err(|e| CudaError::Driver {
            op: "cuGraphLaunch",
            message: format!("{e:?}"),
        })
    })
    .unwrap()
}

fn main() {
    let n_layers = arg("--layers", 36);
    let ctx_len = arg("--ctx", 1024);
    let steps = arg("--steps", 32);
    let f16_kv = !std::env::args().any(|a| a == "--f32-kv");
    let cap = ctx_len + 4 * steps + 16;
    let ctx = CudaContext::open(0, None).unwrap_or_else(|e| {
        eprintln!("cuda_decode_bench: {e}");
        std::process::exit(2)
    });
    let mut gemv = GemvMma::load(&ctx).unwrap();
    // `--kernel regs|pp|ring|tma` (default auto), `--ring W` (warps of a ring, depth 2).
    let argv: Vec<String> = std::env::args().collect();
    if let Some(k) = argv
        .iter()
        .position(|a| a == "--kernel")
        .and_then(|i| argv.get(i + 1))
    {
        gemv.kernel = match k.as_str() {
            "regs" => GemvKernel::Regs,
            "pp" => GemvKernel::PingPong,
            "ring" => GemvKernel::Ring,
            "tma" => GemvKernel::Tma,
            _ => GemvKernel::Auto,
        };
    }
    let pdl = argv.iter().any(|a| a == "--pdl");
    // Auto picks the PDL run's kernels for the PDL-off check below as well.
    gemv.select_as_pdl = pdl;
    // `--pp-prefetch 2|3`: the ping-pong GEMV prefetches that many chunks ahead into L2.
    gemv.pp_prefetch = arg("--pp-prefetch", 0).min(3) as u8;
    if argv.iter().any(|a| a == "--ring") {
        gemv.ring_override = Some((arg("--ring", 8), 2));
    }
    // FP4 kernel per matrix (tiles of 32 rows, 128-byte chunks).
    let pick =
        |rows: usize, cols: usize| gemv.resolve(ElementFormat::Fp4E2M1, rows / 32, cols / 256);
    println!(
        "GEMV kernel {:?}, ring {:?}, PDL {pdl}: q|k|v {:?}, o {:?}, gate|up {:?}, down {:?}, lm_head {:?}",
        gemv.kernel,
        gemv.ring_override,
        pick((NH + 2 * NKV) * HD, HIDDEN),
        pick(HIDDEN, NH * HD),
        pick(2 * INTER, HIDDEN),
        pick(HIDDEN, INTER),
        pick(VOCAB, HIDDEN),
    );
    let mut k = Kernels {
        gemv,
        attn: AttentionDecode::load(&ctx).unwrap(),
        ops: DecodeOps::load(&ctx).unwrap(),
    };
    let copy = copy_bandwidth_gbps(&ctx, 1 << 30, 20).unwrap();
    let owner = Owner::mint("cuda-decode-bench");
    let mut rng = StdRng::seed_from_u64(7);
    let t0 = std::time::Instant::now();
    // One random host copy per matrix kind, uploaded to distinct device buffers per layer.
    let (l_qkv, h_qkv) = random_fp4((NH + 2 * NKV) * HD, HIDDEN, &mut rng);
    let (l_o, h_o) = random_fp4(HIDDEN, NH * HD, &mut rng);
    let (l_gu, h_gu) = random_fp4(2 * INTER, HIDDEN, &mut rng);
    let (l_dn, h_dn) = random_fp4(HIDDEN, INTER, &mut rng);
    let (l_lm, h_lm) = random_fp4(VOCAB, HIDDEN, &mut rng);
    // Tiled once on the host per matrix kind.
    let tile = |l: MxLayout, h: &[u8]| tile_mx(MxView::new(l, h).unwrap());
    let (t_qkv, t_o, t_gu, t_dn, t_lm) = (
        tile(l_qkv, &h_qkv),
        tile(l_o, &h_o),
        tile(l_gu, &h_gu),
        tile(l_dn, &h_dn),
        tile(l_lm, &h_lm),
    );
    let up = |h: &MxTiledHost| MxTiled::upload(&ctx, &owner, h).unwrap();
    let ones = |rng: &mut StdRng, n: usize| -> Vec<f32> {
        (0..n).map(|_| rng.random_range(0.8f32..1.2)).collect()
    };
    let kv_host: Vec<u16> = (0..cap * NKV * HD)
        .map(|i| {
            if i < ctx_len * NKV * HD {
                f16::from_f32(rng.random_range(-2.0f32..2.0)).to_bits()
            } else {
                0
            }
        })
        .collect();
    let kv_f32: Vec<f32> = kv_host
        .iter()
        .map(|b| f16::from_bits(*b).to_f32())
        .collect();
    let mut layers: Vec<Layer> = (0..n_layers)
        .map(|_| {
            let mut cache = KvCache::new(&ctx, &owner, f16_kv, cap, NKV).unwrap();
            match &mut cache {
                KvCache::F16 { k, v } => {
                    ctx.write(k, &kv_host).unwrap();
                    ctx.write(v, &kv_host).unwrap();
                }
                KvCache::F32 { k, v } => {
                    ctx.write(k, &kv_f32).unwrap();
                    ctx.write(v, &kv_f32).unwrap();
                }
            }
            Layer {
                qkv: up(&t_qkv),
                o: up(&t_o),
                gate_up: up(&t_gu),
                down: up(&t_dn),
                attn_norm: ctx
                    .upload(&owner, SpanKind::Resident, &ones(&mut rng, HIDDEN))
                    .unwrap(),
                mlp_norm: ctx
                    .upload(&owner, SpanKind::Resident, &ones(&mut rng, HIDDEN))
                    .unwrap(),
                q_norm: ctx
                    .upload(&owner, SpanKind::Resident, &ones(&mut rng, HD))
                    .unwrap(),
                k_norm: ctx
                    .upload(&owner, SpanKind::Resident, &ones(&mut rng, HD))
                    .unwrap(),
                cache,
            }
        })
        .collect();
    let lm_head = up(&t_lm);
    let positions: Vec<usize> = (0..cap).collect();
    let (c, s) = rope_tables(&positions, HD, HD, 1_000_000.0);
    let h0: Vec<f32> = (0..HIDDEN)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let scratch = |n: usize| ctx.alloc::<f32>(&owner, SpanKind::Scratch, n).unwrap();
    let mut b = Bufs {
        h: ctx.upload(&owner, SpanKind::Scratch, &h0).unwrap(),
        xn: scratch(HIDDEN),
        prep: XPrep::new(&ctx, &owner, INTER).unwrap(),
        qkv: scratch((NH + 2 * NKV) * HD),
        q: scratch(NH * HD),
        attn: scratch(NH * HD),
        gu: scratch(2 * INTER),
        act: scratch(INTER),
        logits: scratch(VOCAB),
        part: scratch(attn_partials_len(NH, cap)),
        pos: ctx
            .upload(&owner, SpanKind::Scratch, &[ctx_len as i32])
            .unwrap(),
        cos: ctx.upload(&owner, SpanKind::Resident, &c).unwrap(),
        sin: ctx.upload(&owner, SpanKind::Resident, &s).unwrap(),
        final_norm: ctx
            .upload(&owner, SpanKind::Resident, &ones(&mut rng, HIDDEN))
            .unwrap(),
    };
    ctx.synchronize().unwrap();
    let snap = ctx.ledger().snapshot();
    println!(
        "setup {:.1} s; ledger: device {}, live {:.2} GB ({} spans), room {:.1} GB",
        t0.elapsed().as_secs_f64(),
        snap.device,
        snap.live as f64 / 1e9,
        snap.owners.iter().map(|o| o.spans).sum::<usize>(),
        snap.room as f64 / 1e9
    );

    // Bytes per token.
    let w_layer = l_qkv.total_bytes() + l_o.total_bytes() + l_gu.total_bytes() + l_dn.total_bytes();
    let w_bytes = (n_layers * w_layer + l_lm.total_bytes()) as f64;
    let kv_elem = if f16_kv { 2.0 } else { 4.0 };
    // Timed tokens see ctx_len+1 .. ctx_len+~3·steps keys; use the mean as the KV read.
    let kv_per_key = (n_layers * 2 * NKV * HD) as f64 * kv_elem;

    // `--pdl`: the GEMVs start while the kernel before them finishes. Check first that
    // one step gives the same logits with and without it (same state: h restored).
    if pdl {
        let h0 = ctx.download(&b.h).unwrap();
        let mut run_once = |k: &Kernels, b: &mut Bufs| {
            ctx.write(&mut b.h, &h0).unwrap();
            ctx.write(&mut b.pos, &[ctx_len as i32]).unwrap();
            step(k, &mut layers, &lm_head, b, cap).unwrap();
            ctx.download(&b.logits).unwrap()
        };
        let plain = run_once(&k, &mut b);
        k.gemv.pdl = true;
        k.attn.pdl = true;
        k.ops.pdl = true;
        let with = run_once(&k, &mut b);
        let m = plain.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = plain
            .iter()
            .zip(&with)
            .fold(0f32, |a, (p, q)| a.max((p - q).abs()));
        println!("PDL on: one step's logits vs PDL off: max |diff| {d:.3e} (max |logit| {m:.3e})");
        assert!(d <= 1e-6 * m.max(1.0), "PDL changed the logits: {d} vs {m}");
        ctx.write(&mut b.h, &h0).unwrap();
    }

    // Plain launches.
    let reset = |b: &mut Bufs| ctx.write(&mut b.pos, &[ctx_len as i32]).unwrap();
    reset(&mut b);
    let ms_plain = time_ms(&ctx, 2, steps, || {
        step(&k, &mut layers, &lm_head, &mut b, cap)
    })
    .unwrap();
    let logits = ctx.download(&b.logits).unwrap();
    let finite = logits.iter().all(|v| v.is_finite());
    let hmax = ctx
        .download(&b.h)
        .unwrap()
        .iter()
        .fold(0f32, |a, v| a.max(v.abs()));

    // CUDA graph of one step.
    reset(&mut b);
    let stream = ctx.stream().clone();
    stream
        .begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    step(&k, &mut layers, &lm_head, &mut b, cap).unwrap();
    let graph = stream
        .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("captured graph");
    reset(&mut b);
    // Each timed call replays 4 tokens (one event pair per 4 replays).
    let ms_graph = time_ms(&ctx, 1, steps / 4 + 1, || {
        for _ in 0..4 {
            graph
                .launch()
                .map_err(|e| favlo_runtime::cuda::CudaError::Driver {
                    op: "cuGraphLaunch",
                    message: format!("{e:?}"),
                })?;
        }
        Ok(())
    })
    .unwrap()
        / 4.0;
    let pos_end = ctx.download(&b.pos).unwrap()[0] as usize;
    let mean_keys = (ctx_len + pos_end) as f64 / 2.0 + 1.0;
    let bytes = w_bytes + kv_per_key * mean_keys;
    let roof_ms = bytes / (copy * 1e9) * 1e3;

    // Breakdown: each kernel kind timed over all layers (plain launches).
    reset(&mut b);
    let t_qkv = time_ms(&ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.qkv, &b.prep, &mut b.qkv, false))
    })
    .unwrap();
    let t_o = time_ms(&ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.o, &b.prep, &mut b.attn, false))
    })
    .unwrap();
    let t_gu = time_ms(&ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.gate_up, &b.prep, &mut b.gu, false))
    })
    .unwrap();
    k.gemv.prep_x(&b.act, INTER, &mut b.prep).unwrap();
    let t_dn = time_ms(&ctx, 1, 5, || {
        layers
            .iter()
            .try_for_each(|l| k.gemv.gemv(&l.down, &b.prep, &mut b.xn, false))
    })
    .unwrap();
    k.gemv.prep_x(&b.xn, HIDDEN, &mut b.prep).unwrap();
    let t_lm = time_ms(&ctx, 1, 5, || {
        k.gemv.gemv(&lm_head, &b.prep, &mut b.logits, false)
    })
    .unwrap();
    let scale = 1.0 / (HD as f32).sqrt();
    let t_attn = time_ms(&ctx, 1, 5, || {
        layers.iter().try_for_each(|l| {
            k.attn.decode(
                &b.q,
                &l.cache,
                cap,
                NH,
                NKV,
                &b.pos,
                1,
                scale,
                &mut b.part,
                AttnOut::F32(&mut b.attn),
            )
        })
    })
    .unwrap();
    // The same parts as graphs (GPU time, no host launch cost), one token's worth each.
    let g_gemv = graph_ms(&ctx, 10, || {
        for l in &layers {
            k.gemv.gemv(&l.qkv, &b.prep, &mut b.qkv, false)?;
            k.gemv.gemv(&l.o, &b.prep, &mut b.attn, false)?;
            k.gemv.gemv(&l.gate_up, &b.prep, &mut b.gu, false)?;
            k.gemv.gemv(&l.down, &b.prep, &mut b.attn, false)?;
        }
        k.gemv.gemv(&lm_head, &b.prep, &mut b.logits, false)
    });
    let g_attn = graph_ms(&ctx, 10, || {
        for l in &layers {
            k.attn.decode(
                &b.q,
                &l.cache,
                cap,
                NH,
                NKV,
                &b.pos,
                1,
                scale,
                &mut b.part,
                AttnOut::Prep(&mut b.prep),
            )?;
        }
        Ok(())
    });
    let g_small = graph_ms(&ctx, 10, || {
        for l in layers.iter_mut() {
            k.gemv.rms_norm_prep(&b.h, &l.attn_norm, EPS, &mut b.prep)?;
            k.ops.qk_norm_rope_store(
                &b.qkv,
                &l.q_norm,
                &l.k_norm,
                &b.cos,
                &b.sin,
                &b.pos,
                NH,
                NKV,
                EPS,
                &mut b.q,
                &mut l.cache,
            )?;
            k.gemv.rms_norm_prep(&b.h, &l.mlp_norm, EPS, &mut b.prep)?;
            k.gemv.swiglu_prep(&b.gu, INTER, &mut b.prep)?;
        }
        k.gemv.rms_norm_prep(&b.h, &b.final_norm, EPS, &mut b.prep)
    });
    let gb = |ms: f64, by: usize| by as f64 * n_layers as f64 / (ms * 1e-3) / 1e9;
    let kv_now = (ctx_len + 1) as f64 * kv_per_key / n_layers as f64;
    println!(
        "\ncopy bandwidth {copy:.0} GB/s; KV cache {}; context {ctx_len} tokens; {n_layers} layers",
        if f16_kv { "f16" } else { "f32" }
    );
    println!("logits finite: {finite}; max |h| after the timed steps {hmax:.3}");
    println!("| part (all layers) | bytes | time | GB/s | % of copy |");
    println!("|---|---:|---:|---:|---:|");
    for (name, ms, by) in [
        ("qkv GEMV 6144×4096", t_qkv, l_qkv.total_bytes()),
        ("o GEMV 4096×4096", t_o, l_o.total_bytes()),
        ("gate|up GEMV 24576×4096", t_gu, l_gu.total_bytes()),
        ("down GEMV 4096×12288", t_dn, l_dn.total_bytes()),
    ] {
        let g = gb(ms, by);
        println!(
            "| {name} | {:.1} MB | {:.1} µs | {g:.0} | {:.0}% |",
            by as f64 * n_layers as f64 / 1e6,
            ms * 1e3,
            100.0 * g / copy
        );
    }
    let g = l_lm.total_bytes() as f64 / (t_lm * 1e-3) / 1e9;
    println!(
        "| lm_head GEMV 151936×4096 | {:.1} MB | {:.1} µs | {g:.0} | {:.0}% |",
        l_lm.total_bytes() as f64 / 1e6,
        t_lm * 1e3,
        100.0 * g / copy
    );
    let g = kv_now * n_layers as f64 / (t_attn * 1e-3) / 1e9;
    println!(
        "| attention ({} keys) | {:.1} MB | {:.1} µs | {g:.0} | {:.0}% |",
        ctx_len + 1,
        kv_now * n_layers as f64 / 1e6,
        t_attn * 1e3,
        100.0 * g / copy
    );
    let gemv_bytes = w_bytes;
    println!(
        "\nper token, as CUDA graphs: all GEMVs {:.3} ms ({:.0} GB/s, {:.0}% of copy); attention {:.3} ms; norms/prep/rope/swiglu {:.3} ms; sum {:.3} ms",
        g_gemv,
        gemv_bytes / (g_gemv * 1e-3) / 1e9,
        100.0 * gemv_bytes / (g_gemv * 1e-3) / 1e9 / copy,
        g_attn,
        g_small,
        g_gemv + g_attn + g_small
    );
    println!("\n| decode | ms/token | tokens/s | % of roofline |");
    println!("|---|---:|---:|---:|");
    println!(
        "| roofline ({:.2} GB/token at {copy:.0} GB/s) | {roof_ms:.3} | {:.0} | 100% |",
        bytes / 1e9,
        1e3 / roof_ms
    );
    println!(
        "| CUDA graph | {ms_graph:.3} | {:.0} | {:.0}% |",
        1e3 / ms_graph,
        100.0 * roof_ms / ms_graph
    );
    println!(
        "| plain launches | {ms_plain:.3} | {:.0} | {:.0}% |",
        1e3 / ms_plain,
        100.0 * roof_ms / ms_plain
    );
    drop((layers, lm_head, b, graph));
    ctx.sweep(&owner).expect("sweep");
}
