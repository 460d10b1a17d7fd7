//! `favlo complete`: one streamed chat completion in the terminal, with
//! prefill and decode speed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use favlo_hub::{DEFAULT_CHAT, Home, ModelKind, Registry, is_pulled, progress, pull_spec};
use favlo_pipeline::{
    ChatMessage, CompletionRequest, LanguagePipeline, RequestClosed, Role, StopFlag, TokenLogprob,
    TokenSink,
};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner, parse_max_memory};

use crate::cmd::common::RuntimeArgs;

#[derive(Args, Debug)]
pub struct CompleteArgs {
    /// The user message.
    pub prompt: String,
    /// Registry id of a chat model.
    #[arg(long, default_value = DEFAULT_CHAT)]
    pub model: String,
    /// A system message to put first.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed for sampling.
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

struct Stdout;

impl TokenSink for Stdout {
    fn token(&mut self, piece: &str, _: Option<TokenLogprob>) -> Result<(), RequestClosed> {
        let mut out = std::io::stdout().lock();
        out.write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|_| RequestClosed)
    }
}

pub fn run(args: CompleteArgs) -> anyhow::Result<ExitCode> {
    args.runtime.init_threads()?;
    let device = args.runtime.device()?;
    let prefill = args.runtime.prefill(device)?;
    let home = Home::from_env()?;
    let registry = Registry::load(&home)?;
    let row = registry.get(&args.model).with_context(|| {
        format!(
            "unknown model {:?}; `favlo models` lists the known ids",
            args.model
        )
    })?;
    if row.kind != ModelKind::Chat || row.family != "llama" {
        bail!(
            "{} is a {} model of family {}, not a chat model this command runs",
            row.id,
            row.kind.as_str(),
            row.family
        );
    }
    if !is_pulled(&home, row) {
        pull_spec(
            &home,
            &registry,
            &row.id,
            None,
            progress::for_stderr().as_ref(),
        )?;
    }
    let dir = home.model_dir(row.store_name())?;
    let ledger = Ledger::new(
        Device::Cpu,
        parse_max_memory(args.runtime.max_memory.as_deref().unwrap_or(""))?,
    );
    let owner = Owner::mint("complete");
    let opts = favlo_llama::OpenOptions {
        format: args.runtime.weights()?,
        max_context: row.defaults.context_length,
        name: Some(row.id.clone()),
        device,
        prefill,
        prefill_chunk: args.runtime.prefill_chunk.map(|n| n as usize),
        ..Default::default()
    };
    let mut runtime = favlo_llama::open(&dir, &ledger, &owner, &opts)?;
    let mut messages = Vec::new();
    if let Some(system) = args.system {
        messages.push(ChatMessage::new(Role::System, system));
    }
    messages.push(ChatMessage::new(Role::User, args.prompt));
    let mut request = CompletionRequest::new(messages);
    request.max_tokens = Some(args.max_tokens);
    request.sampling.temperature = args.temperature;
    request.sampling.top_p = args.top_p;
    request.sampling.seed = args.seed;
    let done = runtime.complete(&request, &mut Stdout, &StopFlag::new())?;
    println!();
    let rate = |n: usize, ms: f64| {
        if ms > 0.0 {
            n as f64 * 1000.0 / ms
        } else {
            0.0
        }
    };
    eprintln!(
        "prefill {} tok in {:.0} ms ({:.1} tok/s), decode {} tok in {:.0} ms ({:.1} tok/s), finish {:?}",
        done.prompt_tokens,
        done.prefill_ms,
        rate(done.prompt_tokens, done.prefill_ms),
        done.completion_tokens,
        done.decode_ms,
        rate(done.completion_tokens, done.decode_ms),
        done.finish_reason,
    );
    drop(runtime);
    ledger.sweep(&owner)?;
    Ok(ExitCode::SUCCESS)
}
