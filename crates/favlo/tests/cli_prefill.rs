//! `--prefill` and `--prefill-chunk` as a user meets them on `serve`, `complete` and
//! `bench chat`: an unknown value, `fp8` without a CUDA device, or a chunk outside
//! 16..=65536 tokens is a usage error (exit status 2) that names the fix, before any
//! model loads or any port is bound; so are `serve --parallel` and `bench chat
//! --sequences` above 1 without a CUDA device, or outside 1..=4, and a `bench chat
//! --context` too small for the prompt and decoded tokens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// (exit code, stderr) of `favlo <args>` with an empty home.
fn favlo(args: &[&str]) -> (Option<i32>, String) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_favlo"))
        .args(args)
        .env("FAVLO_HOME", home.path())
        .env_remove("FAVLO_DEVICE")
        .env_remove("FAVLO_PREFILL")
        .env_remove("FAVLO_PREFILL_CHUNK")
        .env_remove("FAVLO_PARALLEL")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn usage_error(args: &[&str], needle: &str) {
    let (code, err) = favlo(args);
    assert_eq!(code, Some(2), "favlo {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "favlo {args:?}: {err}");
}

#[test]
fn fp8_prefill_needs_cuda() {
    let fix = "--prefill fp8 runs on a CUDA GPU";
    usage_error(&["serve", "--prefill", "fp8"], fix);
    usage_error(&["complete", "hi", "--prefill", "fp8"], fix);
    usage_error(&["bench", "chat", "--prefill", "fp8"], fix);
    usage_error(&["serve", "--device", "cpu", "--prefill", "FP8"], fix);
}

#[test]
fn unknown_prefill_is_named() {
    usage_error(
        &["serve", "--prefill", "fast"],
        "unknown --prefill \"fast\": use exact (default) or fp8",
    );
    usage_error(
        &["complete", "hi", "--prefill", "int8"],
        "unknown --prefill",
    );
}

#[test]
fn prefill_chunk_out_of_range_is_named() {
    let range = "16..=65536";
    usage_error(&["serve", "--prefill-chunk", "0"], range);
    usage_error(&["complete", "hi", "--prefill-chunk", "8"], range);
    usage_error(&["bench", "chat", "--prefill-chunk", "100000"], range);
    usage_error(&["serve", "--prefill-chunk", "lots"], "--prefill-chunk");
}

#[test]
fn parallel_decoding_needs_cuda_and_names_its_range() {
    let fix = "on a CUDA GPU: add --device cuda";
    usage_error(&["serve", "--parallel", "2"], fix);
    usage_error(&["serve", "--device", "cpu", "--parallel", "4"], fix);
    usage_error(&["bench", "chat", "--sequences", "3"], fix);
    usage_error(&["serve", "--parallel", "5"], "1..=4");
    usage_error(&["serve", "--parallel", "0"], "1..=4");
    usage_error(&["bench", "chat", "--sequences", "9"], "1..=4");
}

#[test]
fn bench_chat_context_must_hold_the_prompt_and_decode() {
    usage_error(
        &[
            "bench",
            "chat",
            "--prompt",
            "100",
            "--decode",
            "10",
            "--context",
            "50",
        ],
        "--context 50 is smaller than the prompt and decoded tokens (111)",
    );
    usage_error(&["bench", "chat", "--context", "0"], "--context");
}
