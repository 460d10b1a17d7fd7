//! Flags and set-up shared by the commands that run models.

use anyhow::Context;
use clap::Args;

/// How models run: threads, memory cap, weight storage.
#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// Worker threads for the kernels (default: all cores).
    #[arg(long, env = "FAVLO_THREADS")]
    pub threads: Option<usize>,
    /// Cap on the memory the ledger may hand out: 32GiB, 512MiB, 8g, 100m, or bytes.
    #[arg(long, env = "FAVLO_MAX_MEMORY")]
    pub max_memory: Option<String>,
    /// Storage of language-model matrices: native (default: GGUF blocks kept
    /// as they are, llama.cpp's numerics; f16 for safetensors), f16, mxfp8,
    /// mxfp4 or f32.
    #[arg(long, default_value = "native")]
    pub weights: String,
}

impl RuntimeArgs {
    /// Sizes the global kernel thread pool.
    pub fn init_threads(&self) -> anyhow::Result<()> {
        if let Some(n) = self.threads {
            anyhow::ensure!(n > 0, "--threads must be at least 1");
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global()
                .context("sizing the thread pool")?;
        }
        Ok(())
    }

    /// The parsed `--weights`.
    pub fn weights(&self) -> anyhow::Result<favlo_llama::WeightFormat> {
        favlo_llama::WeightFormat::parse(&self.weights).with_context(|| {
            format!(
                "unknown --weights {:?}: use native (default), f16, mxfp8, mxfp4 or f32",
                self.weights
            )
        })
    }
}

/// Structured logs on stderr; `RUST_LOG` overrides the default `info` level.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
