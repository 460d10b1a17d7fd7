//! The prefill GEMMs of a Qwen3-8B-shaped model (`favlo bench prefill --device cuda`):
//! per layer q|k|v 6144×4096, o 4096×4096 (`y +=`), gate|up 24576×4096 and down
//! 4096×12288 (`y +=`) over `layers` distinct random MXFP8 (or MXFP4) weight copies
//! (~7 GB, no L2 reuse) at `tokens` tokens, on two paths:
//! - the FP8 tensor-core GEMM (`GemmMx`, wgmma, E4M3 activations with a per-row and
//!   per-(tile, block) power-of-two scale, the per-32 weight scales promoted per k step;
//!   MXFP4 weights folded exactly into E4M3 codes with one scale per (row, 128 k), so
//!   activations get one C per (tile, 128 k) and the GEMM promotes once per stage),
//!   with and without its activation quantization;
//! - the exact-operand GEMM the chat prefill runs (`MxGemm`: weights expanded to bf16,
//!   activations in two bf16 planes, cuBLASLt).
//!
//! The gate|up row times the GEMM the chat's FP8 prefill runs: gate and up rows paired at
//! open (`tile_gemm_swiglu`) and silu(gate)·up stored by the GEMM (`GemmMx::gemm_swiglu`,
//! `[m, ff]` f32 out); the plain gate|up GEMM (`[m, 2·ff]` f32 out) is timed beside it
//! as a row of its own, outside the totals.
//!
//! Key design choice: the figures are TFLOP/s of 2·m·n·k against the dense FP8
//! datasheet rate (the "FP8 tensor-core roofline"), beside the tensor cores' rate
//! measured in the same run (the GEMM's wgmma chained with no loads, at the clock the
//! power cap holds under load), and each path is checked against
//! an f64 product on a few tokens before it is timed (GemmMx against its own quantized
//! activations ≤ 1e-3; MxGemm against the f32 activations ≤ 3e-5).

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxView};

use super::gemv::describe;
use super::{BenchError, Rng, random_mx};
use crate::cuda::{
    CudaContext, CudaError, DeviceBuffer, GemmActs, GemmMx, GemmWeights, MxGemm, MxTiled,
    PrefillOps, XPrep, mx_gemm_k, tile_gemm, tile_gemm_swiglu, tile_mx, time_ms,
};
use crate::ledger::{Owner, SpanKind};

/// The H200's (and H100's) dense FP8 tensor-core rate from the datasheet, TFLOP/s.
pub const FP8_PEAK_TFLOPS: f64 = 1979.0;

/// What to run.
#[derive(Clone, Debug)]
pub struct PrefillBenchOptions {
    /// Prompt tokens (rows of every GEMM).
    pub tokens: usize,
    /// Decoder layers (distinct weight copies per matrix).
    pub layers: usize,
    /// Weight format: MXFP8 (E4M3) or MXFP4 (folded exactly into E4M3 codes with one
    /// scale per (row, 128 k), so the GEMM promotes once per 128 k); both paths run.
    pub format: ElementFormat,
}

impl Default for PrefillBenchOptions {
    fn default() -> Self {
        PrefillBenchOptions {
            tokens: 2048,
            layers: 36,
            format: ElementFormat::Fp4E2M1,
        }
    }
}

/// One matrix of the layer, summed over the layers.
#[derive(Clone, Debug)]
pub struct PrefillRow {
    pub name: &'static str,
    pub n: usize,
    pub k: usize,
    /// 2·m·n·k over the layers.
    pub flop: f64,
    /// `GemmMx` (activations already quantized), ms.
    pub fp8_ms: f64,
    /// `MxGemm` (expansion, split and the bf16 GEMMs), ms.
    pub exact_ms: f64,
    /// Max relative error of the checks (GemmMx, MxGemm).
    pub fp8_err: f64,
    pub exact_err: f64,
    /// Part of the prefill's totals; false for a comparison row (the plain gate|up
    /// GEMM beside the SwiGLU one the chat runs).
    pub counted: bool,
}

/// The figures of one run.
#[derive(Clone, Debug)]
pub struct PrefillBench {
    pub device: String,
    pub tokens: usize,
    pub layers: usize,
    pub rows: Vec<PrefillRow>,
    /// The weight format.
    pub format: ElementFormat,
    /// All GEMMs layer by layer: GemmMx alone, GemmMx with the activation quantization
    /// before each GEMM, MxGemm (ms).
    pub fp8_total_ms: f64,
    pub fp8_quant_total_ms: f64,
    pub exact_total_ms: f64,
    /// The tensor cores' ceiling measured right after the FP8 totals, TFLOP/s: the
    /// GEMM's wgmma instruction chained on operands already in shared memory
    /// (`GemmMx::tensor_ceiling`), at the clock the power cap then holds.
    pub tc_ceiling_tflops: f64,
    /// Weight bytes on the device for each path.
    pub fp8_weight_bytes: u64,
    pub exact_weight_bytes: u64,
}

impl PrefillBench {
    /// FLOPs of all the GEMMs of the prefill (the counted rows).
    pub fn flop(&self) -> f64 {
        self.rows.iter().filter(|r| r.counted).map(|r| r.flop).sum()
    }
}

/// TFLOP/s of `flop` in `ms`.
pub fn tflops(flop: f64, ms: f64) -> f64 {
    flop / (ms * 1e-3) / 1e12
}

struct Mat {
    name: &'static str,
    n: usize,
    k: usize,
    /// 0: k = 4096, 1: k = 12288.
    xin: usize,
    accumulate: bool,
    /// One `GemmMx` copy per layer (plain tiling).
    fp8: Vec<GemmWeights>,
    /// gate|up only: the rows paired for `gemm_swiglu`, one copy per layer; the plain
    /// copies then give the comparison row.
    swiglu: Vec<GemmWeights>,
    exact: Vec<MxTiled>,
    wf: Vec<f32>,
}

impl Mat {
    /// The GEMM the chat prefill runs for this matrix.
    fn run(
        &self,
        g: &GemmMx,
        x: &GemmActs,
        l: usize,
        y: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        match self.swiglu.get(l) {
            Some(w) => g.gemm_swiglu(x, w, y),
            None => g.gemm(x, &self.fp8[l], y, self.accumulate),
        }
    }
}

/// max |y − silu(gate)·up| / max |silu(gate)·up| over the first `toks` rows, from the
/// plain gate|up GEMM's output `gu` (`[m, 2·ff]`) and the SwiGLU GEMM's `y` (`[m, ff]`).
fn check_swiglu(gu: &[f32], y: &[f32], ff: usize, toks: usize) -> f64 {
    let (mut err, mut max) = (0f64, 0f64);
    for t in 0..toks {
        for c in 0..ff {
            let (gate, up) = (
                f64::from(gu[t * 2 * ff + c]),
                f64::from(gu[t * 2 * ff + ff + c]),
            );
            let want = gate / (1.0 + (-gate).exp()) * up;
            max = max.max(want.abs());
            err = err.max((f64::from(y[t * ff + c]) - want).abs());
        }
    }
    err / max.max(1e-30)
}

/// max |y − ref| / max |ref| over the first `toks` rows, all columns.
fn check(x: &[f32], wf: &[f32], y: &[f32], n: usize, k: usize, toks: usize) -> f64 {
    let (mut err, mut max) = (0f64, 0f64);
    for t in 0..toks {
        for c in 0..n {
            let want: f64 = x[t * k..(t + 1) * k]
                .iter()
                .zip(&wf[c * k..(c + 1) * k])
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            max = max.max(want.abs());
            err = err.max((f64::from(y[t * n + c]) - want).abs());
        }
    }
    err / max.max(1e-30)
}

fn mismatch(what: String, rel_err: f64, tolerance: f64) -> BenchError {
    BenchError::Mismatch {
        what,
        rel_err,
        tolerance,
    }
}

/// Every FP8 GEMM of the prefill, layer by layer, as the chat runs them.
fn all_layers(
    g: &GemmMx,
    mats: &[Mat],
    acts: &[GemmActs],
    y: &mut DeviceBuffer<f32>,
    layers: usize,
) -> Result<(), CudaError> {
    for l in 0..layers {
        for mm in mats {
            mm.run(g, &acts[mm.xin], l, y)?;
        }
    }
    Ok(())
}

/// Runs the prefill GEMM benchmark on `ctx`.
pub fn prefill_bench(
    ctx: &Arc<CudaContext>,
    opts: &PrefillBenchOptions,
) -> Result<PrefillBench, BenchError> {
    let (m, layers, format) = (opts.tokens, opts.layers, opts.format);
    if m == 0 || layers == 0 {
        return Err(BenchError::Options("tokens and layers must be ≥ 1".into()));
    }
    if format == ElementFormat::Fp8E5M2 {
        return Err(BenchError::Options("weights: MXFP8 (E4M3) or MXFP4".into()));
    }
    let owner = Owner::mint("cuda-prefill-bench");
    let g = GemmMx::load(ctx)?;
    let ops = PrefillOps::load(ctx)?;
    let mut rng = Rng::new(5);
    let mut mats = Vec::new();
    // (name, n, k, input, y +=, gate|up paired for SwiGLU as the chat runs it)
    for (name, n, k, xin, accumulate, paired) in [
        ("q|k|v", 6144, 4096, 0, false, false),
        ("o", 4096, 4096, 0, true, false),
        ("gate|up", 24576, 4096, 0, false, true),
        ("down", 4096, 12288, 1, true, false),
    ] {
        let scales = if format == ElementFormat::Fp8E4M3 {
            (117, 123)
        } else {
            (121, 127)
        };
        let (layout, packed) = random_mx(format, n, k, scales, &mut rng);
        let view = MxView::new(layout, &packed)?;
        // Both formats run the FP8 tensor-core GEMM (MXFP4 folded into grouped E4M3).
        let copies = |host: &crate::cuda::GemmWeightsHost| -> Result<Vec<GemmWeights>, BenchError> {
            let mut c = vec![GemmWeights::upload(ctx, &owner, host)?];
            for _ in 1..layers {
                c.push(c[0].duplicate(ctx, &owner)?);
            }
            Ok(c)
        };
        let fp8 = copies(&tile_gemm(view)?)?;
        let swiglu = if paired {
            copies(&tile_gemm_swiglu(view)?)?
        } else {
            Vec::new()
        };
        let tiled = tile_mx(view);
        let exact = (0..layers)
            .map(|_| MxTiled::upload(ctx, &owner, &tiled))
            .collect::<Result<Vec<_>, _>>()?;
        mats.push(Mat {
            name,
            n,
            k,
            xin,
            accumulate,
            fp8,
            swiglu,
            exact,
            wf: view.dequantize(),
        });
    }
    let fp8_weight_bytes = mats
        .iter()
        .flat_map(|mm| mm.fp8.iter().chain(&mm.swiglu))
        .map(GemmWeights::device_bytes)
        .sum();
    let exact_weight_bytes = mats
        .iter()
        .flat_map(|mm| mm.exact.iter().map(MxTiled::device_bytes))
        .sum();

    // Activations (k = 4096 and 12288): f32 rows, their E4M3 quantization, their x prep.
    let mut xs = Vec::new();
    let mut acts = Vec::new();
    let mut preps = Vec::new();
    let mut xhost = Vec::new();
    for k in [4096usize, 12288] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) + 0.01).collect();
        let xd = ctx.upload(&owner, SpanKind::Scratch, &x)?;
        // One C per 128 values when the weights are grouped (the grouped kernel).
        let grouped = mats
            .iter()
            .all(|mm| mm.fp8.iter().chain(&mm.swiglu).all(|w| w.grouped));
        let mut a = GemmActs::new(ctx, &owner, m, k)?.grouped(grouped);
        g.quantize(&xd, m, k, k, &mut a)?;
        let mut p = XPrep::new(ctx, &owner, m * k)?;
        ops.prep_rows(&xd, k, m, k, k, &mut p)?;
        xs.push(xd);
        acts.push(a);
        preps.push(p);
        xhost.push(x);
    }
    let nmax = mats.iter().map(|mm| mm.n).max().unwrap_or(0);
    let wmax = mats
        .iter()
        .map(|mm| mm.n * mx_gemm_k(&mm.exact[0]))
        .max()
        .unwrap_or(0);
    let mut exact = MxGemm::new(ctx, &owner, wmax, m * 12288, 2)?;
    let mut y = ctx.alloc::<f32>(&owner, SpanKind::Scratch, m * nmax)?;

    // Checks before timing (4 tokens, all columns).
    let toks = m.min(4);
    let mut errs = Vec::new();
    for mm in &mats {
        g.gemm(&acts[mm.xin], &mm.fp8[0], &mut y, false)?;
        let xq = acts[mm.xin].values(ctx)?;
        let plain = ctx.download(&y)?;
        let e8 = check(&xq, &mm.wf, &plain, mm.n, mm.k, toks);
        if e8.is_nan() || e8 > 1e-3 {
            return Err(mismatch(format!("GemmMx {}", mm.name), e8, 1e-3));
        }
        if let Some(w) = mm.swiglu.first() {
            // The SwiGLU epilogue against silu(gate)·up of the plain GEMM just checked
            // (they are equal bit for bit on the device; f64 silu here).
            g.gemm_swiglu(&acts[mm.xin], w, &mut y)?;
            let es = check_swiglu(&plain, &ctx.download(&y)?, mm.n / 2, toks);
            if es.is_nan() || es > 1e-5 {
                return Err(mismatch(format!("GemmMx {} SwiGLU", mm.name), es, 1e-5));
            }
        }
        exact.run(&mm.exact[0], &preps[mm.xin], m, mm.k, &mut y, false)?;
        let ex = check(&xhost[mm.xin], &mm.wf, &ctx.download(&y)?, mm.n, mm.k, toks);
        if ex.is_nan() || ex > 3e-5 {
            return Err(mismatch(format!("MxGemm {}", mm.name), ex, 3e-5));
        }
        errs.push((e8, ex));
    }

    // The FP8 path first (per GEMM, then all layer by layer), then the exact path: timed
    // one GEMM of each path in turn, the FP8 down projection read 770-800 TFLOP/s
    // against ~1000 in cuda_prefill_bench (which times the FP8 GEMMs alone), while the
    // layer-by-layer totals agreed.
    let (warm, reps) = (2, 7);
    // The GPU first runs the whole prefill's GEMMs for a second, so every row is timed at
    // the clock the power cap holds it to: timed first on a GPU fresh from the checks,
    // q|k|v read 1128-1138 TFLOP/s against 925-960 after this warm-up (H200, runs of the
    // two builds alternated; the all-GEMMs line, timed after the rows, was not flattered).
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(1) {
        all_layers(&g, &mats, &acts, &mut y, layers)?;
        ctx.synchronize()?;
    }
    let mut fp8_ms = Vec::new();
    for mm in &mats {
        let a = &acts[mm.xin];
        fp8_ms.push(time_ms(ctx, warm, reps, || {
            (0..layers).try_for_each(|l| mm.run(&g, a, l, &mut y))
        })?);
    }
    // The plain GEMM of the paired matrix (gate|up), a comparison row after the others.
    let plain = match mats.iter().zip(&errs).find(|(mm, _)| !mm.swiglu.is_empty()) {
        Some((mm, &(e8, _))) => {
            let a = &acts[mm.xin];
            let ms = time_ms(ctx, warm, reps, || {
                mm.fp8
                    .iter()
                    .try_for_each(|w| g.gemm(a, w, &mut y, mm.accumulate))
            })?;
            Some((mm, ms, e8))
        }
        None => None,
    };
    let (fp8_total_ms, fp8_quant_total_ms) = {
        let gemms = time_ms(ctx, warm, reps, || {
            all_layers(&g, &mats, &acts, &mut y, layers)
        })?;
        let with_quant = time_ms(ctx, warm, reps, || {
            for l in 0..layers {
                for mm in &mats {
                    g.quantize(&xs[mm.xin], m, mm.k, mm.k, &mut acts[mm.xin])?;
                    mm.run(&g, &acts[mm.xin], l, &mut y)?;
                }
            }
            Ok(())
        })?;
        (gemms, with_quant)
    };
    // The ceiling on the card as hot as the totals left it (~10 ms per launch).
    let tc_ceiling_tflops = {
        let stages = 32768;
        let mut sink = ctx.alloc::<f32>(&owner, SpanKind::Scratch, g.tensor_ceiling_threads())?;
        let ms = time_ms(ctx, 1, 5, || g.tensor_ceiling(stages, &mut sink))?;
        tflops(g.tensor_ceiling_flop(stages), ms)
    };
    let flop = |mm: &Mat| 2.0 * (m * mm.n * mm.k) as f64 * layers as f64;
    let mut rows = Vec::new();
    for ((mm, (fp8_err, exact_err)), fp8_ms) in mats.iter().zip(&errs).zip(fp8_ms) {
        let p = &preps[mm.xin];
        let exact_ms = time_ms(ctx, warm, reps, || {
            mm.exact
                .iter()
                .try_for_each(|w| exact.run(w, p, m, mm.k, &mut y, mm.accumulate))
        })?;
        rows.push(PrefillRow {
            name: mm.name,
            n: mm.n,
            k: mm.k,
            flop: flop(mm),
            fp8_ms,
            exact_ms,
            fp8_err: *fp8_err,
            exact_err: *exact_err,
            counted: true,
        });
    }
    if let Some((mm, fp8_ms, fp8_err)) = plain {
        // Its exact GEMM is the gate|up row's (the chat's exact path has no SwiGLU GEMM).
        rows.push(PrefillRow {
            name: "gate|up plain",
            n: mm.n,
            k: mm.k,
            flop: flop(mm),
            fp8_ms,
            exact_ms: f64::NAN,
            fp8_err,
            exact_err: f64::NAN,
            counted: false,
        });
    }
    let exact_total_ms = time_ms(ctx, warm, reps, || {
        for l in 0..layers {
            for mm in &mats {
                exact.run(&mm.exact[l], &preps[mm.xin], m, mm.k, &mut y, mm.accumulate)?;
            }
        }
        Ok(())
    })?;
    drop((mats, xs, acts, preps, y, exact));
    ctx.sweep(&owner)?;
    Ok(PrefillBench {
        device: describe(ctx),
        tokens: m,
        layers,
        format,
        rows,
        fp8_total_ms,
        fp8_quant_total_ms,
        exact_total_ms,
        tc_ceiling_tflops,
        fp8_weight_bytes,
        exact_weight_bytes,
    })
}
