//! `favlo serve`: the daemon.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use favlo_hub::{DEFAULT_CHAT, DEFAULT_EMBEDDINGS, Home, Registry, is_pulled, progress, pull_spec};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, parse_max_memory};
use favlo_server::{PullPolicy, ServeConfig, ServerDeps};

use crate::cmd::common::{RuntimeArgs, init_logging};
use crate::factory::{Factory, HubCatalog};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Interface to bind. A non-loopback address needs --api-key or --insecure-public.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8129)]
    pub port: u16,
    /// Require `Authorization: Bearer <key>` on the API.
    #[arg(long, env = "FAVLO_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Allow a non-loopback bind without an API key.
    #[arg(long)]
    pub insecure_public: bool,
    /// Unpulled models: `auto` pulls on first use, `never` refuses with a message.
    #[arg(long, default_value = "auto")]
    pub pull: PullPolicy,
    /// Do not pull the default chat and embedding models at start.
    #[arg(long)]
    pub no_default_pull: bool,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Chat requests that may wait behind the running one (429 beyond).
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Seconds a non-streaming request may take, queueing included.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Extra `Host` header values /mcp accepts (DNS-rebinding protection; loopback always).
    #[arg(long = "mcp-allow-host", value_name = "HOST")]
    pub mcp_allow_host: Vec<String>,
    /// Extra browser origins /mcp accepts, e.g. `https://app.example:443` (loopback always).
    #[arg(long = "mcp-allow-origin", value_name = "ORIGIN")]
    pub mcp_allow_origin: Vec<String>,
    /// CUDA: chats of the resident model decoded together (1..=4; default 1). Waiting
    /// chats join the next batch; each holds the whole context in a KV cache of its own,
    /// so the context shrinks to fit N of them on the GPU.
    #[arg(long, env = "FAVLO_PARALLEL", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub parallel: u32,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    init_logging();
    args.runtime.init_threads()?;
    let device = args.runtime.device()?;
    let prefill = args.runtime.prefill(device)?;
    let parallel = match (device, args.parallel) {
        (_, 1) | (Device::Cuda(_), _) => args.parallel as usize,
        (_, n) => {
            return Err(crate::cmd::common::UsageError(format!(
                "--parallel {n} decodes chats together on a CUDA GPU: add --device cuda, or leave --parallel 1"
            ))
            .into());
        }
    };
    #[cfg(feature = "cuda")]
    if let Device::Cuda(n) = device {
        crate::cmd::common::warm_cuda_kernels(n as usize);
    }
    let home = Home::from_env()?;
    let registry = Registry::load(&home)?;
    if !args.no_default_pull && args.pull == PullPolicy::Auto {
        let progress = progress::for_stderr();
        for id in [DEFAULT_CHAT, DEFAULT_EMBEDDINGS] {
            if let Some(row) = registry.get(id)
                && !is_pulled(&home, row)
            {
                eprintln!("pulling the default model {id} (first start)");
                pull_spec(&home, &registry, id, None, progress.as_ref())
                    .with_context(|| format!("pulling the default model {id}"))?;
            }
        }
    }
    let max_memory = parse_max_memory(args.runtime.max_memory.as_deref().unwrap_or(""))?;
    let ledger = Ledger::new(Device::Cpu, max_memory);
    let config = ServeConfig {
        host: args.host,
        port: args.port,
        api_key: args.api_key,
        insecure_public: args.insecure_public,
        max_body_bytes: args.max_body_bytes,
        request_timeout: Duration::from_secs(args.timeout),
        queue_capacity: args.queue,
        pull: args.pull,
        mcp_allowed_hosts: args.mcp_allow_host,
        mcp_allowed_origins: args.mcp_allow_origin,
        ..ServeConfig::default()
    };
    let media_home = home.root().to_path_buf();
    let deps = ServerDeps {
        catalog: Arc::new(HubCatalog { home, registry }),
        factory: Arc::new(Factory {
            llama_format: args.runtime.weights()?,
            llama_prefill: prefill,
            llama_prefill_chunk: args.runtime.prefill_chunk.map(|n| n as usize),
            llama_sequences: parallel,
            device,
        }),
        ledger,
        ui: Some(crate::ui::ASSETS),
        home: media_home,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(favlo_server::serve(config, deps))?;
    Ok(ExitCode::SUCCESS)
}
