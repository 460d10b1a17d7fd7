//! `favlo selftest cuda` as a user runs it: a device that cannot run it is a usage
//! error (exit status 2) naming the reason; on a machine with a usable GPU every check
//! passes (exit 0), one line per check. Without CUDA that last test prints SKIPPED and
//! passes, unless `FAVLO_REQUIRE_CUDA=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// (exit code, stdout, stderr) of `favlo selftest <args>`.
fn selftest(args: &[&str]) -> (Option<i32>, String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_favlo"))
        .arg("selftest")
        .args(args)
        .env("FAVLO_HOME", home.path())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn usage_error(args: &[&str], needle: &str) {
    let (code, _, err) = selftest(args);
    assert_eq!(code, Some(2), "favlo selftest {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "favlo selftest {args:?}: {err}");
}

#[test]
fn selftest_needs_a_usable_cuda_device() {
    usage_error(&["cuda", "--device", "cpu"], "needs a CUDA device");
    usage_error(
        &["cuda", "--device", "gpu"],
        "use cpu, cuda, cuda:N or auto",
    );
    usage_error(&["cuda", "--device", "cuda:4096"], "CUDA is unavailable");
}

#[test]
fn every_check_passes_on_this_gpu() {
    let (code, out, err) = selftest(&["cuda"]);
    let required = std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1");
    if code == Some(2) && err.contains("CUDA is unavailable") && !required {
        eprintln!(
            "SKIPPED: favlo selftest cuda needs a CUDA GPU ({})",
            err.trim()
        );
        return;
    }
    print!("{out}");
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!out.contains("FAIL"), "{out}");
    let passed = out
        .lines()
        .filter(|l| l.trim_start().starts_with("pass"))
        .count();
    assert!(passed >= 20, "{passed} checks: {out}");
    assert!(
        out.contains(&format!("{passed} of {passed} checks passed")),
        "{out}"
    );
}
