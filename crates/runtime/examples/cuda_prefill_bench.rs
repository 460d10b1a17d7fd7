//! Prefill GEMM benchmark: the four weight GEMMs of a Qwen3-8B-shaped layer (q|k|v
//! 6144×4096, o 4096×4096, gate|up 24576×4096, down 4096×12288) over 36 layers of
//! distinct MXFP8 (E4M3) weights (~7 GB, so nothing stays in the 60 MB L2), at a
//! 2048-token prefill (`FAVLO_PREFILL_TOKENS` overrides; `FAVLO_PREFILL_WEIGHTS=mxfp4`:
//! MXFP4 weights folded into grouped E4M3, grouped activations), on the tensor-core GEMM
//! `GemmMx`.
//!
//! FLOPs = 2·m·n·k per GEMM. Reported: per matrix (36 distinct copies per timed
//! repetition) and for the whole prefill's GEMMs, with and without the activation
//! quantization before each GEMM; TFLOP/s against the H200's FP8 dense datasheet
//! figure (1979 TFLOP/s, the "FP8 tensor-core roofline"); the probe kernel (same loads
//! and wgmma steps, no scale promotion) splits the time; every consumer loop
//! (`GemmKernel::Persistent`, the default, `Wide3`, `Pipelined` and `Serial`) is timed.
//! `FAVLO_PREFILL_SWIGLU_PROBE=1` only times the gate|up GEMM four ways (plain and
//! paired tilings through the plain and SwiGLU GEMMs, see `swiglu_probe`).
//! `FAVLO_PREFILL_EPILOGUE=1` only checks `Lean` (the default) against `VectorAdd` (the
//! default before it), whose values it must equal bit for bit, and times the two in
//! alternation (see `epilogue_probe`).
//! `FAVLO_PREFILL_ORDER_PROBE=1` only times every launch of the whole prefill's GEMMs in
//! two orders, matrix by matrix and layer by layer (see `order_probe`).
//! `FAVLO_PREFILL_PROFILE=1` only runs each matrix's GEMM (default loop, then the
//! probe) once after the checks, for Nsight Compute. Before timing, 4 tokens of
//! each matrix are checked against an f64 reference (max|err|/max|ref| ≤ 1e-3).
//! `tools/bench/cuda_prefill_anchor.py` times PyTorch (bf16 matmul, FP8 `_scaled_mm`) on the
//! same shapes.
//!
//! Run: `cargo run --release -p favlo-runtime --features cuda --example cuda_prefill_bench`

use favlo_mx::{ElementFormat, MxLayout, MxView};
use favlo_runtime::cuda::{
    CudaContext, CudaError, DeviceBuffer, GemmActs, GemmKernel, GemmMx, GemmWeights,
    GemmWeightsHost, TileStore, copy_bandwidth_gbps, tile_gemm, tile_gemm_swiglu, time_ms,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The H200's dense FP8 tensor-core rate from the datasheet (TFLOP/s).
const FP8_PEAK_TFLOPS: f64 = 1979.0;
const LAYERS: usize = 36;

/// Random packed E4M3 bytes (NaN codes avoided), scales 2^-10..2^-4; or random E2M1
/// codes with scales 2^-6..2^0 (MXFP4).
fn random_packed(layout: MxLayout, rng: &mut StdRng) -> Vec<u8> {
    let fp4 = layout.format == ElementFormat::Fp4E2M1;
    let mut b = vec![0u8; layout.total_bytes()];
    for r in 0..layout.rows {
        let n = if fp4 { layout.cols / 2 } else { layout.cols };
        let row = &mut b[r * layout.data_row_bytes()..][..n];
        rng.fill(row);
        if !fp4 {
            row.iter_mut()
                .filter(|v| (**v & 0x7f) == 0x7f)
                .for_each(|v| *v &= 0xfe);
        }
        let s = &mut b[layout.scale_offset() + r * layout.scale_row_bytes()..]
            [..layout.cols.div_ceil(32)];
        let range = if fp4 { 121u8..=127 } else { 117u8..=123 };
        s.iter_mut()
            .for_each(|v| *v = rng.random_range(range.clone()));
    }
    b
}

struct Mat {
    name: &'static str,
    n: usize,
    k: usize,
    /// Index into the activation sets (0: k = 4096, 1: k = 12288).
    xin: usize,
    accumulate: bool,
    copies: Vec<GemmWeights>,
    /// f32 decoded copy 0 (for the check).
    wf: Vec<f32>,
    /// The packed MX matrix (the SwiGLU probe re-tiles gate|up from it).
    layout: MxLayout,
    packed: Vec<u8>,
}

/// Median ms of every GEMM of the prefill, layer by layer, as `g` is set; with `swiglu =
/// Some((gu, paired))` as the chat runs them: the gate|up matrix (`mats[gu]`) through the
/// SwiGLU GEMM over `paired`, one copy per layer.
fn time_layers(
    ctx: &CudaContext,
    g: &GemmMx,
    (mats, swiglu): (&[Mat], Option<(usize, &[GemmWeights])>),
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
    (warm, reps): (usize, usize),
) -> Result<f64, CudaError> {
    time_ms(ctx, warm, reps, || {
        for l in 0..LAYERS {
            for (i, mm) in mats.iter().enumerate() {
                match swiglu {
                    Some((gu, paired)) if i == gu => g.gemm_swiglu(&acts[mm.xin], &paired[l], y)?,
                    _ => g.gemm(&acts[mm.xin], &mm.copies[l], y, mm.accumulate)?,
                }
            }
        }
        Ok(())
    })
}

/// TFLOP/s of `flop` in `ms` milliseconds.
fn tflops(flop: f64, ms: f64) -> f64 {
    flop / (ms * 1e-3) / 1e12
}

/// FLOPs (2·m·n·k) of every GEMM of the prefill over the layers, at `m` tokens.
fn prefill_flop(mats: &[Mat], m: usize) -> f64 {
    mats.iter()
        .map(|mm| 2.0 * (m * mm.n * mm.k) as f64 * LAYERS as f64)
        .sum()
}

/// Per matrix, TFLOP/s of its GEMM over the layers' copies in a row (median ms), as `g`
/// is set.
fn time_matrices(
    ctx: &CudaContext,
    g: &GemmMx,
    mats: &[Mat],
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
    (warm, reps): (usize, usize),
) -> Result<Vec<f64>, CudaError> {
    mats.iter()
        .map(|mm| {
            let a = &acts[mm.xin];
            let ms = time_ms(ctx, warm, reps, || {
                mm.copies
                    .iter()
                    .try_for_each(|w| g.gemm(a, w, y, mm.accumulate))
            })?;
            Ok(tflops(prefill_flop(std::slice::from_ref(mm), a.rows()), ms))
        })
        .collect()
}

/// gate|up (`mm`) tiled for the SwiGLU GEMM (`tile_gemm_swiglu`), one copy per layer.
fn paired_copies(
    ctx: &CudaContext,
    owner: &Owner,
    mm: &Mat,
) -> Result<Vec<GemmWeights>, Box<dyn std::error::Error>> {
    let view = MxView::new(mm.layout, &mm.packed)?;
    Ok(layer_copies(ctx, owner, &tile_gemm_swiglu(view)?)?)
}

/// `host` uploaded once per layer: the upload and `LAYERS - 1` device copies of it.
fn layer_copies(
    ctx: &CudaContext,
    owner: &Owner,
    host: &GemmWeightsHost,
) -> Result<Vec<GemmWeights>, CudaError> {
    let w0 = GemmWeights::upload(ctx, owner, host)?;
    let mut copies = (1..LAYERS)
        .map(|_| w0.duplicate(ctx, owner))
        .collect::<Result<Vec<_>, _>>()?;
    copies.insert(0, w0);
    Ok(copies)
}

/// The alternated comparisons' table: a header naming the variant column, then one row
/// per round and variant (per matrix TFLOP/s, all GEMMs and as the chat runs them).
fn print_round_header(variant: &str) {
    println!(
        "\n| round | {variant} | q|k|v TF/s | o TF/s | gate|up TF/s | down TF/s | all GEMMs ms | TFLOP/s | % of FP8 peak | as the chat runs them ms | TFLOP/s | % of FP8 peak |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

fn print_round(round: usize, label: &str, per: &[f64], (all, chat): (f64, f64), flop: f64) {
    println!(
        "| {round} | {label} | {:.0} | {:.0} | {:.0} | {:.0} | {all:.3} | {:.0} | {:.1}% | {chat:.3} | {:.0} | {:.1}% |",
        per[0],
        per[1],
        per[2],
        per[3],
        tflops(flop, all),
        100.0 * tflops(flop, all) / FP8_PEAK_TFLOPS,
        tflops(flop, chat),
        100.0 * tflops(flop, chat) / FP8_PEAK_TFLOPS
    );
}

/// How many of `a`'s values differ from `b`'s in any bit.
fn differing(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, z)| x.to_bits() != z.to_bits())
        .count()
}

/// `FAVLO_PREFILL_ORDER_PROBE=1`: where the whole prefill's GEMMs lose time against the
/// per-matrix loops. Each launch is followed by an event, so every launch's time (with
/// any gap before it) is known, in two orders: each matrix's 36 copies in a row (as the
/// per-matrix rows), and layer by layer (as the prefill runs them). Per matrix: the
/// median over 7 repetitions of the sum of its launches, in both orders.
fn order_probe(
    ctx: &CudaContext,
    g: &GemmMx,
    mats: &[Mat],
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
) -> Result<(), Box<dyn std::error::Error>> {
    use cudarc::driver::sys::CUevent_flags;
    let raw = ctx.stream().context();
    let launches = mats.len() * LAYERS;
    let events = (0..=launches)
        .map(|_| raw.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<Result<Vec<_>, _>>()?;
    let launch = |(mi, l): (usize, usize), y: &mut DeviceBuffer<f32>| {
        let mm: &Mat = &mats[mi];
        g.gemm(&acts[mm.xin], &mm.copies[l], y, mm.accumulate)
    };
    // One repetition in the given order of (matrix, layer) pairs, an event after each
    // launch: per matrix, the sum of its launches' times.
    let evented = |order: &[(usize, usize)],
                   y: &mut DeviceBuffer<f32>|
     -> Result<Vec<f64>, Box<dyn std::error::Error>> {
        events[0].record(ctx.stream())?;
        for (i, &p) in order.iter().enumerate() {
            launch(p, y)?;
            events[i + 1].record(ctx.stream())?;
        }
        events[launches].synchronize()?;
        let mut sums = vec![0.0; mats.len()];
        for (i, &(mi, _)) in order.iter().enumerate() {
            sums[mi] += f64::from(events[i].elapsed_ms(&events[i + 1])?);
        }
        Ok(sums)
    };
    let by_matrix: Vec<(usize, usize)> = (0..mats.len())
        .flat_map(|mi| (0..LAYERS).map(move |l| (mi, l)))
        .collect();
    let by_layer: Vec<(usize, usize)> = (0..LAYERS)
        .flat_map(|l| (0..mats.len()).map(move |mi| (mi, l)))
        .collect();
    // Per repetition after 2 warm-ups, alternating the orders so clock drift falls on
    // both alike: [evented by matrix, evented by layer, no events by matrix] per matrix,
    // and the layer-by-layer loop with no events timed whole.
    let mut per_matrix: Vec<[Vec<f64>; 3]> = vec![Default::default(); mats.len()];
    let mut whole = Vec::new();
    for rep in 0..9 {
        let sa = evented(&by_matrix, y)?;
        let sb = evented(&by_layer, y)?;
        let pa = by_matrix
            .chunks(LAYERS)
            .map(|c| time_ms(ctx, 0, 1, || c.iter().try_for_each(|&p| launch(p, y))))
            .collect::<Result<Vec<_>, _>>()?;
        let pb = time_layers(ctx, g, (mats, None), acts, y, (0, 1))?;
        if rep >= 2 {
            for (mi, v) in per_matrix.iter_mut().enumerate() {
                v[0].push(sa[mi]);
                v[1].push(sb[mi]);
                v[2].push(pa[mi]);
            }
            whole.push(pb);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "order probe: per matrix, the sum of its {LAYERS} launches, median of 7 (event after each launch; none)"
    );
    println!(
        "{:<10} {:>14} {:>14} {:>8} {:>14}",
        "GEMM", "by matrix ms", "by layer ms", "ratio", "no events ms"
    );
    let mut total = [0.0; 3];
    for (mm, v) in mats.iter().zip(&per_matrix) {
        let [x, z, p] = [median(&v[0]), median(&v[1]), median(&v[2])];
        total = [total[0] + x, total[1] + z, total[2] + p];
        println!(
            "{:<10} {x:>14.3} {z:>14.3} {:>8.3} {p:>14.3}",
            mm.name,
            z / x
        );
    }
    let [x, z, p] = total;
    println!("{:<10} {x:>14.3} {z:>14.3} {:>8.3} {p:>14.3}", "all", z / x);
    println!(
        "the layer-by-layer loop with no events, timed whole: {:.3} ms",
        median(&whole)
    );
    Ok(())
}

/// `FAVLO_PREFILL_EPILOGUE=1`: the tile stores that must write `TileStore::VectorAdd`'s
/// values (`Lean`), checked bit for bit against it on every matrix, `y =` and `y +=`
/// (from the same random `y`), then timed against it in alternation, four rounds, the
/// order reversed every other round (the clock under the power cap drifts by more than
/// most variants differ, and the first timing after a pause runs on a cooler card): per
/// matrix over its 36 copies, the whole prefill's GEMMs layer by layer, and the same as
/// the chat runs them (gate|up through the SwiGLU GEMM, whose epilogue is the same for
/// every store; `favlo bench prefill`'s total).
fn epilogue_probe(
    ctx: &CudaContext,
    owner: &Owner,
    g: &mut GemmMx,
    mats: &[Mat],
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
) -> Result<(), Box<dyn std::error::Error>> {
    let stores = [TileStore::VectorAdd, TileStore::Lean];
    let saved = g.store;
    let m = acts[0].rows();
    let mut rng = StdRng::seed_from_u64(9);
    for mm in mats {
        let y0: Vec<f32> = (0..m * mm.n)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        for accumulate in [false, true] {
            let mut outs = Vec::new();
            for store in stores {
                g.store = store;
                let mut yd = ctx.upload(owner, SpanKind::Scratch, &y0)?;
                g.gemm(&acts[mm.xin], &mm.copies[0], &mut yd, accumulate)?;
                outs.push(ctx.download(&yd)?);
            }
            for (store, out) in stores.iter().zip(&outs).skip(1) {
                let differ = differing(out, &outs[0]);
                println!(
                    "check {:8} {store:?}{}: {differ} of {} outputs differ from VectorAdd",
                    mm.name,
                    if accumulate { " (y +=)" } else { "" },
                    out.len()
                );
                if differ > 0 {
                    return Err(
                        format!("{store:?} is not VectorAdd's values on {}", mm.name).into(),
                    );
                }
            }
        }
    }
    let Some(gu) = mats.iter().position(|mm| mm.name == "gate|up") else {
        return Err("no gate|up matrix".into());
    };
    let paired = paired_copies(ctx, owner, &mats[gu])?;
    let (warm, reps) = (2, 7);
    let all_flop = prefill_flop(mats, m);
    print_round_header("tile store");
    // (all GEMMs, as the chat runs them) per round, per store in `stores`' order.
    let mut totals = vec![Vec::new(); stores.len()];
    for round in 1..=4 {
        let order: Vec<usize> = if round % 2 == 1 {
            (0..stores.len()).collect()
        } else {
            (0..stores.len()).rev().collect()
        };
        for i in order {
            g.store = stores[i];
            let per = time_matrices(ctx, g, mats, acts, y, (warm, reps))?;
            let all = time_layers(ctx, g, (mats, None), acts, y, (warm, reps))?;
            let chat = time_layers(ctx, g, (mats, Some((gu, &paired))), acts, y, (warm, reps))?;
            print_round(
                round,
                &format!("{:?}", stores[i]),
                &per,
                (all, chat),
                all_flop,
            );
            totals[i].push((all, chat));
        }
    }
    // The rounds summed up: the means, and in how many rounds each store beat the first
    // (the same round's timing, so drift between rounds falls on both alike).
    let means = |t: &[(f64, f64)]| {
        let n = t.len().max(1) as f64;
        let sum = t.iter().fold((0.0, 0.0), |s, p| (s.0 + p.0, s.1 + p.1));
        (sum.0 / n, sum.1 / n)
    };
    let (base_all, base_chat) = means(&totals[0]);
    for (store, t) in stores.iter().zip(&totals).skip(1) {
        let (all, chat) = means(t);
        let pairs = || t.iter().zip(&totals[0]);
        println!(
            "{store:?} against {:?} over {} rounds: all GEMMs mean {all:.3} ms against {base_all:.3} (faster in {}), as the chat runs them {chat:.3} against {base_chat:.3} (faster in {})",
            stores[0],
            t.len(),
            pairs().filter(|(a, b)| a.0 < b.0).count(),
            pairs().filter(|(a, b)| a.1 < b.1).count(),
        );
    }
    g.store = saved;
    Ok(())
}

/// `FAVLO_PREFILL_SWIGLU_PROBE=1`: where the SwiGLU gate|up GEMM (`gemm_swiglu` over
/// `tile_gemm_swiglu`, the chat's) loses its time against the plain one. Four runs of
/// the gate|up GEMM over the layers' copies, timed in turn three times (so drift in the
/// clock under the power cap falls on all alike):
/// A plain tiling, plain GEMM; B paired tiling, SwiGLU GEMM; C the paired tiling through
/// the plain GEMM (same weight bytes as B, plain epilogue); D the plain tiling through
/// the SwiGLU GEMM (same bytes as A, SwiGLU epilogue; its values are not a SwiGLU).
/// C near A and D near B put the cost in the epilogue; C near B puts it in the tiling.
fn swiglu_probe(
    ctx: &CudaContext,
    owner: &Owner,
    g: &GemmMx,
    mats: &[Mat],
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(mm) = mats.iter().find(|mm| mm.name == "gate|up") else {
        return Err("no gate|up matrix".into());
    };
    let paired = paired_copies(ctx, owner, mm)?;
    // The same device bytes flagged the other way round (each flag only selects the
    // entry point that accepts the tiling; the kernels read the bytes as they are).
    let as_plain = |w: &GemmWeights| -> Result<GemmWeights, CudaError> {
        let mut d = w.duplicate(ctx, owner)?;
        d.swiglu = !d.swiglu;
        Ok(d)
    };
    let paired_plain = paired.iter().map(as_plain).collect::<Result<Vec<_>, _>>()?;
    let plain_swiglu = mm
        .copies
        .iter()
        .map(as_plain)
        .collect::<Result<Vec<_>, _>>()?;
    let a = &acts[mm.xin];
    let flop = 2.0 * (a.rows() * mm.n * mm.k) as f64 * mm.copies.len() as f64;
    let runs: [(&str, &[GemmWeights], bool); 4] = [
        ("A plain tiling, plain GEMM", &mm.copies, false),
        ("B paired tiling, SwiGLU GEMM (the chat's)", &paired, true),
        ("C paired tiling, plain GEMM", &paired_plain, false),
        ("D plain tiling, SwiGLU GEMM", &plain_swiglu, true),
    ];
    let mut ms = vec![Vec::new(); runs.len()];
    for _ in 0..3 {
        for (i, (_, ws, swiglu)) in runs.iter().enumerate() {
            ms[i].push(time_ms(ctx, 2, 7, || {
                for w in ws.iter() {
                    if *swiglu {
                        g.gemm_swiglu(a, w, y)?;
                    } else {
                        g.gemm(a, w, y, false)?;
                    }
                }
                Ok(())
            })?);
        }
    }
    println!(
        "\n| gate|up {}×{}, {} copies | ms (three turns) | TFLOP/s (best) |",
        mm.n,
        mm.k,
        mm.copies.len()
    );
    println!("|---|---|---:|");
    for ((label, _, _), t) in runs.iter().zip(&ms) {
        let best = t.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| {label} | {} | {:.0} |",
            t.iter()
                .map(|v| format!("{v:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            flop / (best * 1e-3) / 1e12
        );
    }
    Ok(())
}

/// max|y − ref| / max|ref| over the first `toks` tokens, all columns.
fn check(xq: &[f32], wf: &[f32], y: &[f32], n: usize, k: usize, toks: usize) -> f64 {
    let (mut err, mut max) = (0f64, 0f64);
    for t in 0..toks {
        for c in 0..n {
            let want: f64 = xq[t * k..(t + 1) * k]
                .iter()
                .zip(&wf[c * k..(c + 1) * k])
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum();
            max = max.max(want.abs());
            err = err.max((y[t * n + c] as f64 - want).abs());
        }
    }
    err / max.max(1e-30)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match CudaContext::open(0, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cuda_prefill_bench: {e}");
            std::process::exit(2);
        }
    };
    let m: usize = std::env::var("FAVLO_PREFILL_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let t0 = std::time::Instant::now();
    let mut g = GemmMx::load(&ctx)?;
    println!(
        "device {} ({}), GEMM module loaded in {:.0} ms (cache hit {}), {m} tokens, {LAYERS} layers",
        ctx.name(),
        ctx.arch(),
        t0.elapsed().as_secs_f64() * 1e3,
        g.from_cache
    );
    // FAVLO_PREFILL_STORE=direct|bulk|vector|vector-add|lean: how the persistent kernel writes a tile
    // ([`TileStore`]), for the default rows and FAVLO_PREFILL_PROFILE.
    match std::env::var("FAVLO_PREFILL_STORE").as_deref() {
        Ok("direct") => g.store = TileStore::Direct,
        Ok("bulk") => g.store = TileStore::Bulk,
        Ok("vector") => g.store = TileStore::Vector,
        Ok("vector-add") => g.store = TileStore::VectorAdd,
        Ok("lean") => g.store = TileStore::Lean,
        Ok(v) => return Err(format!("FAVLO_PREFILL_STORE={v}: not a tile store").into()),
        Err(_) => {}
    }
    let copy = copy_bandwidth_gbps(&ctx, 1 << 30, 10)?;
    println!("device-to-device copy (1 GiB, read+write): {copy:.0} GB/s");

    // FAVLO_PREFILL_WEIGHTS=mxfp4: MXFP4 weights, folded into grouped E4M3 codes, with
    // grouped activations (the grouped kernels run for Persistent and Wide3).
    let format = if std::env::var("FAVLO_PREFILL_WEIGHTS").is_ok_and(|v| v == "mxfp4") {
        ElementFormat::Fp4E2M1
    } else {
        ElementFormat::Fp8E4M3
    };
    println!("weights {format:?}");
    let owner = Owner::mint("cuda-prefill-bench");
    let mut rng = StdRng::seed_from_u64(5);
    let mut mats = Vec::new();
    for (name, n, k, xin, accumulate) in [
        ("q|k|v", 6144, 4096, 0, false),
        ("o", 4096, 4096, 0, true),
        ("gate|up", 24576, 4096, 0, false),
        ("down", 4096, 12288, 1, true),
    ] {
        let layout = MxLayout::new(format, n, k);
        let packed = random_packed(layout, &mut rng);
        let view = MxView::new(layout, &packed)?;
        let copies = layer_copies(&ctx, &owner, &tile_gemm(view)?)?;
        mats.push(Mat {
            name,
            n,
            k,
            xin,
            accumulate,
            copies,
            wf: view.dequantize(),
            layout,
            packed,
        });
    }
    let wbytes: u64 = mats
        .iter()
        .flat_map(|mm| mm.copies.iter().map(|w| w.device_bytes()))
        .sum();
    println!(
        "weights: {:.2} GB on the device ({:.0} s to build)",
        wbytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );

    // Activations for k = 4096 and k = 12288, quantized once for the checks.
    let mut xs = Vec::new();
    let mut acts = Vec::new();
    for k in [4096usize, 12288] {
        let x: Vec<f32> = (0..m * k)
            .map(|_| rng.random_range(-1.0f32..1.0) + 0.01)
            .collect();
        let xd = ctx.upload(&owner, SpanKind::Scratch, &x)?;
        let grouped = mats.iter().all(|mm| mm.copies[0].grouped);
        let mut a = GemmActs::new(&ctx, &owner, m, k)?.grouped(grouped);
        g.quantize(&xd, m, k, k, &mut a)?;
        xs.push(xd);
        acts.push(a);
    }
    let nmax = mats.iter().map(|mm| mm.n).max().unwrap_or(0);
    let mut y = ctx.alloc::<f32>(&owner, SpanKind::Scratch, m * nmax)?;
    // The quantized activations as the checks' reference inputs, downloaded once.
    let xqs = acts
        .iter()
        .map(|a| a.values(&ctx))
        .collect::<Result<Vec<_>, _>>()?;

    // Correctness of each matrix (4 tokens, all columns) before timing; the swapped
    // descriptor variant is reported for diagnosis.
    let toks = m.min(4);
    let mut w3_ok = true;
    for mm in &mats {
        let xq = &xqs[mm.xin];
        for (kernel, swap) in [
            (GemmKernel::Persistent, false),
            (GemmKernel::Wide3, false),
            (GemmKernel::Pipelined, false),
            (GemmKernel::Serial, false),
            (GemmKernel::Serial, true),
        ] {
            g.kernel = kernel;
            g.desc_swap = swap;
            g.gemm(&acts[mm.xin], &mm.copies[0], &mut y, false)?;
            let yh = ctx.download(&y)?;
            let e = check(xq, &mm.wf, &yh, mm.n, mm.k, toks);
            println!(
                "check {:8} {:?} {}x{}{}: max rel err {e:.3e} over {toks} tokens",
                mm.name,
                kernel,
                mm.n,
                mm.k,
                if swap {
                    " (swapped descriptor offsets)"
                } else {
                    ""
                }
            );
            if !swap && (e.is_nan() || e > 1e-3) {
                if kernel != GemmKernel::Wide3 {
                    return Err(format!("{}: GEMM error {e:.3e} > 1e-3", mm.name).into());
                }
                println!("Wide3 FAILED its check: not timed");
                w3_ok = false;
            }
        }
        g.desc_swap = false;
        g.kernel = GemmKernel::Persistent;
    }
    if std::env::var("FAVLO_PREFILL_SWIGLU_PROBE").is_ok_and(|v| v == "1") {
        return swiglu_probe(&ctx, &owner, &g, &mats, &acts, &mut y);
    }
    if std::env::var("FAVLO_PREFILL_EPILOGUE").is_ok_and(|v| v == "1") {
        return epilogue_probe(&ctx, &owner, &mut g, &mats, &acts, &mut y);
    }
    if std::env::var("FAVLO_PREFILL_ORDER_PROBE").is_ok_and(|v| v == "1") {
        return order_probe(&ctx, &g, &mats, &acts, &mut y);
    }
    if std::env::var("FAVLO_PREFILL_PROFILE").is_ok_and(|v| v == "1") {
        for mm in &mats {
            g.gemm(&acts[mm.xin], &mm.copies[1], &mut y, mm.accumulate)?;
            g.gemm_probe(&acts[mm.xin], &mm.copies[2], &mut y)?;
        }
        ctx.synchronize()?;
        println!("profile run done");
        return Ok(());
    }

    let (warm, reps) = (2, 7);

    // The ways the persistent kernel can write a tile, checked then timed over the whole
    // prefill's GEMMs (the first row is the default as loaded).
    let variants = [
        ("as loaded", g.store),
        ("per-thread stores", TileStore::Direct),
        ("copy engine", TileStore::Bulk),
        ("16-byte stores, y += by the copy engine", TileStore::Vector),
        (
            "16-byte stores, y += by 16-byte loads and stores",
            TileStore::VectorAdd,
        ),
        ("the same values, lean epilogue", TileStore::Lean),
    ];
    let saved = g.store;
    println!(
        "\n| tile store | q|k|v TF/s | o TF/s | gate|up TF/s | down TF/s | all GEMMs ms | TFLOP/s | % of FP8 peak | max rel err |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let all_flop = prefill_flop(&mats, m);
    for (label, store) in variants {
        g.store = store;
        let mut worst = 0f64;
        for mm in &mats {
            g.gemm(&acts[mm.xin], &mm.copies[0], &mut y, false)?;
            let e = check(&xqs[mm.xin], &mm.wf, &ctx.download(&y)?, mm.n, mm.k, toks);
            if e.is_nan() || e > 1e-3 {
                return Err(format!("{label}, {}: GEMM error {e:.3e} > 1e-3", mm.name).into());
            }
            worst = worst.max(e);
        }
        let per = time_matrices(&ctx, &g, &mats, &acts, &mut y, (warm, reps))?;
        let all = time_layers(&ctx, &g, (&mats, None), &acts, &mut y, (warm, reps))?;
        println!(
            "| {label} ({store:?}) | {:.0} | {:.0} | {:.0} | {:.0} | {all:.3} | {:.0} | {:.1}% | {worst:.2e} |",
            per[0],
            per[1],
            per[2],
            per[3],
            tflops(all_flop, all),
            100.0 * tflops(all_flop, all) / FP8_PEAK_TFLOPS
        );
    }
    g.store = saved;
    println!(
        "\n| GEMM | n×k | ms for {LAYERS} layers | TFLOP/s | % of FP8 peak ({FP8_PEAK_TFLOPS}) | three consumer warpgroups ms | TFLOP/s | pipelined, one block per tile, ms | TFLOP/s | serial loop ms | TFLOP/s | probe (no promotion) ms | TFLOP/s | one copy (L2 reuse) TFLOP/s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for mm in &mats {
        let flop = prefill_flop(std::slice::from_ref(mm), m);
        let a = &acts[mm.xin];
        let mut run = |g: &GemmMx, probe: bool, one: bool| {
            time_ms(&ctx, warm, reps, || {
                for w in &mm.copies {
                    let w = if one { &mm.copies[0] } else { w };
                    if probe {
                        g.gemm_probe(a, w, &mut y)?;
                    } else {
                        g.gemm(a, w, &mut y, mm.accumulate)?;
                    }
                }
                Ok(())
            })
        };
        let ms = run(&g, false, false)?;
        let ms_one = run(&g, false, true)?;
        let ms_probe = run(&g, true, false)?;
        g.kernel = GemmKernel::Wide3;
        let ms_w3 = if w3_ok {
            run(&g, false, false)?
        } else {
            f64::NAN
        };
        g.kernel = GemmKernel::Pipelined;
        let ms_pipe = run(&g, false, false)?;
        g.kernel = GemmKernel::Serial;
        let ms_serial = run(&g, false, false)?;
        g.kernel = GemmKernel::Persistent;
        println!(
            "| {} | {}×{} | {:.3} | {:.0} | {:.1}% | {:.3} | {:.0} | {:.3} | {:.0} | {:.3} | {:.0} | {:.3} | {:.0} | {:.0} |",
            mm.name,
            mm.n,
            mm.k,
            ms,
            tflops(flop, ms),
            100.0 * tflops(flop, ms) / FP8_PEAK_TFLOPS,
            ms_w3,
            tflops(flop, ms_w3),
            ms_pipe,
            tflops(flop, ms_pipe),
            ms_serial,
            tflops(flop, ms_serial),
            ms_probe,
            tflops(flop, ms_probe),
            tflops(flop, ms_one)
        );
    }
    // Activation quantization alone (per GEMM input).
    let q_ms: Vec<f64> = [4096usize, 12288]
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let (xd, a) = (&xs[i], &mut acts[i]);
            time_ms(&ctx, warm, reps, || g.quantize(xd, m, k, k, a))
        })
        .collect::<Result<_, _>>()?;
    // The whole prefill's GEMMs, layer by layer, with the default (persistent) and the
    // three-consumer kernel.
    for kernel in [GemmKernel::Persistent, GemmKernel::Wide3] {
        if kernel == GemmKernel::Wide3 && !w3_ok {
            continue;
        }
        g.kernel = kernel;
        let gemms_only = time_layers(&ctx, &g, (&mats, None), &acts, &mut y, (warm, reps))?;
        let with_quant = time_ms(&ctx, warm, reps, || {
            for l in 0..LAYERS {
                for mm in &mats {
                    let k = mm.k;
                    g.quantize(&xs[mm.xin], m, k, k, &mut acts[mm.xin])?;
                    g.gemm(&acts[mm.xin], &mm.copies[l], &mut y, mm.accumulate)?;
                }
            }
            Ok(())
        })?;
        println!(
            "| **all GEMMs of the prefill ({kernel:?})** | 4 per layer | {gemms_only:.3} | {:.0} | {:.1}% | | | | | | | | | |",
            tflops(all_flop, gemms_only),
            100.0 * tflops(all_flop, gemms_only) / FP8_PEAK_TFLOPS
        );
        println!(
            "| **+ activation quantization before each ({kernel:?})** | 4 + 4 per layer | {with_quant:.3} | {:.0} | {:.1}% | | | | | | | | | |",
            tflops(all_flop, with_quant),
            100.0 * tflops(all_flop, with_quant) / FP8_PEAK_TFLOPS
        );
    }
    g.kernel = GemmKernel::Persistent;
    println!(
        "\nactivation quantization alone: k=4096 {:.1} µs, k=12288 {:.1} µs per call ({m} tokens)",
        q_ms[0] * 1e3,
        q_ms[1] * 1e3
    );
    drop((mats, xs, acts, y));
    ctx.sweep(&owner)?;
    Ok(())
}
