//! favlo-bert against PyTorch `transformers` on tiny random BERT and XLM-RoBERTa checkpoints
//! (tools/fixtures/bert_fixtures.py): last hidden states and pooled vectors within relative
//! error 1e-4 (max abs error over max abs reference value) for exact f32 and AMX bf16x3 (plain
//! AMX bf16: 5e-3; off AMX the runtime's fallback runs the packed weights), the full pipeline (tokenizer with
//! MiniLM-style padding configured, truncation, mean pooling, normalisation) on texts, and the
//! int8 writer/loader.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_bert::pooling::pool;
use favlo_bert::{
    BertEmbeddings, Encoder, OpenOptions, Pooling, Precision, SentenceConfig, WeightFormat,
    quantize_int8,
};
use favlo_formats::safetensors::SafeTensors;
use favlo_pipeline::{EmbeddingsPipeline, ErrorKind, PipelineError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    err / scale.max(1e-12)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

struct Reference {
    ids: Vec<Vec<u32>>,
    hidden: Vec<Vec<f32>>,
    pooled: Vec<(Pooling, Vec<Vec<f32>>)>,
}

fn load_reference(dir: &Path) -> Reference {
    let st = SafeTensors::open(&dir.join("reference.safetensors")).unwrap();
    let (ids, ids_shape) = st.tensor_f32("input_ids").unwrap();
    let (lengths, _) = st.tensor_f32("lengths").unwrap();
    let (hidden, h_shape) = st.tensor_f32("last_hidden_state").unwrap();
    let (b, width, h) = (ids_shape[0], ids_shape[1], h_shape[2]);
    let mut out = Reference {
        ids: Vec::new(),
        hidden: Vec::new(),
        pooled: Vec::new(),
    };
    for i in 0..b {
        let n = lengths[i] as usize;
        out.ids.push(
            ids[i * width..i * width + n]
                .iter()
                .map(|&v| v as u32)
                .collect(),
        );
        out.hidden
            .push(hidden[i * width * h..(i * width + n) * h].to_vec());
    }
    for (name, mode) in [
        ("pooled_mean", Pooling::Mean),
        ("pooled_cls", Pooling::Cls),
        ("pooled_last", Pooling::LastToken),
        ("pooled_max", Pooling::Max),
    ] {
        let (v, _) = st.tensor_f32(name).unwrap();
        out.pooled
            .push((mode, v.chunks(h).map(<[f32]>::to_vec).collect()));
    }
    out
}

/// Exact f32 and AMX bf16x3 at the 1e-4; plain AMX bf16 (8-bit mantissas on both
/// operands of every product) at 5e-3 (measured ≤ 1.2e-3).
const FORMATS: [(WeightFormat, f64); 3] = [
    (WeightFormat::F32, 1e-4),
    (WeightFormat::Amx(Precision::Bf16x3), 1e-4),
    (WeightFormat::Amx(Precision::Bf16), 5e-3),
];

fn check_hidden_and_pooling(name: &str) {
    for (format, tol) in FORMATS {
        check_format(name, format, tol);
    }
}

fn check_format(name: &str, format: WeightFormat, tol: f64) {
    let dir = fixture(name);
    let reference = load_reference(&dir);
    let ledger = Ledger::new(Device::Cpu, None);
    let enc = Encoder::open(&dir, Arc::clone(&ledger), Owner::mint("test"), format).unwrap();
    let seqs: Vec<&[u32]> = reference.ids.iter().map(Vec::as_slice).collect();
    let hidden = enc.forward(&seqs).unwrap();
    let h = hidden.hidden_size;
    for (i, want) in reference.hidden.iter().enumerate() {
        let err = rel_err(hidden.sequence(i), want);
        println!(
            "{name} {format:?} seq {i} ({} tokens): hidden rel err {err:.2e}",
            seqs[i].len()
        );
        assert!(
            err <= tol,
            "{name} {format:?} seq {i}: hidden rel err {err}"
        );
        for (mode, vectors) in &reference.pooled {
            let err = rel_err(&pool(hidden.sequence(i), h, *mode), &vectors[i]);
            assert!(
                err <= tol,
                "{name} {format:?} seq {i} {mode:?}: pooled rel err {err}"
            );
        }
    }
    // Batch composition must not change a sequence's result (packing has no cross-talk).
    let alone = enc.forward(&seqs[1..2]).unwrap();
    assert!(rel_err(alone.sequence(0), hidden.sequence(1)) <= 1e-6);
}

#[test]
fn tiny_bert_matches_transformers() {
    check_hidden_and_pooling("tiny_bert");
}

#[test]
fn tiny_xlm_roberta_matches_transformers() {
    // Includes a sequence that uses the whole position table (offset padding_idx + 1 = 2).
    check_hidden_and_pooling("tiny_xlm_roberta");
    let s = SentenceConfig::load(&fixture("tiny_xlm_roberta")).unwrap();
    assert_eq!(s.pooling, Pooling::Cls);
    assert!(s.normalize);
}

fn open(dir: &Path, format: WeightFormat) -> BertEmbeddings {
    let ledger = Ledger::new(Device::Cpu, None);
    BertEmbeddings::open(
        dir,
        ledger,
        Owner::mint("test"),
        OpenOptions {
            format,
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn pipeline_tokenizes_truncates_pools_and_normalizes() {
    let dir = fixture("tiny_bert");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let texts: Vec<&str> = reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let model = open(&dir, WeightFormat::F32);
    assert_eq!(model.max_tokens(), 12); // sentence_bert_config, not the tokenizer's 16
    assert_eq!(model.dimensions(), 32);
    for (i, text) in texts.iter().enumerate() {
        let ids: Vec<u32> = reference["ids"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(model.tokenize(text).unwrap().ids, ids, "ids of {text:?}");
    }
    let got = model.embed_batch(&texts).unwrap();
    for (i, e) in got.iter().enumerate() {
        let want: Vec<f32> = reference["embeddings"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let err = rel_err(&e.vector, &want);
        assert!(err <= 1e-4, "text {i}: rel err {err}");
        assert_eq!(e.tokens, reference["ids"][i].as_array().unwrap().len());
        assert_eq!(e.truncated, reference["truncated"][i].as_bool().unwrap());
        let norm: f64 = e
            .vector
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
    // One at a time gives the same vectors as the sorted, packed batch.
    let single = model.embed_batch(&texts[4..5]).unwrap();
    assert!(rel_err(&single[0].vector, &got[4].vector) <= 1e-6);
}

#[test]
fn blank_input_is_invalid_request_on_input() {
    let model = open(&fixture("tiny_bert"), WeightFormat::AsStored);
    for bad in [&["ok", ""][..], &["   \n"][..]] {
        match model.embed_batch(bad) {
            Err(e @ PipelineError::InvalidRequest { .. }) => {
                assert_eq!(e.kind(), ErrorKind::InvalidRequest);
                assert_eq!(e.to_string(), "input must be a string");
                let PipelineError::InvalidRequest { param, .. } = e else {
                    unreachable!()
                };
                assert_eq!(param.as_deref(), Some("input"));
            }
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }
}

#[test]
fn int8_writer_round_trips_and_stays_close() {
    let dir = fixture("tiny_bert");
    let tmp = tempfile::tempdir().unwrap();
    let report = quantize_int8(&dir, tmp.path()).unwrap();
    assert_eq!(report.quantized, 2 * 6);
    assert!(tmp.path().join("tokenizer.json").is_file());
    assert!(tmp.path().join("1_Pooling/config.json").is_file());
    let from_file = open(tmp.path(), WeightFormat::AsStored);
    assert!(from_file.is_int8());
    let on_the_fly = open(&dir, WeightFormat::Int8);
    let f32_model = open(&dir, WeightFormat::F32);
    let texts = [
        "Hello world!",
        "The quick brown fox jumps over the lazy dog.",
        "Open the window",
    ];
    let a = from_file.embed_batch(&texts).unwrap();
    let b = on_the_fly.embed_batch(&texts).unwrap();
    let c = f32_model.embed_batch(&texts).unwrap();
    for i in 0..texts.len() {
        assert!(
            rel_err(&a[i].vector, &b[i].vector) <= 1e-6,
            "writer and load-time int8 differ"
        );
        let cos = cosine(&a[i].vector, &c[i].vector);
        println!("tiny int8 vs f32 cosine {cos:.6}");
        assert!(cos >= 0.999, "int8 vs f32 cosine {cos}");
    }
}
