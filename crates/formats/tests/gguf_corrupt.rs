//! Corrupt and truncated GGUF files must give errors naming the file, never a
//! panic or a huge allocation: every truncation length of the fixtures, byte
//! flips over the whole header, and hand-built files with absurd counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use favlo_formats::gguf::{GgufError, GgufFile};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
}

/// End of the last tensor's data (what a valid truncation must keep).
fn data_end(f: &GgufFile) -> u64 {
    f.tensors()
        .iter()
        .map(|t| f.data_start() + t.offset + t.n_bytes)
        .max()
        .unwrap_or(0)
}

#[test]
fn every_truncation_is_an_error_naming_the_file() {
    for fixture_name in ["quants.gguf", "meta.gguf"] {
        let bytes = std::fs::read(fixture(fixture_name)).unwrap();
        let full = GgufFile::from_bytes(fixture_name, bytes.clone()).unwrap();
        let need = data_end(&full);
        assert!(need as usize <= bytes.len());
        for len in 0..bytes.len() {
            let label = format!("cut-{len}.gguf");
            match GgufFile::from_bytes(&label, bytes[..len].to_vec()) {
                Ok(f) => {
                    assert!(
                        len as u64 >= need,
                        "{fixture_name} cut at {len} < {need} opened"
                    );
                    assert_eq!(f.tensors().len(), full.tensors().len());
                }
                Err(e) => {
                    assert!(
                        matches!(e, GgufError::Truncated { .. }),
                        "{fixture_name} cut at {len}: {e}"
                    );
                    assert!(e.to_string().contains(&label), "{e}");
                }
            }
        }
    }
}

#[test]
fn truncated_files_on_disk_are_errors() {
    let bytes = std::fs::read(fixture("quants.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = GgufFile::open(&fixture("quants.gguf")).unwrap();
    let first = &f.tensors()[0];
    let last = f.tensors().last().unwrap();
    for len in [
        0,
        3,
        4,
        7,
        8,
        23,
        24,
        100,
        f.data_start() as usize - 1,
        bytes.len() - 9,
        bytes.len() - 100,
    ] {
        let p = dir.path().join(format!("t{len}.gguf"));
        std::fs::write(&p, &bytes[..len]).unwrap();
        let err = GgufFile::open(&p).unwrap_err();
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
        if len + 100 >= bytes.len() {
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("tensor '{}' data", last.name)),
                "{msg}"
            );
        }
    }
    let _ = first;
    let missing = dir.path().join("missing.gguf");
    assert!(matches!(
        GgufFile::open(&missing),
        Err(GgufError::Io { .. })
    ));
}

/// Opens, then decodes every tensor; must not panic whatever the bytes.
fn exercise(label: &str, bytes: Vec<u8>) -> bool {
    match GgufFile::from_bytes(label, bytes) {
        Ok(f) => {
            for t in f.tensors() {
                let _ = f.tensor_bytes(t);
                if let Ok((v, shape)) = f.tensor_f32(&t.name) {
                    assert_eq!(v.len(), shape.iter().product::<usize>());
                }
            }
            true
        }
        Err(e) => {
            assert!(e.to_string().contains(label), "{e}");
            false
        }
    }
}

#[test]
fn byte_flips_over_the_header_never_panic() {
    for fixture_name in ["quants.gguf", "meta.gguf"] {
        let bytes = std::fs::read(fixture(fixture_name)).unwrap();
        let header_end = GgufFile::from_bytes("x", bytes.clone())
            .unwrap()
            .data_start() as usize;
        let mut errors = 0;
        for pos in 0..header_end {
            for pattern in [0xFFu8, 0x80, 0x01, 0x7F, 0x10] {
                let mut b = bytes.clone();
                b[pos] ^= pattern;
                if !exercise("flip.gguf", b) {
                    errors += 1;
                }
            }
        }
        // Most flips in counts, lengths, type ids must be caught.
        assert!(
            errors > header_end,
            "{fixture_name}: only {errors} flips rejected"
        );
    }
}

#[test]
fn huge_u64_in_every_8_byte_window_never_panics() {
    // Overwrite each aligned-or-not 8-byte window with values that stress length checks.
    let bytes = std::fs::read(fixture("meta.gguf")).unwrap();
    let header_end = GgufFile::from_bytes("x", bytes.clone())
        .unwrap()
        .data_start() as usize;
    for pos in 0..header_end.saturating_sub(8) {
        for v in [u64::MAX, u64::MAX / 2, 1 << 40, 0x1_0000_0000] {
            let mut b = bytes.clone();
            b[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
            exercise("wide.gguf", b);
        }
    }
}

/// Hand-built GGUF images (independent of the reader) for specific corruptions.
struct Builder(Vec<u8>);

impl Builder {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut b = b"GGUF".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(n_tensors.to_le_bytes());
        b.extend(n_kv.to_le_bytes());
        Builder(b)
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(self, s: &str) -> Self {
        let mut b = self.u64(s.len() as u64);
        b.0.extend(s.as_bytes());
        b
    }
    fn pad(mut self, n: usize) -> Self {
        self.0.extend(std::iter::repeat_n(0u8, n));
        self
    }
    fn open(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes("built.gguf", self.0)
    }
}

fn field_of(e: &GgufError) -> String {
    match e {
        GgufError::Truncated { field, .. }
        | GgufError::Invalid { field, .. }
        | GgufError::UnknownType { field, .. } => field.clone(),
        other => panic!("unexpected error kind: {other}"),
    }
}

#[test]
fn absurd_counts_and_lengths_are_named_errors() {
    // Huge metadata count.
    let e = Builder::new(3, 0, u64::MAX).pad(64).open().unwrap_err();
    assert!(field_of(&e).contains("metadata table"), "{e}");
    // Huge tensor count.
    let e = Builder::new(3, 1 << 60, 0).pad(64).open().unwrap_err();
    assert!(field_of(&e).contains("tensor table"), "{e}");
    // Huge key length.
    let e = Builder::new(3, 0, 1)
        .u64(u64::MAX)
        .pad(16)
        .open()
        .unwrap_err();
    assert!(
        matches!(e, GgufError::Truncated { need: u64::MAX, .. }),
        "{e}"
    );
    // Huge string value length.
    let e = Builder::new(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(1 << 62)
        .pad(16)
        .open()
        .unwrap_err();
    assert_eq!(field_of(&e), "metadata 'k' value");
    // Huge array count (u64 elements): count*8 overflows or exceeds the file.
    let e = Builder::new(3, 0, 1)
        .str("arr")
        .u32(9)
        .u32(10)
        .u64(u64::MAX / 4)
        .pad(16)
        .open()
        .unwrap_err();
    assert!(
        field_of(&e).contains("metadata 'arr' value array of"),
        "{e}"
    );
    // Unknown value type and unknown array element type.
    let e = Builder::new(3, 0, 1)
        .str("k")
        .u32(13)
        .pad(16)
        .open()
        .unwrap_err();
    assert!(matches!(e, GgufError::UnknownType { id: 13, .. }), "{e}");
    let e = Builder::new(3, 0, 1)
        .str("k")
        .u32(9)
        .u32(99)
        .u64(1)
        .pad(16)
        .open()
        .unwrap_err();
    assert!(matches!(e, GgufError::UnknownType { id: 99, .. }), "{e}");
    // Bad bool byte.
    let mut b = Builder::new(3, 0, 1).str("k").u32(7);
    b.0.push(2);
    let e = b.pad(16).open().unwrap_err();
    assert!(matches!(e, GgufError::Invalid { .. }), "{e}");
    // Deeply nested arrays stop at the depth limit instead of overflowing the stack.
    let mut b = Builder::new(3, 0, 1).str("deep").u32(9);
    for _ in 0..10_000 {
        b = b.u32(9).u64(1);
    }
    let e = b.pad(64).open().unwrap_err();
    assert!(e.to_string().contains("nested"), "{e}");
    // Duplicate key.
    let e = Builder::new(3, 0, 2)
        .str("k")
        .u32(4)
        .u32(1)
        .str("k")
        .u32(4)
        .u32(2)
        .open()
        .unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    // Too many dims, dims overflow, unknown ggml type, misaligned offset, data past the end.
    let tensor = |n_dims: u32, dims: &[u64], ty: u32, off: u64| {
        let mut b = Builder::new(3, 1, 0).str("w").u32(n_dims);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(ty).u64(off)
    };
    let e = tensor(1000, &[], 0, 0).pad(64).open().unwrap_err();
    assert_eq!(field_of(&e), "tensor 'w' n_dims");
    let e = tensor(2, &[1 << 40, 1 << 40], 0, 0)
        .pad(64)
        .open()
        .unwrap_err();
    assert_eq!(field_of(&e), "tensor 'w' dims");
    let e = tensor(1, &[32], 77, 0).pad(64).open().unwrap_err();
    assert!(matches!(e, GgufError::UnknownType { id: 77, .. }), "{e}");
    let e = tensor(1, &[8], 0, 4).pad(64).open().unwrap_err();
    assert_eq!(field_of(&e), "tensor 'w' offset");
    let e = tensor(1, &[33], 2, 0).pad(64).open().unwrap_err();
    assert_eq!(field_of(&e), "tensor 'w' dims[0]");
    let e = tensor(1, &[1 << 50], 0, 0).pad(64).open().unwrap_err();
    assert!(
        matches!(&e, GgufError::Truncated { field, .. } if field == "tensor 'w' data"),
        "{e}"
    );
    let e = tensor(1, &[8], 0, u64::MAX - 31)
        .pad(64)
        .open()
        .unwrap_err();
    assert!(
        matches!(&e, GgufError::Truncated { field, .. } if field == "tensor 'w' data"),
        "{e}"
    );
    // A valid hand-built one decodes (f32 [8] of 1.5), proving the builder is right.
    let mut ok = tensor(1, &[8], 0, 0);
    let pad = ok.0.len().div_ceil(32) * 32 - ok.0.len();
    ok = ok.pad(pad);
    for _ in 0..8 {
        ok.0.extend(1.5f32.to_le_bytes());
    }
    let f = ok.open().unwrap();
    assert_eq!(f.tensor_f32("w").unwrap(), (vec![1.5; 8], vec![8]));
    // Bad alignment value.
    let e = Builder::new(3, 0, 1)
        .str("general.alignment")
        .u32(4)
        .u32(48)
        .pad(16)
        .open()
        .unwrap_err();
    assert!(e.to_string().contains("general.alignment"), "{e}");
}
