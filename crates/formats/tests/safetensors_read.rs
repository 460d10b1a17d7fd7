//! safetensors reader against fixtures written by the Python `safetensors` package
//! with numpy/ml_dtypes (tools/fixtures/safetensors_fixtures.py).
//!
//! Tolerance: bitwise equality with ml_dtypes/numpy `astype(float32)` for every
//! dtype (all conversions to f32 here are exact except F64, which both round to
//! nearest); NaN codes compare as NaN.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use favlo_formats::safetensors::{Dtype, SafeTensors, SafetensorsError, decode_f8_e4m3};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/safetensors")
        .join(name)
}

fn expected(name: &str) -> serde_json::Map<String, Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap();
    v.as_object().unwrap().clone()
}

fn check(st: &SafeTensors, name: &str, want: &Value) {
    let (vals, shape) = st.tensor_f32(name).unwrap();
    let want_shape: Vec<usize> = want["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(shape, want_shape, "{name}");
    assert_eq!(st.info(name).unwrap().shape, want_shape);
    let want_bits: Vec<u32> = want["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(vals.len(), want_bits.len(), "{name}");
    assert!(
        want_bits.iter().any(|&b| b != 0),
        "{name}: reference all zero"
    );
    for (i, (g, &w)) in vals.iter().zip(&want_bits).enumerate() {
        let w = f32::from_bits(w);
        if w.is_nan() {
            assert!(g.is_nan(), "{name}[{i}]: got {g}, want NaN");
        } else {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: got {g}, want {w}");
        }
    }
}

#[test]
fn every_dtype_matches_numpy_bitwise() {
    let st = SafeTensors::open(&fixture("dtypes.safetensors")).unwrap();
    let exp = expected("dtypes_expected.json");
    assert_eq!(st.len(), exp.len());
    assert_eq!(
        st.names(),
        exp.keys().map(String::as_str).collect::<Vec<_>>()
    );
    for (name, want) in &exp {
        let dtype = format!("{:?}", st.info(name).unwrap().dtype);
        assert_eq!(dtype, want["dtype"].as_str().unwrap(), "{name}");
        check(&st, name, want);
    }
    assert_eq!(st.info("bf16").unwrap().dtype, Dtype::BF16);
    assert_eq!(st.tensor_bytes("f32").unwrap().len(), 15 * 4);
    assert_eq!(st.file_metadata().get("origin"), Some(&"favlo fixture"));
    let err = st.tensor_f32("nope").unwrap_err();
    assert!(matches!(err, SafetensorsError::NotFound { .. }));
    assert!(err.to_string().contains("dtypes.safetensors"), "{err}");
}

#[test]
fn f8_e4m3_decoder_covers_all_codes() {
    // Spot values from the OCP FP8 spec (E4M3, bias 7, no infinities).
    assert_eq!(decode_f8_e4m3(0x00), 0.0);
    assert_eq!(decode_f8_e4m3(0x80).to_bits(), (-0.0f32).to_bits());
    assert_eq!(decode_f8_e4m3(0x01), 2f32.powi(-9)); // smallest subnormal
    assert_eq!(decode_f8_e4m3(0x08), 2f32.powi(-6)); // smallest normal
    assert_eq!(decode_f8_e4m3(0x38), 1.0);
    assert_eq!(decode_f8_e4m3(0x7E), 448.0); // max
    assert_eq!(decode_f8_e4m3(0xFE), -448.0);
    assert!(decode_f8_e4m3(0x7F).is_nan() && decode_f8_e4m3(0xFF).is_nan());
}

#[test]
fn sharded_checkpoint_opens_from_dir_and_index() {
    let exp = expected("sharded_expected.json");
    for path in [
        fixture("sharded"),
        fixture("sharded/model.safetensors.index.json"),
    ] {
        let st = SafeTensors::open(&path).unwrap();
        assert_eq!(st.shard_paths().len(), 2);
        assert_eq!(st.len(), exp.len());
        for (name, want) in &exp {
            check(&st, name, want);
            let shard = st.tensor_path(name).unwrap();
            assert_eq!(
                shard.file_name().unwrap().to_str().unwrap(),
                want["shard"].as_str().unwrap()
            );
        }
    }
}

#[test]
fn inconsistent_index_is_an_error_naming_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("sharded");
    for f in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let index = dir.path().join("model.safetensors.index.json");
    let write = |wm: &str| {
        std::fs::write(&index, format!("{{\"metadata\":{{}},\"weight_map\":{wm}}}")).unwrap()
    };
    // Tensor mapped to a shard that lacks it.
    write(r#"{"embed.weight":"model-00002-of-00002.safetensors"}"#);
    let e = SafeTensors::open(dir.path()).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::Index { .. }) && e.to_string().contains("index.json"),
        "{e}"
    );
    // Missing shard file.
    write(r#"{"x":"model-00003-of-00002.safetensors"}"#);
    let e = SafeTensors::open(dir.path()).unwrap_err();
    assert!(
        matches!(e, SafetensorsError::Io { .. }) && e.to_string().contains("model-00003"),
        "{e}"
    );
    // Path traversal and non-string entries.
    write(r#"{"x":"../model-00001-of-00002.safetensors"}"#);
    assert!(matches!(
        SafeTensors::open(dir.path()),
        Err(SafetensorsError::Index { .. })
    ));
    write(r#"{"x":5}"#);
    assert!(matches!(
        SafeTensors::open(dir.path()),
        Err(SafetensorsError::Index { .. })
    ));
    std::fs::write(&index, "{not json").unwrap();
    assert!(matches!(
        SafeTensors::open(dir.path()),
        Err(SafetensorsError::Index { .. })
    ));
    // Same shard listed under two names -> duplicate tensors.
    std::fs::copy(
        src.join("model-00001-of-00002.safetensors"),
        dir.path().join("copy.safetensors"),
    )
    .unwrap();
    write(r#"{"embed.weight":"model-00001-of-00002.safetensors","layers.0.w":"copy.safetensors"}"#);
    assert!(matches!(
        SafeTensors::open(dir.path()),
        Err(SafetensorsError::Duplicate { .. })
    ));
    // Empty directory.
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        SafeTensors::open(empty.path()),
        Err(SafetensorsError::NothingToOpen { .. })
    ));
}
