//! The int8 checkpoint format on the tiny random BERT (tests/fixtures/tiny_bert): the version-2
//! writer's metadata and shapes, and that an int8 model (group-wise file, the old per-row file,
//! load-time quantization) computes the same hidden states as the f32 model run on the
//! dequantized weights (`scale · q`, widened by this test in f64), relative error ≤ 1e-5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_bert::quantize::{is_quantized_linear, meta};
use favlo_bert::{Encoder, WeightFormat, quantize_int8, quantize_int8_grouped};
use favlo_formats::safetensors::SafeTensors;
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use safetensors::tensor::{Dtype, TensorView};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_bert")
}

fn encoder(dir: &Path, format: WeightFormat) -> Encoder {
    let ledger: Arc<Ledger> = Ledger::new(Device::Cpu, None);
    Encoder::open(dir, ledger, Owner::mint("int8-test"), format).unwrap()
}

fn hidden(enc: &Encoder) -> Vec<f32> {
    let seqs: [&[u32]; 3] = [
        &[2, 17, 33, 45, 9, 3],
        &[2, 5, 70, 11, 12, 13, 14, 61, 3],
        &[2, 40, 3],
    ];
    enc.forward(&seqs).unwrap().data.to_vec()
}

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    err / scale.max(1e-12)
}

type Tensors = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

fn write(tensors: &Tensors, meta: HashMap<String, String>, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "tokenizer.json", "modules.json"] {
        std::fs::copy(tiny().join(f), dir.join(f)).unwrap();
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::tensor::serialize_to_file(views, Some(meta), &dir.join("model.safetensors"))
        .unwrap();
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// An f32 checkpoint whose linears are the int8 file's `scale · q` (group from the metadata,
/// or one group per row for `[n]` scales), computed here in f64.
fn dequantized_copy(int8_dir: &Path, out: &Path) {
    let st = SafeTensors::open(&int8_dir.join("model.safetensors")).unwrap();
    let group_meta: Option<usize> = st
        .file_metadata()
        .get(meta::GROUP_SIZE_KEY)
        .map(|v| v.parse().unwrap());
    let mut tensors: Tensors = Vec::new();
    for name in st.names() {
        if name.ends_with("_scale") {
            continue;
        }
        let (data, shape) = st.tensor_f32(name).unwrap();
        let scale_name = format!("{name}_scale");
        let data = if st.info(&scale_name).is_some() {
            let (scales, sshape) = st.tensor_f32(&scale_name).unwrap();
            let (n, k) = (shape[0], shape[1]);
            let group = if sshape.len() == 1 {
                k
            } else {
                group_meta.unwrap().min(k)
            };
            assert_eq!(scales.len(), n * k.div_ceil(group));
            (0..n * k)
                .map(|i| {
                    let (j, c) = (i / k, i % k);
                    let s = f64::from(scales[j * k.div_ceil(group) + c / group]);
                    (f64::from(data[i]) * s) as f32
                })
                .collect()
        } else {
            data
        };
        tensors.push((name.to_string(), Dtype::F32, shape, f32_bytes(&data)));
    }
    write(&tensors, HashMap::new(), out);
}

#[test]
fn writer_records_version_2_group_scales() {
    let tmp = tempfile::tempdir().unwrap();
    let report = quantize_int8(&tiny(), tmp.path()).unwrap();
    assert_eq!(report.group_size, 64);
    let st = SafeTensors::open(&report.checkpoint).unwrap();
    let md = st.file_metadata();
    assert_eq!(md.get(meta::QUANTIZATION_KEY), Some(&"int8-group"));
    assert_eq!(md.get(meta::GROUP_SIZE_KEY), Some(&"64"));
    assert_eq!(md.get(meta::VERSION_KEY), Some(&"2"));
    // The tiny model's linears are narrower than 64: one group each, shape [n, 1].
    let info = st
        .info("encoder.layer.0.intermediate.dense.weight_scale")
        .unwrap();
    assert_eq!(info.shape, vec![64, 1]);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["favlo_quantization"]["version"], 2);
    assert_eq!(cfg["favlo_quantization"]["group_size"], 64);

    let small = tempfile::tempdir().unwrap();
    let r = quantize_int8_grouped(&tiny(), small.path(), 8).unwrap();
    let st = SafeTensors::open(&r.checkpoint).unwrap();
    let info = st
        .info("encoder.layer.1.output.dense.weight_scale")
        .unwrap();
    assert_eq!(info.shape, vec![32, 8]); // k = 64 in groups of 8
}

#[test]
fn group_file_equals_f32_on_dequantized_weights() {
    for group in [64, 8, 12] {
        let q = tempfile::tempdir().unwrap();
        quantize_int8_grouped(&tiny(), q.path(), group).unwrap();
        let deq = tempfile::tempdir().unwrap();
        dequantized_copy(q.path(), deq.path());
        let int8 = encoder(q.path(), WeightFormat::AsStored);
        assert!(int8.is_int8());
        let got = hidden(&int8);
        let want = hidden(&encoder(deq.path(), WeightFormat::F32));
        let e = rel_err(&got, &want);
        println!("group {group}: int8 file vs f32 on dequantized weights, rel err {e:.2e}");
        assert!(e <= 1e-5, "group {group}: {e}");
    }
    // Load-time quantization is the same as the written file.
    let q = tempfile::tempdir().unwrap();
    quantize_int8(&tiny(), q.path()).unwrap();
    let a = hidden(&encoder(q.path(), WeightFormat::AsStored));
    let b = hidden(&encoder(&tiny(), WeightFormat::Int8));
    assert!(rel_err(&a, &b) <= 1e-6);
}

#[test]
fn version_1_per_row_file_still_loads() {
    // Write the old format independently: per-row amax/127 scales as F32 [n], old metadata.
    let st = SafeTensors::open(&tiny().join("model.safetensors")).unwrap();
    let mut tensors: Tensors = Vec::new();
    for name in st.names() {
        let (data, shape) = st.tensor_f32(name).unwrap();
        if is_quantized_linear(name) {
            let (n, k) = (shape[0], shape[1]);
            let mut q = Vec::with_capacity(n * k);
            let mut scales = Vec::with_capacity(n);
            for row in data.chunks_exact(k) {
                let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                let s = amax / 127.0;
                scales.push(s);
                q.extend(row.iter().map(|&v| (v / s).round() as i8 as u8));
            }
            tensors.push((name.to_string(), Dtype::I8, shape, q));
            tensors.push((
                format!("{name}_scale"),
                Dtype::F32,
                vec![n],
                f32_bytes(&scales),
            ));
        } else {
            tensors.push((name.to_string(), Dtype::F32, shape, f32_bytes(&data)));
        }
    }
    let old = tempfile::tempdir().unwrap();
    let md = HashMap::from([(
        meta::QUANTIZATION_KEY.to_string(),
        "int8-per-channel".to_string(),
    )]);
    write(&tensors, md, old.path());
    let deq = tempfile::tempdir().unwrap();
    dequantized_copy(old.path(), deq.path());
    let int8 = encoder(old.path(), WeightFormat::AsStored);
    assert!(int8.is_int8());
    let e = rel_err(
        &hidden(&int8),
        &hidden(&encoder(deq.path(), WeightFormat::F32)),
    );
    println!("version-1 per-row file vs f32 on dequantized weights, rel err {e:.2e}");
    assert!(e <= 1e-5, "{e}");
}
