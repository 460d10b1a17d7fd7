//! `favlo models`: what the registry offers, what is pulled, and where it lives.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use favlo_hub::{Home, Registry, is_pulled};

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Print the folder of this pulled model (for scripts) instead of the table.
    #[arg(long, value_name = "ID")]
    pub path: Option<String>,
    /// With --path: print the path of this file inside the model folder.
    #[arg(long, requires = "path")]
    pub file: Option<String>,
    /// Print the table as JSON lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let home = Home::from_env()?;
    let registry = Registry::load(&home)?;
    if let Some(id) = &args.path {
        let row = registry
            .get(id)
            .with_context(|| format!("unknown model {id:?}; `favlo models` lists the known ids"))?;
        if !is_pulled(&home, row) {
            bail!("{id} is not pulled; run `favlo pull {id}`");
        }
        let dir = home.model_dir(row.store_name())?;
        let path = match &args.file {
            Some(f) => {
                favlo_hub::validate_name(
                    f.trim_start_matches("./")
                        .split('/')
                        .next_back()
                        .unwrap_or(f),
                )?;
                let p = dir.join(f);
                if !p.is_file() {
                    bail!("{id} has no file {f:?} in {}", dir.display());
                }
                p
            }
            None => dir,
        };
        println!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        println!(
            "{:<30} {:<11} {:<8} {:<7} DESCRIPTION",
            "ID", "KIND", "FAMILY", "PULLED"
        );
    }
    for row in registry.rows() {
        let pulled = is_pulled(&home, row);
        if args.json {
            let line = serde_json::json!({
                "id": row.id, "kind": row.kind.as_str(), "family": row.family,
                "pulled": pulled, "license": row.license, "description": row.description,
            });
            println!("{line}");
        } else {
            let mark = if pulled { "yes" } else { "no" };
            println!(
                "{:<30} {:<11} {:<8} {:<7} {}",
                row.id,
                row.kind.as_str(),
                row.family,
                mark,
                row.description
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
