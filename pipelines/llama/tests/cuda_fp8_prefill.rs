//! The opt-in FP8 chat prefill (`PrefillMode::Fp8`, Hopper) against the CPU path with the
//! same MX weights (feature `cuda`; `cargo test -p favlo-llama --features cuda --test
//! cuda_fp8_prefill`).
//!
//! SmolLM2-135M-Instruct (`FAVLO_TEST_SMOLLM2_GGUF`, the tests cut it to 6 blocks) with
//! MXFP8 and with MXFP4 weights (the folded, grouped GEMM), each opened on the CPU (f32
//! KV, the independent reference) and on cuda:0 with the FP8 prefill (f32 KV, 128-token
//! chunks). On the 5 chat prompts of the agreement fixtures and one 301-token prompt
//! (three chunks, the last ragged):
//! - the prompt's last-token logits: max |fp8 − cpu| / max |cpu| ≤ `TOL` (the
//!   activations are rounded to E4M3, 3 mantissa bits, before every projection), and
//!   the same greedy next token on ≥ 5 of the 6 prompts;
//! - one decode step after the prefill (exact GEMV over the FP8 prefill's KV cache):
//!   the same bound, so the cache the prefill wrote is the one decoding reads;
//! - the exact prefill on the same device as a control: ≤ 1e-4, so the bound above
//!   measures the FP8 arithmetic and nothing else.
//!
//! Skips loudly (and passes) without the GGUF variable, without CUDA or on a GPU that is
//! not sm_90a; `FAVLO_REQUIRE_CUDA=1` turns a missing GPU into a failure.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{cuda_ok, fixture_prompts, open_with, rel};
use favlo_llama::{LlamaRuntime, PrefillMode, WeightFormat};
use favlo_runtime::device::Device;

/// Bound on max |Δ logit| / max |logit| against the CPU: twice the worst measured on an
/// H200 (2026-12-01: MXFP8 2.8e-2, MXFP4 3.9e-2 on the prompts; 1.0–1.8e-2 on the
/// decode step after them; the exact control ≤ 4.6e-6; next token 6/6 with both).
const TOL: f32 = 0.08;

/// The fixture prompts' token ids, and one of 301 ids made of them.
fn prompts() -> Vec<Vec<u32>> {
    let mut cases = fixture_prompts("smollm2_refs.json", 5);
    let long: Vec<u32> = cases.iter().flatten().copied().cycle().take(301).collect();
    cases.push(long);
    cases
}

/// (prompt logits, the logits of one greedy step after it).
fn prefill_then_step(
    rt: &mut LlamaRuntime,
    prompt: &[u32],
    next: Option<u32>,
) -> (Vec<f32>, Vec<f32>, u32) {
    let v = rt.config().vocab_size;
    let m = rt.model();
    let mut first = vec![0.0; v];
    m.forward(prompt, 0, &mut first, false).unwrap();
    let t = next.unwrap_or(favlo_llama::sampler::argmax(&first) as u32);
    let mut step = vec![0.0; v];
    m.forward(&[t], prompt.len(), &mut step, false).unwrap();
    (first, step, t)
}

fn fp8_vs_cpu(format: WeightFormat) {
    let Some(path) = std::env::var_os("FAVLO_TEST_SMOLLM2_GGUF").map(PathBuf::from) else {
        eprintln!(
            "\n!!!!! SKIPPED: set FAVLO_TEST_SMOLLM2_GGUF=/path/model.gguf to run the FP8 prefill test !!!!!\n"
        );
        return;
    };
    if !cuda_ok("the FP8 prefill test") {
        return;
    }
    let arch = favlo_runtime::cuda::CudaContext::device_arch(0).unwrap();
    if !favlo_runtime::cuda::GemmMx::supports(&arch) {
        eprintln!("\n**** SKIPPED: the FP8 prefill needs sm_90a, cuda:0 is {arch} ****\n");
        return;
    }
    let cases = prompts();
    let mut cpu = open_with(&path, Device::Cpu, format, false, PrefillMode::Exact);
    let want: Vec<_> = cases
        .iter()
        .map(|p| prefill_then_step(&mut cpu, p, None))
        .collect();
    drop(cpu);
    let mut control = 0f32;
    {
        let mut exact = open_with(&path, Device::Cuda(0), format, false, PrefillMode::Exact);
        for (p, w) in cases.iter().zip(&want) {
            let (first, step, _) = prefill_then_step(&mut exact, p, Some(w.2));
            control = control.max(rel(&first, &w.0)).max(rel(&step, &w.1));
        }
    }
    let mut gpu = open_with(&path, Device::Cuda(0), format, false, PrefillMode::Fp8);
    let (mut worst, mut same) = (0f32, 0);
    for (i, (p, w)) in cases.iter().zip(&want).enumerate() {
        let (first, step, _) = prefill_then_step(&mut gpu, p, Some(w.2));
        let (e0, e1) = (rel(&first, &w.0), rel(&step, &w.1));
        let top = favlo_llama::sampler::argmax(&first) as u32;
        same += usize::from(top == w.2);
        eprintln!(
            "{format:?} prompt {i} ({} ids): FP8 prefill vs CPU {e0:.2e}, decode step after it {e1:.2e}, next token {top} (CPU {})",
            p.len(),
            w.2
        );
        worst = worst.max(e0).max(e1);
    }
    eprintln!(
        "{format:?}: FP8 worst {worst:.2e}, greedy next token equal {same}/{}; exact prefill control {control:.2e}",
        cases.len()
    );
    assert!(control <= 1e-4, "exact control {control:.2e}");
    assert!(worst <= TOL, "FP8 prefill {worst:.2e} > {TOL}");
    assert!(
        same + 1 >= cases.len(),
        "next token equal on {same}/{}",
        cases.len()
    );
}

#[test]
fn smollm2_fp8_prefill_mxfp8() {
    fp8_vs_cpu(WeightFormat::Mxfp8);
}

#[test]
fn smollm2_fp8_prefill_mxfp4() {
    fp8_vs_cpu(WeightFormat::Mxfp4);
}
