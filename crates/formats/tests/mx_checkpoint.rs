//! Favlo MX checkpoint round trip: write a random f32 checkpoint, quantize it,
//! read it back, and check every tensor against the source values (packed
//! matrices within the MX error bounds measured in `favlo-mx`, 16-bit tensors
//! within bf16 rounding), plus the refusal of files that are not MX checkpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use favlo_formats::mx_checkpoint::{
    self, CheckpointTensor, MxCheckpoint, StoreAs, is_linear_matrix,
};
use favlo_formats::safetensors::SafeTensors;
use favlo_mx::ElementFormat;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    // Box-Muller over a splitmix64 stream: deterministic, non-zero values.
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next().max(1e-12), next());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let den: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn quantize_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src.safetensors");
    let tensors: Vec<(&str, Vec<usize>, Vec<f32>)> = vec![
        (
            "model.layers.0.self_attn.q_proj.weight",
            vec![64, 96],
            gaussian(64 * 96, 1),
        ),
        (
            "model.layers.0.mlp.down_proj.weight",
            vec![48, 200],
            gaussian(48 * 200, 2),
        ),
        (
            "model.layers.0.input_layernorm.weight",
            vec![96],
            gaussian(96, 3),
        ),
        ("model.embed_tokens.weight", vec![10, 96], gaussian(960, 4)),
        (
            "model.layers.0.self_attn.q_proj.bias",
            vec![64],
            gaussian(64, 5),
        ),
    ];
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| (*n, TensorView::new(Dtype::F32, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &src_path).unwrap();

    let input = SafeTensors::open(&src_path).unwrap();
    let out_path = dir.path().join("mx.safetensors");
    let mut seen = 0;
    let reports = mx_checkpoint::write(
        &input,
        &out_path,
        |name, shape, _| {
            if !is_linear_matrix(name, shape) {
                StoreAs::Bf16
            } else if name.contains("mlp") {
                StoreAs::Mx(ElementFormat::Fp4E2M1, favlo_mx::ScaleRule::Ceil)
            } else {
                StoreAs::Mx(ElementFormat::Fp8E4M3, favlo_mx::ScaleRule::Ceil)
            }
        },
        |done, total, _| {
            seen = done;
            assert_eq!(total, 5);
        },
    )
    .unwrap();
    assert_eq!(seen, 5);
    let by_name: HashMap<&str, _> = reports.iter().map(|r| (r.name.as_str(), r)).collect();
    assert_eq!(
        by_name["model.layers.0.self_attn.q_proj.weight"].stored_as,
        "mxfp8"
    );
    assert_eq!(
        by_name["model.layers.0.mlp.down_proj.weight"].stored_as,
        "mxfp4"
    );
    assert_eq!(by_name["model.embed_tokens.weight"].stored_as, "bf16");

    let ckpt = MxCheckpoint::open(&out_path).unwrap();
    for (name, shape, src) in &tensors {
        let report = by_name[name];
        match ckpt.tensor(name).unwrap() {
            CheckpointTensor::Packed(view) => {
                assert_eq!([view.layout.rows, view.layout.cols], shape[..]);
                let back = view.dequantize();
                let err = rel(src, &back);
                // The report's error is recomputed independently here.
                assert!(
                    (err - report.rel_error).abs() < 1e-9,
                    "{name}: {err} vs {}",
                    report.rel_error
                );
                let bound = if report.stored_as == "mxfp4" {
                    0.125
                } else {
                    0.032
                };
                assert!(
                    err < bound && err > 0.0,
                    "{name}: rel error {err} (bound {bound})"
                );
            }
            CheckpointTensor::Dense(back, s) => {
                assert_eq!(&s, shape);
                let err = rel(src, &back);
                assert!(err < 2f64.powi(-8), "{name}: bf16 rel error {err}");
            }
        }
    }
    // A plain safetensors file is not an MX checkpoint.
    assert!(matches!(
        MxCheckpoint::open(&src_path),
        Err(mx_checkpoint::MxCheckpointError::NotMxCheckpoint { .. })
    ));
}

#[test]
fn linear_matrix_rule() {
    assert!(is_linear_matrix(
        "model.layers.3.mlp.gate_proj.weight",
        &[10, 20]
    ));
    assert!(is_linear_matrix("lm_head.weight", &[10, 20]));
    assert!(!is_linear_matrix("model.embed_tokens.weight", &[10, 20]));
    assert!(!is_linear_matrix("model.norm.weight", &[20]));
    assert!(!is_linear_matrix(
        "encoder.layer.0.attention.output.LayerNorm.weight",
        &[20]
    ));
    assert!(!is_linear_matrix(
        "model.layers.0.self_attn.q_proj.bias",
        &[20]
    ));
    assert_eq!(
        StoreAs::parse("mxfp4"),
        Some(StoreAs::Mx(
            ElementFormat::Fp4E2M1,
            favlo_mx::ScaleRule::Ceil
        ))
    );
    assert_eq!(
        StoreAs::parse("MXFP8:ocp"),
        Some(StoreAs::Mx(
            ElementFormat::Fp8E4M3,
            favlo_mx::ScaleRule::Ocp
        ))
    );
    assert_eq!(StoreAs::parse("int3"), None);
    assert_eq!(StoreAs::parse("mxfp8:floor"), None);
}
