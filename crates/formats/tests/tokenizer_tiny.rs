//! Tokenizer tests that always run: tiny byte-level BPE tokenizers trained by
//! tools/fixtures/tokenizer_refs.py, loaded as tokenizer.json, as GGUF-style vocab JSON and
//! as a tensor-less GGUF file; ids must equal Python `tokenizers` exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tokenizer_common;

use favlo_formats::gguf::GgufFile;
use favlo_formats::tokenizer::{ByteMode, GgufVocab, Tokenizer, TokenizerError};
use tokenizer_common::{check_against, fixture};

fn vocab(name: &str) -> GgufVocab {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn tiny_smollm_tokenizer_json_matches_python() {
    let tok = Tokenizer::from_file(&fixture("tokenizer_tiny_smollm.json")).unwrap();
    assert_eq!(tok.byte_mode(), ByteMode::ByteLevel);
    check_against(&tok, "tiny_smollm");
}

#[test]
fn tiny_qwen2_tokenizer_json_matches_python() {
    let tok = Tokenizer::from_file(&fixture("tokenizer_tiny_qwen2.json")).unwrap();
    check_against(&tok, "tiny_qwen2");
}

#[test]
fn tiny_smollm_gguf_vocab_matches_python() {
    let v = vocab("tokenizer_tiny_smollm_vocab.json");
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    check_against(&tok, "tiny_smollm");
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), vec![2]);
    assert!(tok.is_special(0) && tok.is_special(2) && !tok.is_special(100));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert_eq!(tok.vocab_size(), v.tokens.len());
}

#[test]
fn tiny_qwen2_gguf_vocab_matches_python() {
    let tok = Tokenizer::from_gguf_vocab(&vocab("tokenizer_tiny_qwen2_vocab.json")).unwrap();
    check_against(&tok, "tiny_qwen2");
}

#[test]
fn tiny_gguf_file_matches_python() {
    let file = GgufFile::open(&fixture("tokenizer_tiny_smollm.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    check_against(&tok, "tiny_smollm");
    assert_eq!(tok.chat_template(), Some("{{ messages[0]['content'] }}"));
    assert_eq!(tok.bos_token(), Some("<|im_start|>"));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
}

#[test]
fn add_bos_prepends_bos_only_with_add_special() {
    let mut v = vocab("tokenizer_tiny_smollm_vocab.json");
    v.add_bos = true;
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    let plain = tok.encode("Hello world", false).unwrap();
    let with = tok.encode("Hello world", true).unwrap();
    assert_eq!(with[0], 1);
    assert_eq!(&with[1..], &plain[..]);
}

#[test]
fn unknown_pre_and_model_are_errors() {
    let mut v = vocab("tokenizer_tiny_smollm_vocab.json");
    v.pre = Some("no-such-pre".into());
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::UnsupportedPre { .. })
    ));
    v.pre = Some("smollm".into());
    v.model = "t5".into();
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::UnsupportedModel { .. })
    ));
    v.model = "gpt2".into();
    v.bos_id = Some(1_000_000);
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::Metadata { .. })
    ));
}

#[test]
fn token_bytes_of_unknown_id_is_none() {
    let tok = Tokenizer::from_file(&fixture("tokenizer_tiny_smollm.json")).unwrap();
    assert_eq!(tok.token_bytes(1_000_000), None);
    assert_eq!(tok.token_bytes(1).unwrap(), b"<|im_start|>");
}

/// A tiny SentencePiece BPE model as GGUF `llama` vocab (scores, no merges) must give the
/// ids and decodes of the `sentencepiece` library itself.
#[test]
fn tiny_spm_gguf_vocab_matches_sentencepiece() {
    let tok = Tokenizer::from_gguf_vocab(&vocab("tokenizer_tiny_spm_vocab.json")).unwrap();
    assert_eq!(tok.byte_mode(), ByteMode::SentencePiece);
    let refs = tokenizer_common::refs();
    let strings = refs["strings"].as_array().unwrap();
    let mut failures = Vec::new();
    for (s, case) in strings.iter().zip(refs["tiny_spm"].as_array().unwrap()) {
        let s = s.as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(s, false).unwrap();
        if got != want {
            failures.push(format!("{s:?}\n  got  {got:?}\n  want {want:?}"));
            continue;
        }
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            case["decoded"].as_str().unwrap()
        );
        // Token bytes carry the dummy-prefix space that decode strips.
        let bytes: Vec<u8> = got
            .iter()
            .flat_map(|id| tok.token_bytes(*id).unwrap())
            .collect();
        if !s.is_empty() {
            assert_eq!(bytes, format!(" {s}").into_bytes(), "token bytes {s:?}");
        }
        let with_bos = tok.encode(s, true).unwrap();
        assert_eq!(with_bos[0], 1);
        assert_eq!(&with_bos[1..], &got[..]);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
