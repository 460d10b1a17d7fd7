//! What the CUDA chat tests share: the skip rule, opening a model on a device with the
//! tests' settings, and the logits metric.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Each test binary uses a subset.
#![allow(dead_code)]

use std::path::Path;

use favlo_llama::{LlamaRuntime, OpenOptions, PrefillMode, WeightFormat, open};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

/// True when CUDA is usable; else prints a loud skip naming `what` (or panics under
/// `FAVLO_REQUIRE_CUDA=1`).
pub fn cuda_ok(what: &str) -> bool {
    match favlo_runtime::cuda::CudaContext::probe() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("FAVLO_REQUIRE_CUDA=1 but CUDA is unavailable: {e}");
            }
            eprintln!("\n**** SKIPPED: {e}; {what} did not run ****\n");
            false
        }
    }
}

/// `path` opened on `device` with MXFP8 weights, a 512-token context and 128-token
/// prefill chunks (so the tests' prompts span several; the default is 1024).
pub fn open_on(path: &Path, device: Device, kv_f16: bool) -> LlamaRuntime {
    open_with(
        path,
        device,
        WeightFormat::Mxfp8,
        kv_f16,
        PrefillMode::Exact,
    )
}

/// As [`open_on`] with the weight format and prefill arithmetic given.
pub fn open_with(
    path: &Path,
    device: Device,
    format: WeightFormat,
    kv_f16: bool,
    prefill: PrefillMode,
) -> LlamaRuntime {
    open_opts(
        path,
        OpenOptions {
            format,
            device,
            kv_f16,
            prefill,
            ..OpenOptions::default()
        },
    )
}

/// As [`open_with`] (exact prefill), decoding `sequences` sequences together.
pub fn open_seqs(
    path: &Path,
    device: Device,
    format: WeightFormat,
    kv_f16: bool,
    sequences: usize,
) -> LlamaRuntime {
    open_opts(
        path,
        OpenOptions {
            format,
            device,
            kv_f16,
            sequences,
            ..OpenOptions::default()
        },
    )
}

/// `opts` with the tests' context (512 tokens) and prefill chunks (128).
fn open_opts(path: &Path, opts: OpenOptions) -> LlamaRuntime {
    open_context(path, opts, 512)
}

/// `opts` with a `context`-token cache and the tests' prefill chunks (128).
pub fn open_context(path: &Path, opts: OpenOptions, context: usize) -> LlamaRuntime {
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("cuda-llama-test");
    let opts = OpenOptions {
        max_context: Some(context),
        prefill_chunk: Some(128),
        ..opts
    };
    open(path, &ledger, &owner, &opts).unwrap()
}

/// The first `n` chat prompts' token ids of `tests/fixtures/<refs>`.
pub fn fixture_prompts(refs: &str, n: usize) -> Vec<Vec<u32>> {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(refs);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .take(n)
        .map(|c| {
            c["prompt_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

/// Max |a − b| / max |b| (`a` must be finite).
pub fn rel(a: &[f32], b: &[f32]) -> f32 {
    assert!(a.iter().all(|x| x.is_finite()), "non-finite logits");
    let max = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / max
}
