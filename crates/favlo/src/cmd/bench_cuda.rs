//! `favlo bench kernels|decode|prefill --device cuda[:N]`: the CUDA benchmark tables of
//! `favlo_runtime::cuda::bench`, printed here, and the PyTorch anchors of the decode
//! and the prefill.
//!
//! Key design choice: the anchor's prerequisites (python3, torch with CUDA) are checked
//! before the GPU run starts, so a missing one is a quick, named error; the anchor
//! runs after favlo's buffers are freed, in the same call, and prints one JSON object
//! that is set beside favlo's figures.

use std::process::ExitCode;

#[cfg(feature = "cuda")]
pub(crate) use with_cuda::{check_anchor, decode_anchor, open, prefill_anchor};
#[cfg(feature = "cuda")]
pub use with_cuda::{decode, kernels, prefill};

/// What `favlo bench prefill` was asked for (besides the device).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct PrefillRequest {
    /// `mxfp8` or `mxfp4`.
    pub weights: String,
    pub anchor: bool,
    pub tokens: usize,
    pub layers: usize,
}

/// What `favlo bench decode` was asked for (besides the device).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct DecodeRequest {
    /// `mxfp4` or `mxfp8`.
    pub weights: String,
    pub anchor: bool,
    pub layers: usize,
    pub context: usize,
    pub steps: usize,
}

/// The usage error of a CUDA benchmark in a favlo built without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub(crate) fn without_cuda() -> anyhow::Error {
    crate::cmd::common::UsageError("this favlo was built without the cuda feature".into()).into()
}

#[cfg(not(feature = "cuda"))]
pub fn kernels(_ordinal: u32) -> anyhow::Result<ExitCode> {
    Err(without_cuda())
}

#[cfg(not(feature = "cuda"))]
pub fn decode(_ordinal: u32, _r: &DecodeRequest) -> anyhow::Result<ExitCode> {
    Err(without_cuda())
}

#[cfg(not(feature = "cuda"))]
pub fn prefill(_ordinal: u32, _r: &PrefillRequest) -> anyhow::Result<ExitCode> {
    Err(without_cuda())
}

#[cfg(feature = "cuda")]
mod with_cuda {
    use super::{DecodeRequest, ExitCode, PrefillRequest};
    use anyhow::{Context, bail};
    use favlo_runtime::cuda::CudaContext;
    use favlo_runtime::cuda::bench::{
        DecodeBenchOptions, FP8_PEAK_TFLOPS, GemvBenchOptions, PrefillBenchOptions, decode_bench,
        format_name, gemv_bench, mx_format, prefill_bench, tflops,
    };

    pub(crate) fn open(ordinal: u32) -> anyhow::Result<std::sync::Arc<CudaContext>> {
        CudaContext::open(ordinal as usize, None).map_err(|e| {
            crate::cmd::common::UsageError(format!("--device cuda:{ordinal}: {e}")).into()
        })
    }

    /// The MX GEMV table (default kernel) beside the copy ceiling.
    pub fn kernels(ordinal: u32) -> anyhow::Result<ExitCode> {
        let ctx = open(ordinal)?;
        let opts = GemvBenchOptions::default();
        let r = gemv_bench(&ctx, &opts, |_| {})?;
        println!(
            "device {}; copy ceiling {:.0} GB/s (1 GiB device-to-device, bytes read + written)",
            r.device, r.copy_gbps
        );
        println!(
            "bytes per GEMV = packed data + scales + x (f32); weights streamed from DRAM (copies ≥ 512 MB); median of 15"
        );
        println!(
            "{:<6} {:>11} {:<16} {:>9} {:>9} {:>7} {:>10} {:>14}   chained with PDL†: µs, % of copy",
            "format", "N×K", "kernel‡", "MB", "µs", "GB/s", "% of copy", "max rel err*",
        );
        for row in &r.rows {
            let kernel = match row.kernel {
                Some(k) => format!("{} = {k:?}", row.name),
                None => row.name.clone(),
            };
            let chained = match (row.us_pdl, row.chained_of_copy(r.copy_gbps)) {
                (Some(us), Some(pct)) => {
                    let k = row
                        .kernel_pdl
                        .map(|k| format!(" ({k:?})"))
                        .unwrap_or_default();
                    format!("{us:.1}, {pct:.0}%{k}")
                }
                _ => "-".into(),
            };
            let err = if row.rel_err.is_nan() {
                "-".into()
            } else {
                format!("{:.1e}", row.rel_err)
            };
            println!(
                "{:<6} {:>11} {:<16} {:>9.1} {:>9.1} {:>7.0} {:>9.0}% {:>14}   {chained}",
                format_name(row.format),
                format!("{}×{}", row.rows, row.cols),
                kernel,
                row.bytes / 1e6,
                row.us,
                row.gbps,
                row.of_copy,
                err
            );
        }
        for s in &r.skipped {
            println!("skipped: {s}");
        }
        println!("* max |y − ref| / max |ref| over the first 64 rows, ref = CPU f64");
        println!(
            "† the same back-to-back GEMVs over distinct weights launched with programmatic dependent launch, as the decode step chains them: each GEMV requests its first weights before it waits for the one before (output checked again)"
        );
        println!(
            "‡ read ceiling: the same bytes streamed by a plain grid-stride read that computes nothing, the most any single launch reading them reaches; chained, consecutive reads depend on nothing and overlap, so they can pass the copy"
        );
        Ok(ExitCode::SUCCESS)
    }

    /// The last JSON line an anchor script printed.
    pub(crate) struct Anchor(pub(crate) serde_json::Value);

    impl Anchor {
        /// The figures `keys`, or an error naming the JSON when one is missing.
        pub(crate) fn nums<const N: usize>(&self, keys: [&str; N]) -> anyhow::Result<[f64; N]> {
            let mut out = [0.0; N];
            for (o, k) in out.iter_mut().zip(keys) {
                *o = self
                    .0
                    .get(k)
                    .and_then(serde_json::Value::as_f64)
                    .with_context(|| format!("the PyTorch anchor's JSON lacks {k}: {}", self.0))?;
            }
            Ok(out)
        }

        /// The torch version it reported.
        pub(crate) fn torch(&self) -> &str {
            self.0.get("torch").and_then(|v| v.as_str()).unwrap_or("?")
        }
    }

    /// Runs an anchor script with `args` and reads its last JSON line.
    fn anchor_json(script: &str, args: &[String]) -> anyhow::Result<Anchor> {
        let out = crate::cmd::bench::run_anchor(script, args)?;
        let json = out
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .context("the PyTorch anchor printed no JSON line")?;
        Ok(Anchor(
            serde_json::from_str(json).context("reading the PyTorch anchor's JSON")?,
        ))
    }

    /// PyTorch's bf16 decode of `opts`'s shapes on GPU `ordinal`.
    pub(crate) fn decode_anchor(opts: &DecodeBenchOptions, ordinal: u32) -> anyhow::Result<Anchor> {
        let args = [
            "--layers".to_string(),
            opts.layers.to_string(),
            "--ctx".into(),
            opts.context.to_string(),
            "--steps".into(),
            opts.steps.to_string(),
            "--device".into(),
            ordinal.to_string(),
            "--json".into(),
        ];
        anchor_json(
            include_str!("../../../../tools/bench/cuda_decode_anchor.py"),
            &args,
        )
    }

    /// PyTorch's bf16 and FP8 GEMMs of the prefill's shapes on GPU `ordinal`.
    pub(crate) fn prefill_anchor(
        tokens: usize,
        layers: usize,
        ordinal: u32,
    ) -> anyhow::Result<Anchor> {
        let args = [
            "--tokens".to_string(),
            tokens.to_string(),
            "--layers".into(),
            layers.to_string(),
            "--device".into(),
            ordinal.to_string(),
            "--json".into(),
        ];
        anchor_json(
            include_str!("../../../../tools/bench/cuda_prefill_anchor.py"),
            &args,
        )
    }

    /// Checks that python3 and torch with CUDA are there for the anchor.
    pub(crate) fn check_anchor() -> anyhow::Result<()> {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)",
            ])
            .output()
            .context(
                "--anchor runs python3, which could not be started (is Python 3 installed?)",
            )?;
        match out.status.code() {
            Some(0) => Ok(()),
            Some(3) => bail!("--anchor: torch is installed but sees no CUDA device"),
            _ => bail!(
                "--anchor needs PyTorch with CUDA (`pip install torch`): {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("python3 failed")
            ),
        }
    }

    /// The decode benchmark, and with `anchor` the PyTorch bf16 decode beside it.
    pub fn decode(ordinal: u32, r: &DecodeRequest) -> anyhow::Result<ExitCode> {
        let Some(format) = mx_format(&r.weights) else {
            return Err(crate::cmd::common::UsageError(format!(
                "unknown --weights {:?}: use mxfp4 (default) or mxfp8",
                r.weights
            ))
            .into());
        };
        if r.anchor {
            check_anchor()?;
        }
        let ctx = open(ordinal)?;
        let opts = DecodeBenchOptions {
            layers: r.layers,
            context: r.context,
            steps: r.steps,
            format,
            ..Default::default()
        };
        let d = decode_bench(&ctx, &opts)?;
        drop(ctx);
        println!(
            "device {}; Qwen3-8B shape ({} layers, hidden 4096, 32/8 heads × 128, intermediate 12288, vocab 151936), random {} weights, f16 KV, {} tokens of context",
            d.device,
            opts.layers,
            format_name(opts.format),
            opts.context
        );
        println!(
            "GEMV kernels: {}; PDL {}; setup {:.1} s, {:.2} GB on the device; logits finite: {}",
            d.kernels,
            if d.pdl { "on" } else { "off" },
            d.setup_s,
            d.live_bytes as f64 / 1e9,
            d.logits_finite
        );
        if let Some((diff, max)) = d.fused_check {
            println!(
                "fused RMSNorm/SwiGLU preparations (7 launches per layer): one step's logits vs separate kernels (10): max |diff| {diff:.2e} (max |logit| {max:.2e})"
            );
        }
        if let Some((diff, max)) = d.pdl_check {
            println!(
                "PDL check: one step's logits vs PDL off: max |diff| {diff:.2e} (max |logit| {max:.2e})"
            );
        }
        println!(
            "roofline: {:.2} GB/token (weights {:.2} GB + KV read {:.3} GB) at the measured copy bandwidth {:.0} GB/s = {:.3} ms/token, {:.0} tokens/s",
            d.bytes_per_token() / 1e9,
            d.weight_bytes / 1e9,
            d.kv_bytes / 1e9,
            d.copy_gbps,
            d.roofline_ms,
            d.roofline_tok_s()
        );
        println!(
            "{:<38} {:>9} {:>9} {:>14}",
            "decode (batch 1)", "ms/token", "tokens/s", "% of roofline"
        );
        let line = |name: &str, ms: f64, roof: f64| {
            println!(
                "{name:<38} {ms:>9.3} {:>9.0} {:>13.0}%",
                1e3 / ms,
                100.0 * roof / ms
            )
        };
        line("favlo, CUDA graph", d.graph_ms, d.roofline_ms);
        line("favlo, plain launches", d.plain_ms, d.roofline_ms);
        if r.anchor {
            let a = decode_anchor(&opts, ordinal)?;
            let [roof, graph, eager, bytes] =
                a.nums(["roofline_ms", "graph_ms", "eager_ms", "bytes_per_token"])?;
            let torch = a.torch();
            line(&format!("PyTorch {torch} bf16, CUDA graph"), graph, roof);
            line(&format!("PyTorch {torch} bf16, eager"), eager, roof);
            println!(
                "(PyTorch's % is of its own bf16 roofline: {:.2} GB/token at its copy bandwidth {:.0} GB/s; logits finite: {})",
                bytes / 1e9,
                a.0.get("copy_gbps")
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(f64::NAN),
                a.0.get("finite")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false)
            );
        }
        Ok(ExitCode::SUCCESS)
    }

    /// The prefill GEMMs on both paths, and with `anchor` PyTorch's on the same shapes.
    pub fn prefill(ordinal: u32, r: &PrefillRequest) -> anyhow::Result<ExitCode> {
        let Some(format) = mx_format(&r.weights) else {
            return Err(crate::cmd::common::UsageError(format!(
                "unknown --weights {:?}: use mxfp8 (default) or mxfp4",
                r.weights
            ))
            .into());
        };
        if r.anchor {
            check_anchor()?;
        }
        let ctx = open(ordinal)?;
        let opts = PrefillBenchOptions {
            tokens: r.tokens,
            layers: r.layers,
            format,
        };
        let p = prefill_bench(&ctx, &opts)?;
        drop(ctx);
        println!(
            "device {}; Qwen3-8B-shaped prefill GEMMs, {} tokens × {} layers of distinct random {} weights ({:.2} GB as wgmma tiles, {:.2} GB as GEMV tiles)",
            p.device,
            p.tokens,
            p.layers,
            format_name(p.format),
            p.fp8_weight_bytes as f64 / 1e9,
            p.exact_weight_bytes as f64 / 1e9
        );
        println!(
            "TFLOP/s of 2·m·n·k against the dense FP8 tensor-core rate {FP8_PEAK_TFLOPS:.0} TFLOP/s (datasheet); CUDA events, median of 7"
        );
        println!(
            "{:<15} {:>11} {:>10} {:>8} {:>7} {:>10} {:>12} {:>8} {:>7} {:>10}",
            "GEMM",
            "n×k",
            "FP8 ms",
            "TFLOP/s",
            "% FP8",
            "rel err*",
            "exact ms",
            "TFLOP/s",
            "% FP8",
            "rel err†"
        );
        for row in &p.rows {
            let b = tflops(row.flop, row.exact_ms);
            let a = tflops(row.flop, row.fp8_ms);
            let fp8 = format!(
                "{:>10.3} {a:>8.0} {:>6.1}% {:>10.1e}",
                row.fp8_ms,
                100.0 * a / FP8_PEAK_TFLOPS,
                row.fp8_err
            );
            let exact = if row.exact_ms.is_finite() {
                format!(
                    "{:>12.3} {b:>8.0} {:>6.1}% {:>10.1e}",
                    row.exact_ms,
                    100.0 * b / FP8_PEAK_TFLOPS,
                    row.exact_err
                )
            } else {
                format!("{:>12}", "= gate|up")
            };
            let name = if row.counted {
                row.name.to_string()
            } else {
                format!("({})", row.name)
            };
            println!(
                "{name:<15} {:>11} {fp8} {exact}",
                format!("{}×{}", row.n, row.k),
            );
        }
        let flop = p.flop();
        let line = |name: &str, ms: f64| {
            let t = tflops(flop, ms);
            println!(
                "{name:<56} {ms:>9.3} ms {t:>6.0} TFLOP/s {:>5.1}% of FP8 peak",
                100.0 * t / FP8_PEAK_TFLOPS
            );
        };
        println!("all GEMMs of the prefill, layer by layer:");
        let name = if format_name(p.format) == "MXFP4" {
            "favlo FP8 wgmma GEMM (GemmMx; MXFP4 folded, grouped)"
        } else {
            "favlo MXFP8 wgmma GEMM (GemmMx)"
        };
        line(name, p.fp8_total_ms);
        line(
            "  + E4M3 activation quantization before each",
            p.fp8_quant_total_ms,
        );
        let t = tflops(flop, p.fp8_total_ms);
        println!(
            "tensor-core ceiling measured after it (its wgmma m64n128k32 chained on operands in shared memory, no loads, no promotion): {:.0} TFLOP/s = {:.1}% of FP8 peak; the GEMMs reach {:.1}% of it",
            p.tc_ceiling_tflops,
            100.0 * p.tc_ceiling_tflops / FP8_PEAK_TFLOPS,
            100.0 * t / p.tc_ceiling_tflops
        );
        line(
            "favlo exact-operand GEMM (MxGemm, the chat path)",
            p.exact_total_ms,
        );
        println!(
            "* GemmMx vs the f64 product of its E4M3-quantized activations (bound 1e-3); † MxGemm vs the f64 product of the f32 activations (bound 3e-5); 4 tokens, all columns"
        );
        println!(
            "gate|up is the GEMM the chat's FP8 prefill runs: gate and up rows paired, silu(gate)·up stored ([m, ff] f32; its SwiGLU checked against the plain GEMM's, bound 1e-5); (gate|up plain) stores [m, 2·ff] f32 and is not in the totals"
        );
        if r.anchor {
            let a = prefill_anchor(p.tokens, p.layers, ordinal)?;
            let [bf16, fp8, row, ceil] =
                a.nums(["bf16_ms", "fp8_ms", "fp8_rowwise_ms", "fp8_ceiling_tflops"])?;
            let torch = a.torch();
            line(&format!("PyTorch {torch} bf16 matmul"), bf16);
            line("PyTorch FP8 _scaled_mm, per-tensor scales", fp8);
            line("PyTorch FP8 _scaled_mm, row-wise scales", row);
            println!(
                "(PyTorch FP8 _scaled_mm at 8192³: {ceil:.0} TFLOP/s; no per-32 block scales in either PyTorch FP8 GEMM)"
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
