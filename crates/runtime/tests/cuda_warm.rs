//! `warm_kernels` fills the NVRTC disk cache (no GPU needed, only libnvrtc): into an
//! empty cache it compiles every module of a set, side by side, and a second call
//! compiles nothing; each cache file then holds exactly the CUBIN a plain
//! `compile_cubin` gives. With `FAVLO_WARM_TIMING=1` it also times the chat set
//! compiled one after another against `warm_kernels` (an A/B for docs/CUDA.md).
//!
//! Also: every module of the runtime (the shipped sources, `KernelSet::All`) compiles
//! for sm_90a (Hopper), and every one but the Hopper-only wgmma GEMM for sm_89 (Ada,
//! e.g. an RTX 4090), sm_86 (an RTX 3090), sm_80 (an A100: the oldest GPU the kernels
//! accept, `MIN_COMPUTE_CAPABILITY`), sm_120 (an RTX 5090) and as PTX for compute_86
//! (what `FAVLO_CUDA_ARCH=sm_86` loads on a newer GPU).
//!
//! Own test binary: it points `FAVLO_HOME` at a temporary directory.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use favlo_runtime::cuda::{KernelSet, compile_cubin, nvrtc_version, warm_kernels};

const ARCH: &str = "sm_90a";

fn nvrtc_or_skip() -> bool {
    // SAFETY: only probes whether the dynamic library loads.
    let ok = unsafe { cudarc::nvrtc::sys::is_culib_present() } && nvrtc_version().is_ok();
    if !ok {
        eprintln!("\n**** SKIPPED: libnvrtc not found; the kernel cache test did not run ****\n");
    }
    ok
}

/// The modules of `KernelSet::All` for `arch` that fail to build, one line each.
fn failing(arch: &str) -> Vec<String> {
    KernelSet::All
        .modules_for(arch)
        .iter()
        .filter_map(|m| match compile_cubin(m.name, m.src, arch) {
            Ok(cubin) if cubin.starts_with(b"\x7fELF") => None,
            Ok(_) => Some(format!("{}: not an ELF image", m.name)),
            Err(e) => Some(format!(
                "{}: {}",
                m.name,
                e.to_string().lines().next().unwrap_or("")
            )),
        })
        .collect()
}

/// Every module `failing` builds for `arch` compiles (skips without NVRTC).
fn assert_all_compile(arch: &str) {
    if !nvrtc_or_skip() {
        return;
    }
    let failed = failing(arch);
    assert!(
        failed.is_empty(),
        "not compiling for {arch}:\n{}",
        failed.join("\n")
    );
}

#[test]
fn every_module_compiles_for_sm90a() {
    assert_all_compile("sm_90a");
}

#[test]
fn every_module_compiles_for_sm89() {
    assert_all_compile("sm_89");
}

#[test]
fn every_module_compiles_for_sm86() {
    assert_all_compile("sm_86");
}

#[test]
fn every_module_compiles_for_sm80() {
    assert_all_compile("sm_80");
}

#[test]
fn every_module_compiles_for_sm120() {
    assert_all_compile("sm_120");
}

#[test]
fn every_module_compiles_to_ptx_for_compute86() {
    if !nvrtc_or_skip() {
        return;
    }
    for m in KernelSet::All.modules_for("compute_86") {
        let ptx = compile_cubin(m.name, m.src, "compute_86").unwrap_or_else(|e| panic!("{e}"));
        let text = std::str::from_utf8(&ptx[..ptx.len() - 1]).expect("PTX is text");
        assert_eq!(ptx.last(), Some(&0), "{}: NUL-terminated", m.name);
        assert!(text.contains(".target sm_86"), "{}", m.name);
    }
}

#[test]
fn warm_kernels_fills_the_cache_once() {
    if !nvrtc_or_skip() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // SAFETY: this test binary has this one test; nothing else reads the environment.
    unsafe { std::env::set_var("FAVLO_HOME", home.path()) };
    let set = KernelSet::Voice;
    let t0 = Instant::now();
    let first = warm_kernels(ARCH, set).unwrap();
    let took = t0.elapsed().as_secs_f64();
    let names: Vec<_> = set.modules().iter().map(|m| m.name).collect();
    assert_eq!(first.compiled, names);
    assert_eq!(first.cached, 0);
    let again = warm_kernels(ARCH, set).unwrap();
    assert!(again.compiled.is_empty());
    assert_eq!(again.cached, names.len());
    let dir = home.path().join("cache").join("cuda");
    for m in set.modules() {
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .starts_with(&format!("{}-{ARCH}-", m.name))
                })
            })
            .unwrap_or_else(|| panic!("no cache file for {}", m.name));
        let want = compile_cubin(m.name, m.src, ARCH).unwrap();
        assert_eq!(std::fs::read(file).unwrap(), want, "{}", m.name);
    }
    eprintln!("warm {:?}: {} modules in {took:.1} s", set, names.len());
    if std::env::var("FAVLO_WARM_TIMING").is_ok_and(|v| v == "1") {
        let chat = KernelSet::Chat.modules();
        let t = Instant::now();
        for m in &chat {
            let tm = Instant::now();
            compile_cubin(m.name, m.src, ARCH).unwrap();
            eprintln!("  {}: {:.1} s", m.name, tm.elapsed().as_secs_f64());
        }
        let serial = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let r = warm_kernels(ARCH, KernelSet::Chat).unwrap();
        let parallel = t.elapsed().as_secs_f64();
        assert_eq!(r.compiled.len(), chat.len());
        eprintln!(
            "chat set, {} modules, {} threads: one after another {serial:.1} s, warm_kernels {parallel:.1} s",
            chat.len(),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
    }
}
