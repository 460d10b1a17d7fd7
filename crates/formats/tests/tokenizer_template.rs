//! Chat template rendering against `transformers.apply_chat_template` output (exact
//! string equality), for the real Qwen3 and SmolLM2 templates and a custom template that
//! exercises Python string methods and `tojson` variants; `strftime` against Python.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tokenizer_common;

use favlo_formats::tokenizer::{ChatTemplate, TokenizerError, format_utc};
use tokenizer_common::{fixture, refs};

#[test]
fn templates_match_transformers() {
    let refs = refs();
    let cases = refs["templates"].as_array().unwrap();
    assert!(cases.len() >= 20, "too few template references");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let src =
            std::fs::read_to_string(fixture(&format!("tokenizer_templates/{name}.jinja"))).unwrap();
        let (bos, eos) = match name {
            "qwen3" => ("", "<|im_end|>"),
            _ => ("<|im_start|>", "<|im_end|>"),
        };
        let t = ChatTemplate::new(&src, bos, eos).unwrap();
        let tools = case.get("tools").filter(|v| !v.is_null());
        let got = t
            .render_with(
                &case["messages"],
                tools,
                case["add_generation_prompt"].as_bool().unwrap(),
                case["extra"].as_object(),
            )
            .unwrap();
        let want = case["expected"].as_str().unwrap();
        if got != want {
            failures.push(format!(
                "{name}/{} agp={} extra={}:\n--- got\n{got}\n--- want\n{want}",
                case["conversation"], case["add_generation_prompt"], case["extra"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn raise_exception_is_an_error() {
    let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
    let err = t.render(&serde_json::json!([]), None, false).unwrap_err();
    assert!(matches!(err, TokenizerError::TemplateRender { .. }));
    assert!(err.to_string().contains("no system role"), "{err}");
}

#[test]
fn syntax_error_is_reported() {
    let err = ChatTemplate::new("{% for m in messages %}", "", "").unwrap_err();
    assert!(matches!(err, TokenizerError::TemplateSyntax { .. }));
}

#[test]
fn strftime_matches_python() {
    let refs = refs();
    for case in refs["strftime"].as_array().unwrap() {
        let got = format_utc(
            case["format"].as_str().unwrap(),
            case["secs"].as_u64().unwrap(),
        );
        assert_eq!(got, case["expected"].as_str().unwrap(), "{case}");
    }
    let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
    let year: i32 = t
        .render(&serde_json::json!([]), None, false)
        .unwrap()
        .parse()
        .unwrap();
    assert!(year >= 2025);
}
