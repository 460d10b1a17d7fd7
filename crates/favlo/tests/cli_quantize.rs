//! `favlo quantize` as a user runs it: on the tiny BERT fixture checkpoint,
//! the error table is printed, the output opens as an MX checkpoint whose
//! packed matrices decode close to the source, and an existing output is not
//! overwritten without `--force`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use favlo_formats::mx_checkpoint::{CheckpointTensor, MxCheckpoint};
use favlo_formats::safetensors::SafeTensors;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../pipelines/bert/tests/fixtures/tiny_bert")
}

#[test]
fn quantize_prints_table_and_refuses_overwrite() {
    let out = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_favlo");
    let run = |extra: &[&str]| {
        Command::new(bin)
            .arg("quantize")
            .arg(fixture())
            .arg(out.path())
            .args(["--format", "mxfp8", "--rule", "*intermediate*=mxfp4"])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = run(&[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let table = String::from_utf8(first.stdout).unwrap();
    assert!(table.contains("REL ERROR"));
    assert!(
        table
            .lines()
            .any(|l| l.contains("intermediate.dense.weight") && l.contains("mxfp4"))
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("attention.self.query.weight") && l.contains("mxfp8"))
    );
    assert!(
        out.path().join("config.json").is_file(),
        "side files are copied"
    );

    let src = SafeTensors::open(&fixture()).unwrap();
    let ckpt = MxCheckpoint::open(&out.path().join("model.safetensors")).unwrap();
    let name = "encoder.layer.0.attention.self.query.weight";
    let (want, _) = src.tensor_f32(name).unwrap();
    let CheckpointTensor::Packed(view) = ckpt.tensor(name).unwrap() else {
        panic!("not packed")
    };
    let got = view.dequantize();
    let num: f64 = want
        .iter()
        .zip(&got)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum();
    let den: f64 = want.iter().map(|a| f64::from(*a).powi(2)).sum();
    assert!(
        (num / den).sqrt() < 0.032,
        "mxfp8 error {}",
        (num / den).sqrt()
    );

    let again = run(&[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(run(&["--force"]).status.success());
}

#[test]
fn quantize_int8_writes_i8_weights_with_scales() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_favlo"))
        .arg("quantize")
        .arg(fixture())
        .arg(out.path())
        .args(["--format", "int8"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let st = SafeTensors::open(&out.path().join("model.safetensors")).unwrap();
    let name = "encoder.layer.0.attention.self.query.weight";
    let info = st.info(name).unwrap();
    assert_eq!(info.dtype, safetensors::Dtype::I8);
    // Dequantized rows stay within half a quantization step of the source.
    let (src, shape) = SafeTensors::open(&fixture())
        .unwrap()
        .tensor_f32(name)
        .unwrap();
    let (q, _) = st.tensor_f32(name).unwrap();
    let (scales, _) = st.tensor_f32(&format!("{name}_scale")).unwrap();
    let k = shape[1];
    for (r, scale) in scales.iter().enumerate() {
        for c in 0..k {
            let back = q[r * k + c] * scale;
            assert!(
                (back - src[r * k + c]).abs() <= scale * 0.5 + 1e-7,
                "row {r} col {c}"
            );
        }
    }
}
