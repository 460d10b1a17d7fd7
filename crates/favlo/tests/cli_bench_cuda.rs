//! `favlo bench kernels|decode|prefill --device …` refusals as a user meets them: an unusable
//! or wrong device is a usage error (exit status 2) naming the reason, never a panic,
//! and before any benchmark work starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// (exit code, stderr) of `favlo bench <args>`.
fn bench(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_favlo"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn usage_error(args: &[&str], needle: &str) {
    let (code, err) = bench(args);
    assert_eq!(code, Some(2), "favlo bench {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "favlo bench {args:?}: {err}");
}

#[test]
fn decode_needs_a_cuda_device() {
    usage_error(&["decode"], "needs a CUDA device");
    usage_error(&["decode", "--device", "cpu"], "needs a CUDA device");
    usage_error(
        &["decode", "--device", "gpu"],
        "use cpu, cuda, cuda:N or auto",
    );
    usage_error(&["prefill"], "needs a CUDA device");
    usage_error(&["prefill", "--device", "cpu"], "needs a CUDA device");
}

#[test]
fn an_unusable_cuda_device_is_a_usage_error() {
    // No machine has 4097 GPUs: the reason is named whether or not CUDA loads.
    usage_error(&["decode", "--device", "cuda:4096"], "CUDA is unavailable");
    usage_error(&["kernels", "--device", "cuda:4096"], "CUDA is unavailable");
    usage_error(&["prefill", "--device", "cuda:4096"], "CUDA is unavailable");
    // cuda:0: unavailable here (no driver), or on a GPU machine the bad weights are
    // refused before the benchmark starts; a usage error either way.
    let (code, err) = bench(&["decode", "--device", "cuda", "--weights", "int3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("CUDA is unavailable") || err.contains("unknown --weights"),
        "{err}"
    );
    let (code, err) = bench(&["prefill", "--device", "cuda", "--weights", "int3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("CUDA is unavailable") || err.contains("unknown --weights"),
        "{err}"
    );
}
