//! `favlo quantize`: pack a safetensors checkpoint's linear weights to MXFP8 or
//! MXFP4 and print the per-matrix error table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use favlo_formats::mx_checkpoint::{self, StoreAs, TensorReport, is_linear_matrix};
use favlo_formats::safetensors::SafeTensors;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// A `.safetensors` file, a sharded index `.json`, or a model folder.
    pub input: PathBuf,
    /// Output folder (gets `model.safetensors`, `quantize.json` and the input
    /// folder's config/tokenizer files).
    pub output: PathBuf,
    /// Format of the linear weight matrices: mxfp8, mxfp4, mxfp8-e5m2, bf16
    /// (append `:ocp` for the OCP spec's scale rule instead of `ceil`), or
    /// int8 (symmetric, one scale per output row and 64 input columns, for
    /// BERT-family embedding models).
    #[arg(long, default_value = "mxfp8")]
    pub format: String,
    /// Per-matrix override, `PATTERN=FORMAT` (`*` matches any run of
    /// characters), e.g. `--rule '*.mlp.*=mxfp4'`. The first matching rule wins.
    #[arg(long = "rule", value_name = "PATTERN=FORMAT")]
    pub rules: Vec<String>,
    /// Replace an existing output folder's checkpoint.
    #[arg(long)]
    pub force: bool,
}

/// `*`-wildcard match over the whole name.
fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

fn parse_rules(rules: &[String]) -> anyhow::Result<Vec<(String, StoreAs)>> {
    rules
        .iter()
        .map(|r| {
            let (pat, fmt) = r
                .split_once('=')
                .with_context(|| format!("rule {r:?} is not PATTERN=FORMAT"))?;
            let store = StoreAs::parse(fmt)
                .with_context(|| format!("rule {r:?}: unknown format {fmt:?}"))?;
            Ok((pat.to_string(), store))
        })
        .collect()
}

fn copy_side_files(input: &Path, output: &Path) -> anyhow::Result<()> {
    let dir = if input.is_dir() {
        input
    } else {
        input.parent().unwrap_or(Path::new("."))
    };
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let wanted = name.ends_with(".json") && !name.ends_with(".index.json")
            || name.ends_with(".txt")
            || name.ends_with(".model")
            || name.ends_with(".jinja");
        if path.is_file() && wanted {
            std::fs::copy(&path, output.join(name))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<ExitCode> {
    if args.format.eq_ignore_ascii_case("int8") {
        return int8(&args);
    }
    let default = StoreAs::parse(&args.format)
        .with_context(|| format!("unknown --format {:?}", args.format))?;
    let rules = parse_rules(&args.rules)?;
    let input = SafeTensors::open(&args.input)?;
    let target = args.output.join("model.safetensors");
    if target.exists() && !args.force {
        bail!("{} exists; pass --force to replace it", target.display());
    }
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    copy_side_files(&args.input, &args.output)?;
    let bar = ProgressBar::new(input.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tensors {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let tmp = args.output.join("model.safetensors.tmp");
    let reports = mx_checkpoint::write(
        &input,
        &tmp,
        |name, shape, dtype| {
            if let Some((_, s)) = rules.iter().find(|(p, _)| glob_match(p, name)) {
                return *s;
            }
            if is_linear_matrix(name, shape) {
                default
            } else if dtype == safetensors::Dtype::F16 {
                StoreAs::F16
            } else {
                StoreAs::Bf16
            }
        },
        |done, _, r| {
            bar.set_position(done as u64);
            bar.set_message(r.name.clone());
        },
    )?;
    bar.finish_and_clear();
    std::fs::rename(&tmp, &target).with_context(|| format!("renaming to {}", target.display()))?;
    print_table(&reports);
    let json = serde_json::json!({
        "format": mx_checkpoint::FORMAT_TAG,
        "source": args.input.display().to_string(),
        "tensors": reports.iter().map(|r| serde_json::json!({
            "name": r.name, "shape": r.shape, "stored_as": r.stored_as, "rel_error": r.rel_error,
            "bytes_in": r.bytes_in, "bytes_out": r.bytes_out,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        args.output.join("quantize.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    eprintln!("wrote {}", target.display());
    Ok(ExitCode::SUCCESS)
}

/// The embeddings family's int8 checkpoint (symmetric, one scale per output row and 64 input columns).
fn int8(args: &QuantizeArgs) -> anyhow::Result<ExitCode> {
    if !args.rules.is_empty() {
        bail!("--rule applies to MX formats; int8 quantizes every encoder linear weight");
    }
    let target = args.output.join("model.safetensors");
    if target.exists() && !args.force {
        bail!("{} exists; pass --force to replace it", target.display());
    }
    let r = favlo_bert::quantize_int8(&args.input, &args.output)?;
    println!(
        "{} linear weights to int8, {} tensors kept f32, {} bytes in, {} bytes out ({:.1}%)",
        r.quantized,
        r.kept,
        r.bytes_in,
        r.bytes_out,
        100.0 * r.bytes_out as f64 / r.bytes_in.max(1) as f64
    );
    eprintln!("wrote {}", r.checkpoint.display());
    Ok(ExitCode::SUCCESS)
}

fn print_table(reports: &[TensorReport]) {
    println!(
        "{:<60} {:>14} {:>10} {:>12}",
        "TENSOR", "SHAPE", "STORED", "REL ERROR"
    );
    for r in reports {
        let shape = r
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        println!(
            "{:<60} {:>14} {:>10} {:>12.3e}",
            r.name, shape, r.stored_as, r.rel_error
        );
    }
    let (bin, bout): (u64, u64) = reports
        .iter()
        .fold((0, 0), |(a, b), r| (a + r.bytes_in, b + r.bytes_out));
    println!(
        "{} tensors, {bin} bytes in, {bout} bytes out ({:.1}%)",
        reports.len(),
        100.0 * bout as f64 / bin.max(1) as f64
    );
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*.mlp.*", "model.layers.0.mlp.down_proj.weight"));
        assert!(!glob_match(
            "*.mlp.*",
            "model.layers.0.self_attn.q_proj.weight"
        ));
        assert!(glob_match("lm_head.weight", "lm_head.weight"));
        assert!(glob_match("*weight", "a.weight"));
        assert!(!glob_match("a*b*c", "acb"));
        assert!(glob_match("a*b*c", "axxbyyc"));
    }
}
