//! `favlo bench chat`: prefill and decode tokens/s of a chat model, beside llama.cpp.
//!
//! Key design choice: with `--anchor` the two engines alternate, one thread count
//! at a time (favlo, llama.cpp, favlo, llama.cpp, …) for `--repeat` rounds, and the
//! summary compares each engine's best round: on a shared or throttling host the
//! speed drifts by tens of percent between minutes, and alternating plus best-of-N
//! gives both engines the same chances.

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
    /// alternating with favlo.
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
fn parse_anchor(out: &str) -> Option<Rate> {
    let line = out.lines().find(|l| l.starts_with("llama.cpp"))?;
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

pub fn chat(b: ChatBench) -> anyhow::Result<ExitCode> {
    let dir = model_dir(&b.model)?;
    let format = favlo_llama::WeightFormat::parse(&b.weights)
        .with_context(|| format!("unknown --weights {:?}", b.weights))?;
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("bench-chat");
    let device = crate::cmd::common::device(&b.device)?;
    let opts = favlo_llama::OpenOptions {
        format,
        max_context: Some(1024),
        device,
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
    let gguf = if b.anchor {
        Some(find_gguf(&dir)?)
    } else {
        None
    };
    println!(
        "model {} ({}), weights {}, device {}, {} round(s){}",
        b.model,
        dir.display(),
        match (cuda, format) {
            (true, favlo_llama::WeightFormat::Mxfp4) => "mxfp4",
            (true, _) => "mxfp8",
            _ => b.weights.as_str(),
        },
        rt.model().device_name(),
        rounds,
        if b.anchor {
            ", alternating with llama.cpp"
        } else {
            ""
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
                },
            )?;
            let rate = (r.prefill_tok_s, r.decode_tok_s);
            row(engine, t, rate, Some(r.decode_gb_s));
            ours[i].push(rate);
            if let Some(g) = &gguf {
                let args = [
                    g.display().to_string(),
                    t.to_string(),
                    b.prompt.to_string(),
                    b.decode.to_string(),
                ];
                let out = run_anchor(
                    include_str!("../../../../tools/bench/chat_anchor.py"),
                    &args,
                )?;
                match parse_anchor(&out) {
                    Some(rate) => {
                        row("llama.cpp", t, rate, None);
                        theirs[i].push(rate);
                    }
                    None => print!("{out}"),
                }
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
                row("llama.cpp", t, a, None);
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
        assert_eq!(parse_anchor(out), Some((141.3, 58.8)));
        assert_eq!(
            parse_anchor("llama.cpp   (not installed: pip install llama-cpp-python)\n"),
            None
        );
        assert_eq!(best(&[(1.0, 5.0), (3.0, 2.0)]), (3.0, 5.0));
    }
}
