//! Flags and set-up shared by the commands that run models.

use anyhow::Context;
use clap::Args;
use favlo_runtime::device::Device;

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
    /// Where models run: cpu (default), cuda / cuda:N (an NVIDIA GPU: chat with MXFP8
    /// matrices, or MXFP4 with --weights mxfp4; embeddings, images, video and the voice's
    /// decoder in f32), or auto (cuda:0 when it is usable here, else the CPU, saying why).
    #[arg(long, env = "FAVLO_DEVICE", default_value = "cpu")]
    pub device: String,
    /// How a CUDA chat prefill computes the prompt's projections: exact (default: the
    /// decode path's numbers, within 1e-4 of the CPU) or fp8 (Hopper GPUs: FP8 tensor
    /// cores with the activations rounded to E4M3, about twice the prompt rate on long
    /// prompts; the weights take one more byte each on the GPU).
    #[arg(long, env = "FAVLO_PREFILL", default_value = "exact")]
    pub prefill: String,
    /// Prompt tokens per CUDA chat prefill chunk (default: 2048 exact, 1024 fp8, or 1024
    /// where the larger default would shorten the context; at most the model's context).
    /// GPU scratch grows linearly with it: an 8B model's exact prefill takes 0.86 GB at
    /// 2048 and 0.55 GB at 1024, which it runs 7% slower.
    #[arg(long, env = "FAVLO_PREFILL_CHUNK", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub prefill_chunk: Option<u32>,
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

/// The parsed `--prefill` for a model on `device` (a [`UsageError`] when unknown, or fp8
/// off CUDA).
pub fn prefill_mode(s: &str, device: Device) -> anyhow::Result<favlo_llama::PrefillMode> {
    let mode = favlo_llama::PrefillMode::parse(s).ok_or_else(|| {
        UsageError(format!(
            "unknown --prefill {s:?}: use exact (default) or fp8"
        ))
    })?;
    if mode == favlo_llama::PrefillMode::Fp8 {
        match device {
            Device::Cpu => {
                return Err(UsageError(
                    "--prefill fp8 runs on a CUDA GPU (Hopper): add --device cuda, or leave --prefill exact"
                        .into(),
                )
                .into());
            }
            // The FP8 GEMM is Hopper's wgmma: say so now, not at the first request.
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => {
                let arch = favlo_runtime::cuda::CudaContext::device_arch(n as usize)
                    .map_err(|e| UsageError(format!("--prefill fp8: {e}")))?;
                if !favlo_runtime::cuda::GemmMx::supports(&arch) {
                    return Err(UsageError(format!(
                        "--prefill fp8 needs a Hopper GPU (sm_90a FP8 tensor cores); cuda:{n} is {arch}: leave --prefill exact"
                    ))
                    .into());
                }
            }
            _ => {}
        }
    }
    Ok(mode)
}

impl RuntimeArgs {
    /// The parsed `--prefill` for models on `device`.
    pub fn prefill(&self, device: Device) -> anyhow::Result<favlo_llama::PrefillMode> {
        prefill_mode(&self.prefill, device)
    }

    /// The parsed and checked `--device` (a [`UsageError`] when unusable here).
    pub fn device(&self) -> anyhow::Result<Device> {
        device(&self.device)
    }
}

/// A bad command line or an unusable setting: `favlo` exits with status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parses `cpu`, `cuda` (= `cuda:0`), `cuda:N` or `auto` and checks the device can run
/// every device-capable model here (CUDA: this build has the feature, libcuda, libnvrtc
/// and libcublasLt load, device N exists). An asked-for device that fails is a
/// [`UsageError`] naming the reason; `auto` falls back to the CPU instead and says so
/// on stderr.
pub fn device(s: &str) -> anyhow::Result<Device> {
    let d = match s.trim().to_ascii_lowercase().as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        "auto" => {
            return Ok(match usable(Device::Cuda(0)) {
                Ok(()) => Device::Cuda(0),
                Err(reason) => {
                    eprintln!("--device auto: running on the CPU ({reason})");
                    Device::Cpu
                }
            });
        }
        other => match other.strip_prefix("cuda:").map(str::parse::<u32>) {
            Some(Ok(n)) => Device::Cuda(n),
            _ => {
                return Err(UsageError(format!(
                    "unknown --device {s:?}: use cpu, cuda, cuda:N or auto"
                ))
                .into());
            }
        },
    };
    usable(d).map_err(|e| UsageError(format!("--device {s}: {e}")))?;
    Ok(d)
}

/// Whether every device-capable pipeline (chat, embeddings, images and video, the
/// voice's decoder) can run on `d` here; for a GPU, also that it opens and is recent
/// enough for the kernels (`CudaContext::open` refuses older ones).
fn usable(d: Device) -> Result<(), String> {
    favlo_llama::check_device(d).map_err(|e| e.to_string())?;
    favlo_bert::check_device(d).map_err(|e| e.to_string())?;
    favlo_dcgan::check_device(d).map_err(|e| e.to_string())?;
    favlo_vits::model::check_device(d).map_err(|e| e.to_string())?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(n) = d {
        favlo_runtime::cuda::CudaContext::open(n as usize, None).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Compiles every CUDA kernel module cuda:`ordinal` lacks in the disk cache, side by
/// side on a background thread (a first run, or the first after an upgrade), so the
/// first request that opens a model reads them from the cache instead of waiting for
/// NVRTC; logs what it did. Failures are only logged: a model's own open compiles what
/// it needs and reports errors on its request.
#[cfg(feature = "cuda")]
pub fn warm_cuda_kernels(ordinal: usize) {
    use favlo_runtime::cuda::{CudaContext, KernelSet, warm_kernels};
    let spawned = std::thread::Builder::new()
        .name("cuda-kernels".into())
        .spawn(move || {
            let t0 = std::time::Instant::now();
            let arch = match CudaContext::device_arch(ordinal) {
                Ok(arch) => arch,
                Err(e) => {
                    tracing::warn!("CUDA kernel warm-up skipped: {e}");
                    return;
                }
            };
            match warm_kernels(&arch, KernelSet::All) {
                Ok(r) if r.compiled.is_empty() => {
                    tracing::debug!("CUDA kernels for {arch}: all {} cached", r.cached)
                }
                Ok(r) => tracing::info!(
                    "compiled {} CUDA kernel modules for {arch} in {:.1} s ({} were cached)",
                    r.compiled.len(),
                    t0.elapsed().as_secs_f64(),
                    r.cached
                ),
                Err(e) => tracing::warn!("CUDA kernel warm-up: {e}"),
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("CUDA kernel warm-up not started: {e}");
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

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::{UsageError, device};
    use favlo_runtime::device::Device;

    fn usage(r: anyhow::Result<Device>) -> String {
        let e = r.expect_err("expected a usage error");
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
        e.to_string()
    }

    #[test]
    fn device_flag_parses_and_refuses_clearly() {
        assert_eq!(device("cpu").ok(), Some(Device::Cpu));
        assert_eq!(device(" CPU ").ok(), Some(Device::Cpu));
        assert!(usage(device("gpu")).contains("use cpu, cuda, cuda:N or auto"));
        assert!(usage(device("cuda:x")).contains("use cpu, cuda, cuda:N or auto"));
        // auto: cuda:0 where it is usable (the explicit flag agrees), else the CPU.
        let auto = device("auto").expect("auto never fails");
        match device("cuda") {
            Ok(d) => assert_eq!(auto, d),
            Err(_) => assert_eq!(auto, Device::Cpu),
        }
        // A GPU machine opens cuda:0; anywhere else the reason is named, no panic.
        match device("cuda") {
            Ok(d) => assert_eq!(d, Device::Cuda(0)),
            Err(e) => {
                assert!(e.downcast_ref::<UsageError>().is_some());
                assert!(e.to_string().contains("CUDA is unavailable"), "{e}");
            }
        }
        assert!(usage(device("cuda:4096")).contains("CUDA is unavailable"));
    }
}
