//! `favlo bench`: throughput figures printed beside their ceilings and, when
//! asked, beside an anchor (another engine on the same model, same machine,
//! same run).
//!
//! Key design choice: anchors are small Python scripts kept in `tools/bench/`
//! and compiled into the binary (`include_str!`), run with the machine's
//! `python3` only when `--anchor` is given, so the figures being compared come
//! from one process tree on one machine at one time.

use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use favlo_hub::{DEFAULT_EMBEDDINGS, Home, Registry, is_pulled, progress, pull_spec};
use favlo_runtime::device::Device;

use crate::cmd::common::UsageError;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// CPU kernels at realistic shapes beside copy bandwidth and f32 GEMM ceilings
    /// (with --device cuda: the MX GEMV beside the GPU's copy bandwidth).
    Kernels(KernelBench),
    /// Batch-1 decode of a Qwen3-8B-shaped model with random MX weights on a CUDA
    /// GPU, tokens/s beside the HBM roofline (and PyTorch with --anchor).
    Decode(DecodeBench),
    /// The prefill GEMMs of a Qwen3-8B-shaped model with random MXFP4 (or MXFP8)
    /// weights on a CUDA GPU (the FP8 tensor-core GEMM and the chat path's exact GEMM),
    /// TFLOP/s beside the FP8 tensor-core rate (and PyTorch with --anchor).
    Prefill(PrefillBench),
    /// The CUDA backend's targets in one table: the MX GEMV against the copy bandwidth,
    /// batch-1 decode against its roofline and the 2048-token prefill GEMMs against the
    /// FP8 peak, each beside its goal and the ceilings measured in the same run (and
    /// PyTorch with --anchor).
    Targets(TargetsBench),
    /// Prefill and decode tokens/s of a chat model at 1 and 2 threads.
    Chat(super::bench_chat::ChatBench),
    /// Sentences/s of an embeddings model at batch 1, 8, 32, and one-sentence latency.
    Embeddings(EmbBench),
}

#[derive(Args, Debug)]
pub struct KernelBench {
    /// Shorter time budget and fewer shapes.
    #[arg(long)]
    pub quick: bool,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Sections to run: gemv, gemm, attn, gguf, norm (default: all; CPU only).
    pub sections: Vec<String>,
    /// cpu (default) or cuda / cuda:N: the MXFP8/MXFP4 GEMV table of that GPU
    /// (8192×8192 and 4096×14336, the default kernel) instead of the CPU sections.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(Args, Debug)]
pub struct DecodeBench {
    /// cuda or cuda:N (this benchmark needs a CUDA device).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Weight storage: mxfp4 (default) or mxfp8.
    #[arg(long, default_value = "mxfp4")]
    pub weights: String,
    /// Also run the PyTorch bf16 decode of the same shapes (needs python3 and torch
    /// with CUDA) and print its tokens/s beside.
    #[arg(long)]
    pub anchor: bool,
    /// Decoder layers.
    #[arg(long, default_value_t = 36)]
    pub layers: usize,
    /// Tokens already in the KV cache.
    #[arg(long, default_value_t = 1024)]
    pub context: usize,
    /// Timed decode steps.
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
}

#[derive(Args, Debug)]
pub struct PrefillBench {
    /// cuda or cuda:N (this benchmark needs a CUDA device).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Also run PyTorch's bf16 and FP8 GEMMs on the same shapes (needs python3 and
    /// torch with CUDA) and print them beside.
    #[arg(long)]
    pub anchor: bool,
    /// Prompt tokens (rows of every GEMM).
    #[arg(long, default_value_t = 2048)]
    pub tokens: usize,
    /// Decoder layers (distinct weight copies per matrix).
    #[arg(long, default_value_t = 36)]
    pub layers: usize,
    /// Weight storage: mxfp4 (default, the decode benchmark's model: folded exactly into
    /// E4M3 codes with one scale per 128 k, promoted once per stage) or mxfp8 (one
    /// promotion per 32 k). Both run the FP8 tensor-core GEMM and the exact GEMM.
    #[arg(long, default_value = "mxfp4")]
    pub weights: String,
}

#[derive(Args, Debug)]
pub struct TargetsBench {
    /// cuda or cuda:N (this benchmark needs a CUDA device).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Also run PyTorch's bf16 decode and FP8 GEMMs on the same shapes (needs python3
    /// and torch with CUDA) and print them beside.
    #[arg(long)]
    pub anchor: bool,
}

#[derive(Args, Debug)]
pub struct EmbBench {
    /// Registry id of an embeddings model.
    #[arg(long, default_value = DEFAULT_EMBEDDINGS)]
    pub model: String,
    /// Threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Use int8 weights (the same as `--weights int8`).
    #[arg(long, conflicts_with = "weights")]
    pub int8: bool,
    /// Linear weights: as-stored (the serving default: AMX bf16 where the CPU has AMX,
    /// else exact f32), f32 (exact), bf16, bf16x3 (AMX tiles) or int8.
    #[arg(long, default_value = "as-stored")]
    pub weights: String,
    /// Also run sentence-transformers (PyTorch CPU) on the same corpus.
    #[arg(long)]
    pub anchor: bool,
    /// Where the encoder runs: cpu (default), cuda / cuda:N (exact f32 on the GPU) or
    /// auto.
    #[arg(long, env = "FAVLO_DEVICE", default_value = "cpu")]
    pub device: String,
}

pub(crate) fn model_dir(id: &str) -> anyhow::Result<std::path::PathBuf> {
    let home = Home::from_env()?;
    let registry = Registry::load(&home)?;
    let row = registry
        .get(id)
        .with_context(|| format!("unknown model {id:?}"))?;
    if !is_pulled(&home, row) {
        pull_spec(&home, &registry, id, None, progress::for_stderr().as_ref())?;
    }
    Ok(home.model_dir(row.store_name())?)
}

/// Runs an anchor script with `python3`, returning its stdout.
pub fn run_anchor(script: &str, args: &[String]) -> anyhow::Result<String> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("running python3 for the anchor (is Python 3 installed?)")?;
    let out = child
        .stdout
        .take()
        .map(std::io::read_to_string)
        .transpose()?
        .unwrap_or_default();
    let status = child.wait()?;
    if !status.success() {
        bail!("the anchor script failed ({status})");
    }
    Ok(out)
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    // The figures go to stdout; logs (stderr) only when asked for with `RUST_LOG`.
    if std::env::var_os("RUST_LOG").is_some() {
        crate::cmd::common::init_logging();
    }
    match args.what {
        BenchWhat::Kernels(b) => kernels(b),
        BenchWhat::Decode(b) => decode(b),
        BenchWhat::Prefill(b) => prefill(b),
        BenchWhat::Targets(b) => targets(b),
        BenchWhat::Chat(b) => super::bench_chat::chat(b),
        BenchWhat::Embeddings(b) => embeddings(b),
    }
}

fn kernels(b: KernelBench) -> anyhow::Result<ExitCode> {
    if let Device::Cuda(n) = crate::cmd::common::device(&b.device)? {
        return crate::cmd::bench_cuda::kernels(n);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(b.threads.unwrap_or(0))
        .build()?;
    let sections: Vec<&str> = b.sections.iter().map(String::as_str).collect();
    pool.install(|| favlo_runtime::bench::kernels(b.quick, &sections))?;
    Ok(ExitCode::SUCCESS)
}

fn decode(b: DecodeBench) -> anyhow::Result<ExitCode> {
    let Device::Cuda(n) = crate::cmd::common::device(&b.device)? else {
        return Err(UsageError(
            "favlo bench decode needs a CUDA device: use --device cuda or cuda:N".into(),
        )
        .into());
    };
    let request = crate::cmd::bench_cuda::DecodeRequest {
        weights: b.weights,
        anchor: b.anchor,
        layers: b.layers,
        context: b.context,
        steps: b.steps,
    };
    crate::cmd::bench_cuda::decode(n, &request)
}

fn prefill(b: PrefillBench) -> anyhow::Result<ExitCode> {
    let Device::Cuda(n) = crate::cmd::common::device(&b.device)? else {
        return Err(UsageError(
            "favlo bench prefill needs a CUDA device: use --device cuda or cuda:N".into(),
        )
        .into());
    };
    if b.tokens == 0 || b.layers == 0 {
        return Err(UsageError("--tokens and --layers must be at least 1".into()).into());
    }
    let request = crate::cmd::bench_cuda::PrefillRequest {
        weights: b.weights,
        anchor: b.anchor,
        tokens: b.tokens,
        layers: b.layers,
    };
    crate::cmd::bench_cuda::prefill(n, &request)
}

fn targets(b: TargetsBench) -> anyhow::Result<ExitCode> {
    let Device::Cuda(n) = crate::cmd::common::device(&b.device)? else {
        return Err(UsageError(
            "favlo bench targets needs a CUDA device: use --device cuda or cuda:N".into(),
        )
        .into());
    };
    crate::cmd::bench_targets::targets(n, b.anchor)
}

pub(crate) fn find_gguf(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "gguf") {
            return Ok(p);
        }
    }
    bail!("no .gguf file in {}", dir.display())
}

fn embeddings(b: EmbBench) -> anyhow::Result<ExitCode> {
    use favlo_bert::{Precision, WeightFormat};
    let format = match (b.int8, b.weights.as_str()) {
        (true, _) | (_, "int8") => WeightFormat::Int8,
        (_, "as-stored") => WeightFormat::AsStored,
        (_, "f32") => WeightFormat::F32,
        (_, "bf16") => WeightFormat::Amx(Precision::Bf16),
        (_, "bf16x3") => WeightFormat::Amx(Precision::Bf16x3),
        (_, other) => {
            bail!("unknown --weights {other:?} (as-stored, f32, bf16, bf16x3 or int8)")
        }
    };
    let device = crate::cmd::common::device(&b.device)?;
    let dir = model_dir(&b.model)?;
    let opts = favlo_bert::BenchOptions {
        threads: b.threads,
        format,
        device,
        ..Default::default()
    };
    let r = favlo_bert::bench_embeddings(&dir, &opts)?;
    println!(
        "model {} ({}), {} threads, weights {}, device {device}",
        b.model,
        dir.display(),
        b.threads,
        r.weights
    );
    println!("{:<22} {:>6} {:>14}", "engine", "batch", "sentences/s");
    for row in &r.rows {
        println!(
            "{:<22} {:>6} {:>14.1}",
            "favlo", row.batch, row.sentences_per_s
        );
    }
    println!(
        "favlo p50 latency of one short sentence: {:.2} ms (p90 {:.2} ms)",
        r.p50_ms, r.p90_ms
    );
    if b.anchor {
        let corpus = favlo_bert::corpus().join("\n");
        let path =
            std::env::temp_dir().join(format!("favlo-bench-corpus-{}.txt", std::process::id()));
        std::fs::write(&path, corpus)?;
        let args = [
            dir.display().to_string(),
            path.display().to_string(),
            b.threads.to_string(),
        ];
        let out = run_anchor(
            include_str!("../../../../tools/bench/embeddings_st_anchor.py"),
            &args,
        );
        let _ = std::fs::remove_file(&path);
        print!("{}", out?);
    }
    Ok(ExitCode::SUCCESS)
}
