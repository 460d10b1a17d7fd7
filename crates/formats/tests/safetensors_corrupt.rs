//! Truncated and corrupted safetensors files must be errors naming the file,
//! never panics: every truncation length, byte flips over the header, and a
//! truncated shard inside a sharded checkpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use favlo_formats::safetensors::{SafeTensors, SafetensorsError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/safetensors")
        .join(name)
}

#[test]
fn every_truncation_is_an_error_naming_the_file() {
    let bytes = std::fs::read(fixture("dtypes.safetensors")).unwrap();
    for len in 0..bytes.len() {
        let label = format!("cut-{len}.safetensors");
        let err = SafeTensors::from_bytes(&label, bytes[..len].to_vec()).unwrap_err();
        assert!(matches!(err, SafetensorsError::Parse { .. }), "{err}");
        assert!(err.to_string().contains(&label), "{err}");
    }
    // Trailing garbage is rejected too.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(SafeTensors::from_bytes("long", longer).is_err());
}

#[test]
fn byte_flips_never_panic() {
    let bytes = std::fs::read(fixture("dtypes.safetensors")).unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut rejected = 0;
    for pos in 0..bytes.len() {
        for pattern in [0xFFu8, 0x01, 0x20] {
            let mut b = bytes.clone();
            b[pos] ^= pattern;
            match SafeTensors::from_bytes("flip.safetensors", b) {
                Ok(st) => {
                    for name in st.names() {
                        let info = st.info(name).unwrap();
                        if let Ok((v, shape)) = st.tensor_f32(name) {
                            assert_eq!(v.len(), shape.iter().product::<usize>());
                            assert_eq!(shape, info.shape);
                        }
                    }
                }
                Err(e) => {
                    assert!(e.to_string().contains("flip.safetensors"), "{e}");
                    rejected += 1;
                }
            }
        }
    }
    // The 8-byte length and most of the JSON structure must be caught.
    assert!(rejected > header_end / 2, "only {rejected} flips rejected");
}

#[test]
fn truncated_files_on_disk_are_errors() {
    let bytes = std::fs::read(fixture("dtypes.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for len in [0, 7, 8, 100, bytes.len() - 1] {
        let p = dir.path().join(format!("t{len}.safetensors"));
        std::fs::write(&p, &bytes[..len]).unwrap();
        let err = SafeTensors::open(&p).unwrap_err();
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
    }
    // A truncated shard of a sharded checkpoint names that shard.
    let src = fixture("sharded");
    for f in [
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let shard2 = std::fs::read(src.join("model-00002-of-00002.safetensors")).unwrap();
    std::fs::write(
        dir.path().join("model-00002-of-00002.safetensors"),
        &shard2[..shard2.len() - 4],
    )
    .unwrap();
    let err = SafeTensors::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("model-00002-of-00002.safetensors"),
        "{err}"
    );
}
