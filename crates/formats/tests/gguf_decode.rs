//! GGUF block decoders and metadata against fixtures written by the `gguf` Python
//! package (tools/fixtures/gguf_fixtures.py).
//!
//! Tolerance: bitwise equality for every type. The package's dequantizers compute
//! in f32 with the same operation order (scale products, then `d*q - m`) and no FMA,
//! so exact equality is expected; Q8_K's reference is numpy `f32(d) * f32(q)`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use favlo_formats::gguf::{GgmlType, GgufError, GgufFile, GgufValue, dequantize};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
}

fn expected_values() -> Vec<f32> {
    std::fs::read(fixture("quants_expected.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn every_type_matches_the_gguf_package_bitwise() {
    let file = GgufFile::open(&fixture("quants.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("quants_expected.json")).unwrap())
            .unwrap();
    let all = expected_values();
    let manifest = manifest.as_object().unwrap();
    assert_eq!(manifest.len(), file.tensors().len());
    let mut types_seen = Vec::new();
    for (name, e) in manifest {
        let info = file
            .tensor(name)
            .unwrap_or_else(|| panic!("tensor {name} missing"));
        assert_eq!(
            format!("{:?}", info.ggml_type),
            e["type"].as_str().unwrap(),
            "{name}"
        );
        types_seen.push(info.ggml_type);
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let off = e["offset"].as_u64().unwrap() as usize;
        let count = e["count"].as_u64().unwrap() as usize;
        let want = &all[off..off + count];
        let (got, got_shape) = file.tensor_f32(name).unwrap();
        assert_eq!(got_shape, shape, "{name} shape");
        assert_eq!(
            info.dims
                .iter()
                .rev()
                .map(|&d| d as usize)
                .collect::<Vec<_>>(),
            shape
        );
        assert_eq!(got.len(), want.len(), "{name} length");
        // Random inputs: a decoder returning zeros would fail.
        assert!(
            want.iter().filter(|v| **v != 0.0).count() > count / 2,
            "{name} reference is mostly zero"
        );
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: got {g}, want {w}");
        }
    }
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
    ] {
        assert!(
            types_seen.contains(&ty),
            "{ty:?} not covered by the fixture"
        );
    }
}

#[test]
fn dequantize_checks_lengths() {
    let bytes = [0u8; 18];
    let mut out = [0f32; 32];
    assert!(dequantize(GgmlType::Q4_0, &bytes, 32, &mut out).is_ok());
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &bytes, 16, &mut out[..16]),
        Err(GgufError::PartialBlock { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &bytes[..17], 32, &mut out),
        Err(GgufError::LengthMismatch { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &bytes, 32, &mut out[..31]),
        Err(GgufError::LengthMismatch { .. })
    ));
    let mut out = [0f32; 256];
    assert!(matches!(
        dequantize(GgmlType::IQ2_XXS, &[0u8; 66], 256, &mut out),
        Err(GgufError::UnsupportedType { .. })
    ));
}

fn check_value(key: &str, got: &GgufValue, want: &Value) {
    let ty = want["type"].as_str().unwrap();
    assert_eq!(got.type_name(), ty, "{key}: type");
    match got {
        GgufValue::Array(items) => {
            let want_items = want["items"].as_array().unwrap();
            assert_eq!(items.len(), want_items.len(), "{key}: length");
            for (i, (g, w)) in items.iter().zip(want_items).enumerate() {
                check_value(&format!("{key}[{i}]"), g, w);
            }
        }
        GgufValue::String(s) => assert_eq!(s, want["value"].as_str().unwrap(), "{key}"),
        GgufValue::Bool(b) => assert_eq!(*b, want["value"].as_bool().unwrap(), "{key}"),
        GgufValue::F32(f) => assert_eq!(
            u64::from(f.to_bits()),
            want["bits"].as_u64().unwrap(),
            "{key}"
        ),
        GgufValue::F64(f) => assert_eq!(f.to_bits(), want["bits"].as_u64().unwrap(), "{key}"),
        GgufValue::U64(v) => assert_eq!(*v, want["value"].as_u64().unwrap(), "{key}"),
        other => assert_eq!(
            other.as_i64().unwrap(),
            want["value"].as_i64().unwrap(),
            "{key}"
        ),
    }
}

#[test]
fn metadata_of_every_type_round_trips() {
    let file = GgufFile::open(&fixture("meta.gguf")).unwrap();
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("meta_expected.json")).unwrap())
            .unwrap();
    let want = want.as_object().unwrap();
    let n_keys = want.keys().filter(|k| *k != "__tensors__").count();
    assert_eq!(
        file.metadata().len(),
        n_keys,
        "keys: {:?}",
        file.metadata().keys().collect::<Vec<_>>()
    );
    for (key, w) in want.iter().filter(|(k, _)| *k != "__tensors__") {
        let got = file.get(key).unwrap_or_else(|| panic!("missing key {key}"));
        check_value(key, got, w);
    }
    // Typed accessors.
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.data_start() % 64, 0);
    assert_eq!(file.get_u32("t.u32"), Some(4_000_000_000));
    assert_eq!(
        file.get_u32("t.i32"),
        None,
        "negative value does not fit u32"
    );
    assert_eq!(file.get_u32("t.u8"), Some(200));
    assert_eq!(file.get_i64("t.i64"), Some(-9_000_000_000_000_000_000));
    assert_eq!(file.get_str("general.architecture"), Some("fixture"));
    assert_eq!(file.get_bool("t.bool_true"), Some(true));
    assert_eq!(file.get_string_array("a.str").unwrap()[2], "Ġthe");
    assert_eq!(file.get_string_array("a.u8"), None);
    assert_eq!(file.get_f32_array("a.f32").unwrap().len(), 6);
    assert_eq!(file.get_i32_array("a.i16").unwrap().len(), 5);
    assert!(file.get_f32("t.f32").is_some());
    // Tensors after a custom alignment.
    for (name, t) in want["__tensors__"].as_object().unwrap() {
        let (vals, shape) = file.tensor_f32(name).unwrap();
        let want_shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(shape, want_shape);
        let bits: Vec<u64> = vals.iter().map(|v| u64::from(v.to_bits())).collect();
        let want_bits: Vec<u64> = t["bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(bits, want_bits, "{name}");
        assert_eq!(file.tensor(name).unwrap().offset % 64, 0);
    }
    assert!(matches!(
        file.tensor_f32("nope"),
        Err(GgufError::TensorNotFound { .. })
    ));
}

#[test]
fn version_2_is_read_and_version_1_is_a_clear_error() {
    let bytes = std::fs::read(fixture("meta.gguf")).unwrap();
    let mut v2 = bytes.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    let f = GgufFile::from_bytes("v2.gguf", v2).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.get_u32("t.u16"), Some(65000));
    let mut v1 = bytes.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    let err = GgufFile::from_bytes("v1.gguf", v1).unwrap_err();
    assert!(
        matches!(err, GgufError::UnsupportedVersion { version: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("v1.gguf"), "{err}");
    let mut bad = bytes;
    bad[0] = b'X';
    assert!(matches!(
        GgufFile::from_bytes("x", bad),
        Err(GgufError::BadMagic { .. })
    ));
}

/// Opens a real model named by `FAVLO_GGUF_REAL` and decodes every tensor,
/// printing throughput; with `FAVLO_GGUF_REAL_SUMS` (a file of `name sum sum_abs`
/// lines, f64 sums of `gguf.quants.dequantize` output) it also compares per-tensor
/// sums (|diff| <= 1e-9 * sum_abs: only f64 summation order differs). Run: `cargo test -p favlo-formats --test gguf_decode -- --ignored`.
#[test]
#[ignore = "needs a real GGUF model file (FAVLO_GGUF_REAL)"]
fn real_model_decodes_fast() {
    let Ok(path) = std::env::var("FAVLO_GGUF_REAL") else {
        eprintln!("FAVLO_GGUF_REAL not set; skipping");
        return;
    };
    let t0 = std::time::Instant::now();
    let file = GgufFile::open(Path::new(&path)).unwrap();
    let open = t0.elapsed();
    let sums: std::collections::HashMap<String, (f64, f64)> = std::env::var("FAVLO_GGUF_REAL_SUMS")
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    (
                        f[0].to_owned(),
                        (f[1].parse().unwrap(), f[2].parse().unwrap()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let t1 = std::time::Instant::now();
    let (mut bytes, mut elems, mut checked) = (0u64, 0u64, 0);
    for t in file.tensors() {
        let (v, shape) = file.tensor_f32(&t.name).unwrap();
        assert_eq!(v.len(), shape.iter().product::<usize>());
        bytes += t.n_bytes;
        elems += t.n_elems;
        if let Some(&(want, want_abs)) = sums.get(&t.name) {
            let got: f64 = v.iter().map(|&x| f64::from(x)).sum();
            let got_abs: f64 = v.iter().map(|&x| f64::from(x).abs()).sum();
            let tol = 1e-9 * want_abs;
            assert!((got - want).abs() <= tol, "{}: sum {got} vs {want}", t.name);
            assert!(
                (got_abs - want_abs).abs() <= tol,
                "{}: sum_abs {got_abs} vs {want_abs}",
                t.name
            );
            checked += 1;
        }
    }
    let dt = t1.elapsed().as_secs_f64();
    eprintln!(
        "{path}: open {open:?}; decoded {} tensors, {:.1} MB -> {} elems in {dt:.3}s ({:.0} MB/s in); {checked} sums checked",
        file.tensors().len(),
        bytes as f64 / 1e6,
        elems,
        bytes as f64 / 1e6 / dt
    );
}
