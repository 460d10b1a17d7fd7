//! Shared helpers for the tokenizer tests: fixture paths and the Python references
//! written by tools/fixtures/tokenizer_refs.py.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_formats::tokenizer::{StreamDecoder, Tokenizer};
use serde_json::Value;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}

pub fn refs() -> Value {
    let text = std::fs::read_to_string(fixture("tokenizer_refs.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A path from an env var, or `None` after a loud message saying what is skipped.
pub fn env_path(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            // Written to the raw stderr handle so the harness's capture does not hide it.
            let msg = format!("!!!!! SKIPPED: {what}: set {var} to run it !!!!!\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
            None
        }
    }
}

/// Checks ids, decode, decode(skip_special), token bytes and streaming decode of every
/// reference string for `key` in the refs file.
pub fn check_against(tok: &Tokenizer, key: &str) {
    let refs = refs();
    let strings = refs["strings"].as_array().unwrap();
    let cases = refs[key].as_array().unwrap();
    assert_eq!(strings.len(), cases.len());
    let mut failures = Vec::new();
    for (s, case) in strings.iter().zip(cases) {
        let s = s.as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(s, false).unwrap();
        if got != want {
            failures.push(format!("{key}: {s:?}\n  got  {got:?}\n  want {want:?}"));
            continue;
        }
        let decoded = case["decoded"].as_str().unwrap();
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            decoded,
            "{key} decode {s:?}"
        );
        assert_eq!(
            tok.decode(&got, true).unwrap(),
            case["decoded_skip"].as_str().unwrap(),
            "{key} decode skip {s:?}"
        );
        let mut bytes = Vec::new();
        let mut stream = StreamDecoder::new();
        let mut streamed = String::new();
        for id in &got {
            bytes.extend(tok.token_bytes(*id).unwrap());
            streamed.push_str(&stream.push_token(tok, *id));
        }
        assert!(
            stream.pending().is_empty(),
            "{key} {s:?} left bytes pending"
        );
        streamed.push_str(&stream.finish());
        assert_eq!(bytes, decoded.as_bytes(), "{key} token bytes {s:?}");
        assert_eq!(streamed, decoded, "{key} stream {s:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
