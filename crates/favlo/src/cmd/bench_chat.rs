//! `favlo bench chat`: prefill and decode tokens/s of a chat model, beside llama.cpp.
//!
//! Key design choice: with `--anchor` the two engines alternate, one thread count
//! at a time (favlo, llama.cpp, favlo, llama.cpp, …) for `--repeat` rounds, and the
//! summary compares each engine's best round: on a shared or throttling host the
//! speed drifts by tens of percent between minutes, and alternating plus best-of-N
//! gives both engines the same chances. On CUDA with a Hugging Face safetensors
//! checkpoint the anchor is PyTorch `transformers` (bf16) on the same directory;
//! elsewhere it is llama.cpp on the model's GGUF.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use favlo_hub::DEFAULT_CHAT;
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

use super::bench::{find_gguf, model_dir, run_anchor};

#[derive(Args, Debug)]
pub struct ChatBench {
    /// Registry id of a chat model.
    #[arg(long, default_value = DEFAULT_CHAT)]
    pub model: String,
    /// A checkpoint directory (or .gguf file) to measure instead of a registry model:
    /// a Hugging Face directory (config.json + safetensors) or a GGUF.
    #[arg(long, conflicts_with = "model")]
    pub dir: Option<std::path::PathBuf>,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 2])]
    pub threads: Vec<usize>,
    /// Prompt tokens for the prefill figure.
    #[arg(long, default_value_t = 128)]
    pub prompt: usize,
    /// Tokens for the decode figure.
    #[arg(long, default_value_t = 64)]
    pub decode: usize,
    /// Storage of the matrices: native (default: GGUF blocks as stored), f16,
    /// mxfp8, mxfp4 or f32.
    #[arg(long, default_value = "native")]
    pub weights: String,
    /// Also run llama.cpp (the `llama-cpp-python` package) on the same GGUF,
    /// alternating with favlo; on CUDA with a safetensors checkpoint, PyTorch
    /// `transformers` in bf16 instead.
    #[arg(long)]
    pub anchor: bool,
    /// Rounds of measurements (default: 3 with --anchor, else 1); the summary
    /// takes each engine's best round.
    #[arg(long)]
    pub repeat: Option<usize>,
    /// cpu (default) or cuda / cuda:N (then native weights mean MXFP8; the thread
    /// counts only size the host pool).
    #[arg(long, env = "FAVLO_DEVICE", default_value = "cpu")]
    pub device: String,
    /// CUDA prefill: exact (default) or fp8 (Hopper FP8 tensor cores, activations
    /// rounded to E4M3), as `favlo serve --prefill`.
    #[arg(long, env = "FAVLO_PREFILL", default_value = "exact")]
    pub prefill: String,
    /// Prompt tokens per CUDA chat prefill chunk, as `favlo serve --prefill-chunk`.
    #[arg(long, env = "FAVLO_PREFILL_CHUNK", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub prefill_chunk: Option<u32>,
    /// Decode by sampling at this temperature (top-p 1, no top-k, a fixed seed), as a
    /// chat request with OpenAI's defaults does, instead of greedily (0). The anchors
    /// decode greedily, so the two do not go together.
    #[arg(long, default_value_t = 0.0, conflicts_with = "anchor")]
    pub temperature: f32,
    /// CUDA: also decode 2, 3, … up to this many sequences together (2..=4), each
    /// after the same prompt, and print the tokens/s over all of them for each count;
    /// and one sequence through the batched decode's entry, as `favlo serve --parallel
    /// N` decodes a lone chat (it runs that sequence's batch-1 step).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub sequences: u32,
    /// Tokens of KV cache to open the model with (default: prompt + decode + 1, at
    /// least 1024). `favlo serve` opens a model with its whole context; a larger value
    /// measures decode as it runs there (on CUDA, the step graph of the smallest
    /// attention bucket that holds the keys instead of one sized to the cache).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub context: Option<u32>,
}

/// One measured row: (prefill tok/s, decode tok/s).
type Rate = (f64, f64);

fn row(engine: &str, threads: usize, r: Rate, gbs: Option<f64>) {
    let gbs = gbs.map_or(String::new(), |g| format!("{g:.2}"));
    println!(
        "{engine:<10} {threads:>8} {:>14.1} {:>14.1} {gbs:>12}",
        r.0, r.1
    );
}

/// The (prefill, decode) figures of the anchor script's row, if it printed one.
fn parse_anchor(out: &str, engine: &str) -> Option<Rate> {
    let line = out.lines().find(|l| l.starts_with(engine))?;
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums.len() >= 3).then(|| (nums[1], nums[2]))
}

fn best(rates: &[Rate]) -> Rate {
    rates
        .iter()
        .fold((0.0f64, 0.0f64), |b, r| (b.0.max(r.0), b.1.max(r.1)))
}

/// Which engine `--anchor` runs beside favlo.
enum Anchor {
    /// llama.cpp on this GGUF.
    LlamaCpp(std::path::PathBuf),
    /// PyTorch `transformers` on this safetensors checkpoint directory (CUDA only).
    Torch(std::path::PathBuf),
}

impl Anchor {
    fn engine(&self) -> &'static str {
        match self {
            Anchor::LlamaCpp(_) => "llama.cpp",
            Anchor::Torch(_) => "torch-bf16",
        }
    }

    /// The anchor's (prefill, decode) at `threads`, or its own explanation printed.
    fn run(&self, threads: usize, prompt: usize, decode: usize) -> anyhow::Result<Option<Rate>> {
        let (script, mut args) = match self {
            Anchor::LlamaCpp(g) => (
                include_str!("../../../../tools/bench/chat_anchor.py"),
                vec![g.display().to_string(), threads.to_string()],
            ),
            Anchor::Torch(d) => (
                include_str!("../../../../tools/bench/chat_torch_anchor.py"),
                vec![d.display().to_string()],
            ),
        };
        args.extend([prompt.to_string(), decode.to_string()]);
        let out = run_anchor(script, &args)?;
        let rate = parse_anchor(&out, self.engine());
        if rate.is_none() {
            print!("{out}");
        }
        Ok(rate)
    }
}

/// The anchor for `dir` on `device`.
fn anchor_for(dir: &std::path::Path, device: Device) -> anyhow::Result<Anchor> {
    let hf = dir.is_dir() && dir.join("config.json").is_file();
    if device != Device::Cpu && hf {
        return Ok(Anchor::Torch(dir.to_path_buf()));
    }
    if dir.is_file() {
        return Ok(Anchor::LlamaCpp(dir.to_path_buf()));
    }
    Ok(Anchor::LlamaCpp(find_gguf(dir)?))
}

pub fn chat(b: ChatBench) -> anyhow::Result<ExitCode> {
    // Usage errors first, before any model is looked up.
    let device = crate::cmd::common::device(&b.device)?;
    let prefill = crate::cmd::common::prefill_mode(&b.prefill, device)?;
    if b.sequences > 1 && device == Device::Cpu {
        return Err(crate::cmd::common::UsageError(format!(
            "--sequences {} decodes sequences together on a CUDA GPU: add --device cuda, or leave --sequences 1",
            b.sequences
        ))
        .into());
    }
    // Room for the prompt and the decoded tokens (at least the 1024 the figures have
    // always been taken at).
    let need = b.prompt + b.decode + 1;
    let context = match b.context {
        Some(c) if (c as usize) < need => {
            return Err(crate::cmd::common::UsageError(format!(
                "--context {c} is smaller than the prompt and decoded tokens ({need})"
            ))
            .into());
        }
        Some(c) => c as usize,
        None => need.max(1024),
    };
    let (dir, name) = match &b.dir {
        Some(d) => {
            anyhow::ensure!(
                d.exists(),
                "--dir {}: no such file or directory",
                d.display()
            );
            (d.clone(), d.display().to_string())
        }
        None => (model_dir(&b.model)?, b.model.clone()),
    };
    let format = favlo_llama::WeightFormat::parse(&b.weights)
        .with_context(|| format!("unknown --weights {:?}", b.weights))?;
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("bench-chat");
    let opts = favlo_llama::OpenOptions {
        format,
        max_context: Some(context),
        device,
        prefill,
        prefill_chunk: b.prefill_chunk.map(|n| n as usize),
        sequences: b.sequences as usize,
        ..Default::default()
    };
    let mut rt = favlo_llama::open(&dir, &ledger, &owner, &opts)?;
    let cuda = device != Device::Cpu;
    let threads = if cuda {
        vec![b.threads.first().copied().unwrap_or(1)]
    } else {
        b.threads.clone()
    };
    let rounds = b.repeat.unwrap_or(if b.anchor { 3 } else { 1 }).max(1);
    let anchor = if b.anchor {
        Some(anchor_for(&dir, device)?)
    } else {
        None
    };
    let anchor_name = anchor.as_ref().map_or("", Anchor::engine);
    println!(
        "model {} ({}), weights {}, device {}{}, {} round(s){}",
        name,
        dir.display(),
        match (cuda, format) {
            (true, favlo_llama::WeightFormat::Mxfp4) => "mxfp4",
            (true, _) => "mxfp8",
            _ => b.weights.as_str(),
        },
        rt.model().device_name(),
        match prefill {
            favlo_llama::PrefillMode::Fp8 => ", prefill fp8",
            favlo_llama::PrefillMode::Exact if cuda => ", prefill exact",
            favlo_llama::PrefillMode::Exact => "",
        },
        rounds,
        if b.anchor {
            format!(", alternating with {anchor_name}")
        } else {
            String::new()
        }
    );
    println!(
        "{:<10} {:>8} {:>14} {:>14} {:>12}",
        "engine", "threads", "prefill tok/s", "decode tok/s", "decode GB/s"
    );
    let engine = if cuda { "favlo-cuda" } else { "favlo" };
    let mut ours: Vec<Vec<Rate>> = vec![Vec::new(); threads.len()];
    let mut theirs: Vec<Vec<Rate>> = vec![Vec::new(); threads.len()];
    for _ in 0..rounds {
        for (i, &t) in threads.iter().enumerate() {
            let r = favlo_llama::bench(
                &mut rt,
                &favlo_llama::BenchOptions {
                    prompt_tokens: b.prompt,
                    decode_tokens: b.decode,
                    threads: t,
                    temperature: b.temperature,
                    sequences: b.sequences as usize,
                },
            )?;
            let rate = (r.prefill_tok_s, r.decode_tok_s);
            row(engine, t, rate, Some(r.decode_gb_s));
            for &(n, steps, all) in &r.batch_decode {
                if n == 1 {
                    println!(
                        "{engine:<10} 1 sequence alone among {} (a lone chat under `serve --parallel {}`): {all:.1} tok/s ({steps} steps; the batch-1 chat: {:.1})",
                        b.sequences, b.sequences, r.decode_tok_s
                    );
                    continue;
                }
                println!(
                    "{engine:<10} {n} sequences decoded together: {all:.1} tok/s in all, {:.1} per sequence ({steps} steps; one sequence: {:.1})",
                    all / n as f64,
                    r.decode_tok_s
                );
            }
            ours[i].push(rate);
            if let Some(a) = &anchor
                && let Some(rate) = a.run(t, b.prompt, b.decode)?
            {
                row(a.engine(), t, rate, None);
                theirs[i].push(rate);
            }
        }
    }
    if rounds > 1 || theirs.iter().any(|v| !v.is_empty()) {
        println!("\nbest of {rounds} round(s):");
        for (i, &t) in threads.iter().enumerate() {
            let o = best(&ours[i]);
            row(engine, t, o, None);
            if !theirs[i].is_empty() {
                let a = best(&theirs[i]);
                row(anchor_name, t, a, None);
                println!(
                    "{:<10} {t:>8} {:>13.2}× {:>13.2}×",
                    "ratio",
                    o.0 / a.0.max(1e-9),
                    o.1 / a.1.max(1e-9)
                );
            }
        }
    }
    drop(rt);
    ledger.sweep(&owner)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{best, parse_anchor};

    #[test]
    fn anchor_rows_parse_and_best_takes_each_maximum() {
        let out = "llama.cpp         2          141.3           58.8             \n";
        assert_eq!(parse_anchor(out, "llama.cpp"), Some((141.3, 58.8)));
        assert_eq!(
            parse_anchor(
                "llama.cpp   (not installed: pip install llama-cpp-python)\n",
                "llama.cpp"
            ),
            None
        );
        let out = "loading...\ntorch-bf16        1         9123.4           31.5             \n";
        assert_eq!(parse_anchor(out, "torch-bf16"), Some((9123.4, 31.5)));
        assert_eq!(parse_anchor(out, "llama.cpp"), None);
        assert_eq!(best(&[(1.0, 5.0), (3.0, 2.0)]), (3.0, 5.0));
    }
}
