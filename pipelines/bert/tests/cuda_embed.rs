//! The encoder on a CUDA GPU (`OpenOptions { device: Device::Cuda(0), .. }`) against the
//! CPU's exact-f32 path (itself checked against HF transformers and sentence-transformers
//! in `tiny_fixtures.rs` / `minilm.rs`), embedding by embedding:
//! - (a) a random-weight model with all-MiniLM-L6-v2's real config (vocab 30522, hidden
//!   384, 6 layers, 12 heads of 32, intermediate 1536, erf GELU, mean pooling + L2)
//!   written to a temp dir, 12 inputs of 2…256 tokens in one packed batch, and the same
//!   inputs one at a time;
//! - the tiny HF fixtures: `bert` (mean) through texts, `xlm-roberta` (CLS, position
//!   offset 2) through ids, and int8 (a written int8 checkpoint and load-time int8);
//! - (b) the real all-MiniLM-L6-v2 when `FAVLO_TEST_MINILM_DIR` is set (else a loud skip):
//!   the 64 committed sentences and the > 256-token text, also against the
//!   sentence-transformers vectors (≥ 0.9999, as the CPU is held to).
//!
//! Bounds, GPU vs CPU f32 per embedding: cosine ≥ 0.99999 and max |Δ| ≤ 1e-4 (unit
//! vectors; both paths are exact f32 and differ only in summation order: cuBLASLt's
//! blocking, the kernels' reductions). Both measures are printed. Without CUDA each test
//! prints a loud SKIPPED line and passes, unless `FAVLO_REQUIRE_CUDA=1`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use favlo_bert::tokenize::Encoded;
use favlo_bert::{BertEmbeddings, OpenOptions, WeightFormat, check_device, quantize_int8};
use favlo_formats::safetensors::SafeTensors;
use favlo_pipeline::{Embedding, EmbeddingsPipeline};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use safetensors::tensor::{Dtype, TensorView};

const COS_MIN: f64 = 0.99999;
const ABS_MAX: f64 = 1e-4;

/// True when the GPU is usable; otherwise prints why `what` did not run (or panics under
/// `FAVLO_REQUIRE_CUDA=1`).
fn gpu_or_skip(what: &str) -> bool {
    match check_device(Device::Cuda(0)) {
        Ok(()) => true,
        Err(e) => {
            if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("FAVLO_REQUIRE_CUDA=1 but {what} cannot run: {e}");
            }
            eprintln!("\n**** SKIPPED: {e}; {what} did not run ****\n");
            false
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn open(dir: &Path, format: WeightFormat, device: Device) -> BertEmbeddings {
    let ledger = Ledger::new(Device::Cpu, None);
    BertEmbeddings::open(
        dir,
        ledger,
        Owner::mint("cuda-embed-test"),
        OpenOptions { format, device },
    )
    .unwrap_or_else(|e| panic!("open {} on {device}: {e}", dir.display()))
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

fn max_abs(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).fold(0f64, |m, (&x, &y)| {
        m.max((f64::from(x) - f64::from(y)).abs())
    })
}

/// Compares GPU and CPU embeddings one by one; prints the worst cosine and |Δ|.
fn compare(what: &str, gpu: &[Embedding], cpu: &[Embedding]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: counts");
    let (mut min_cos, mut worst_abs) = (1f64, 0f64);
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.vector.len(), c.vector.len());
        assert_eq!(
            (g.tokens, g.truncated),
            (c.tokens, c.truncated),
            "{what} #{i}"
        );
        assert!(g.vector.iter().all(|v| v.is_finite()), "{what} #{i}: NaN");
        let (cos, abs) = (cosine(&g.vector, &c.vector), max_abs(&g.vector, &c.vector));
        assert!(
            cos >= COS_MIN && abs <= ABS_MAX,
            "{what} #{i} ({} tokens): cosine {cos:.9}, max |Δ| {abs:.3e}",
            g.tokens
        );
        min_cos = min_cos.min(cos);
        worst_abs = worst_abs.max(abs);
    }
    println!(
        "{what}: {} embeddings, GPU vs CPU f32: min cosine {min_cos:.9} (1 − cos = {:.1e}), max |Δ| {worst_abs:.2e}",
        gpu.len(),
        1.0 - min_cos
    );
}

/// Writes a random-weight checkpoint of all-MiniLM-L6-v2's config (mean pooling + L2,
/// max_seq_length 256) with the tiny fixture's tokenizer.
fn write_random_minilm(dir: &Path, seed: u64) {
    let (vocab, h, layers, heads, ff, positions) = (30522usize, 384, 6, 12, 1536, 512);
    let config = serde_json::json!({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": h, "intermediate_size": ff, "layer_norm_eps": 1e-12,
        "max_position_embeddings": positions, "num_attention_heads": heads,
        "num_hidden_layers": layers, "pad_token_id": 0, "position_embedding_type": "absolute",
        "type_vocab_size": 2, "vocab_size": vocab
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        serde_json::json!({"word_embedding_dimension": h, "pooling_mode_mean_tokens": true})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 256, "do_lower_case": false}"#,
    )
    .unwrap();
    std::fs::copy(
        fixture("tiny_bert").join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();

    let mut rng = StdRng::seed_from_u64(seed);
    let mut u = |n: usize, scale: f32, center: f32| -> Vec<f32> {
        (0..n)
            .map(|_| center + (rng.random_range(-1.0f32..1.0) + 0.01) * scale)
            .collect()
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![vocab, h],
            u(vocab * h, 0.1, 0.0),
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![positions, h],
            u(positions * h, 0.05, 0.0),
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, h],
            u(2 * h, 0.05, 0.0),
        ),
        (
            "embeddings.LayerNorm.weight".into(),
            vec![h],
            u(h, 0.2, 1.0),
        ),
        ("embeddings.LayerNorm.bias".into(), vec![h], u(h, 0.1, 0.0)),
    ];
    for l in 0..layers {
        let p = format!("encoder.layer.{l}");
        let lin =
            |name: String, n: usize, k: usize, u: &mut dyn FnMut(usize, f32, f32) -> Vec<f32>| {
                // Uniform with std ≈ 1/√k: activations keep their scale through the layer.
                let s = 1.7 / (k as f32).sqrt();
                vec![
                    (format!("{name}.weight"), vec![n, k], u(n * k, s, 0.0)),
                    (format!("{name}.bias"), vec![n], u(n, 0.1, 0.0)),
                ]
            };
        for part in ["query", "key", "value"] {
            tensors.extend(lin(format!("{p}.attention.self.{part}"), h, h, &mut u));
        }
        tensors.extend(lin(format!("{p}.attention.output.dense"), h, h, &mut u));
        tensors.extend(lin(format!("{p}.intermediate.dense"), ff, h, &mut u));
        tensors.extend(lin(format!("{p}.output.dense"), h, ff, &mut u));
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            tensors.push((format!("{p}.{norm}.weight"), vec![h], u(h, 0.2, 1.0)));
            tensors.push((format!("{p}.{norm}.bias"), vec![h], u(h, 0.1, 0.0)));
        }
    }
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: HashMap<String, TensorView<'_>> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// `[CLS] random ids [SEP]` of each length.
fn random_inputs(rng: &mut StdRng, lens: &[usize], vocab: u32) -> Vec<Encoded> {
    lens.iter()
        .map(|&len| {
            let mut ids: Vec<u32> = (0..len).map(|_| rng.random_range(3..vocab)).collect();
            if len >= 2 {
                ids[0] = 2.min(vocab - 1);
                ids[len - 1] = 3.min(vocab - 1);
            }
            Encoded {
                ids,
                truncated: false,
            }
        })
        .collect()
}

#[test]
fn random_minilm_config_gpu_matches_cpu() {
    if !gpu_or_skip("the random-weight MiniLM GPU test") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    write_random_minilm(tmp.path(), 7);
    let gpu = open(tmp.path(), WeightFormat::F32, Device::Cuda(0));
    let cpu = open(tmp.path(), WeightFormat::F32, Device::Cpu);
    assert_eq!(gpu.weights_kind(), "cuda-f32");
    assert_eq!(gpu.device(), Device::Cuda(0));
    let mut rng = StdRng::seed_from_u64(11);
    let lens = [2usize, 5, 17, 31, 32, 33, 64, 65, 100, 129, 200, 256];
    let inputs = random_inputs(&mut rng, &lens, 30522);
    let g = gpu.embed_encoded(&inputs, None).unwrap();
    let c = cpu.embed_encoded(&inputs, None).unwrap();
    compare("random MiniLM config, one packed batch", &g, &c);
    // One at a time: the same vectors as in the packed batch.
    let g1 = gpu.embed_encoded(&inputs, Some(1)).unwrap();
    compare("random MiniLM config, batch 1", &g1, &c);
    for (a, b) in g.iter().zip(&g1) {
        assert!(
            max_abs(&a.vector, &b.vector) <= 1e-6,
            "batch vs single on GPU"
        );
    }

    // Throughput on MiniLM-shaped work: 256 inputs of 8–60 tokens (the bench corpus's
    // range), batches of 32, GPU vs this machine's CPU default (AMX bf16 where present).
    let lens: Vec<usize> = (0..256).map(|_| rng.random_range(10..62)).collect();
    let work = random_inputs(&mut rng, &lens, 30522);
    let cpu_default = open(tmp.path(), WeightFormat::AsStored, Device::Cpu);
    let rate = |m: &BertEmbeddings| {
        m.embed_encoded(&work[..32], Some(32)).unwrap();
        let start = Instant::now();
        let mut reps = 0;
        while reps < 2 || start.elapsed().as_secs_f64() < 1.0 {
            m.embed_encoded(&work, Some(32)).unwrap();
            reps += 1;
        }
        (reps * work.len()) as f64 / start.elapsed().as_secs_f64()
    };
    let (rg, rc) = (rate(&gpu), rate(&cpu_default));
    println!(
        "throughput, batch 32, 8–60 tokens (tokenization excluded): GPU {rg:.0} embeddings/s; CPU {} ({} threads) {rc:.0} embeddings/s",
        cpu_default.weights_kind(),
        rayon::current_num_threads()
    );
}

#[test]
fn tiny_fixtures_gpu_matches_cpu() {
    if !gpu_or_skip("the tiny-fixture GPU test") {
        return;
    }
    // BERT, mean pooling, through texts (the tokenizer and truncation run as on the CPU).
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
    let gpu = open(&dir, WeightFormat::F32, Device::Cuda(0));
    let cpu = open(&dir, WeightFormat::F32, Device::Cpu);
    compare(
        "tiny bert (texts)",
        &gpu.embed_batch(&texts).unwrap(),
        &cpu.embed_batch(&texts).unwrap(),
    );

    // int8: a written int8 checkpoint and load-time int8, against the CPU's int8 kernels.
    let q = tempfile::tempdir().unwrap();
    quantize_int8(&dir, q.path()).unwrap();
    let gq = open(q.path(), WeightFormat::AsStored, Device::Cuda(0));
    let cq = open(q.path(), WeightFormat::AsStored, Device::Cpu);
    assert!(cq.is_int8() && !gq.is_int8());
    compare(
        "tiny bert, int8 checkpoint",
        &gq.embed_batch(&texts).unwrap(),
        &cq.embed_batch(&texts).unwrap(),
    );
    let gl = open(&dir, WeightFormat::Int8, Device::Cuda(0));
    let cl = open(&dir, WeightFormat::Int8, Device::Cpu);
    compare(
        "tiny bert, load-time int8",
        &gl.embed_batch(&texts).unwrap(),
        &cl.embed_batch(&texts).unwrap(),
    );

    // XLM-RoBERTa, CLS pooling, positions offset by padding_idx + 1: ids up to the full
    // 38-position table (the fixture has no tokenizer.json: the BERT one is borrowed to
    // open it; ids are given directly).
    let x = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
    ] {
        std::fs::copy(fixture("tiny_xlm_roberta").join(f), x.path().join(f)).unwrap();
    }
    std::fs::create_dir_all(x.path().join("1_Pooling")).unwrap();
    std::fs::copy(
        fixture("tiny_xlm_roberta").join("1_Pooling/config.json"),
        x.path().join("1_Pooling/config.json"),
    )
    .unwrap();
    std::fs::copy(dir.join("tokenizer.json"), x.path().join("tokenizer.json")).unwrap();
    let gpu = open(x.path(), WeightFormat::F32, Device::Cuda(0));
    let cpu = open(x.path(), WeightFormat::F32, Device::Cpu);
    let mut rng = StdRng::seed_from_u64(4);
    let inputs = random_inputs(&mut rng, &[2, 7, 20, 33, 38], 100);
    compare(
        "tiny xlm-roberta (CLS, ids)",
        &gpu.embed_encoded(&inputs, None).unwrap(),
        &cpu.embed_encoded(&inputs, None).unwrap(),
    );
}

#[test]
fn real_minilm_gpu_matches_cpu_and_sentence_transformers() {
    let Some(dir) = std::env::var_os("FAVLO_TEST_MINILM_DIR").map(PathBuf::from) else {
        eprintln!(
            "\n**** SKIPPED: real MiniLM GPU test; set FAVLO_TEST_MINILM_DIR to the all-MiniLM-L6-v2 folder ****\n"
        );
        return;
    };
    if !gpu_or_skip("the real MiniLM GPU test") {
        return;
    }
    let fixtures = fixture("");
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("minilm_refs.json")).unwrap())
            .unwrap();
    let sentences: Vec<&str> = refs["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let long = refs["long_text"].as_str().unwrap_or_default();
    let gpu = open(&dir, WeightFormat::F32, Device::Cuda(0));
    let cpu = open(&dir, WeightFormat::F32, Device::Cpu);
    let g = gpu.embed_batch(&sentences).unwrap();
    compare(
        "real MiniLM, 64 sentences",
        &g,
        &cpu.embed_batch(&sentences).unwrap(),
    );
    if !long.is_empty() {
        let gl = gpu.embed_batch(&[long]).unwrap();
        assert!(gl[0].truncated);
        compare(
            "real MiniLM, long text",
            &gl,
            &cpu.embed_batch(&[long]).unwrap(),
        );
    }
    // Against sentence-transformers, when the checkpoint is the f32 original (a bf16
    // conversion carried to a GPU machine is compared with the CPU only).
    let st = SafeTensors::open(&fixtures.join("minilm_refs.safetensors")).unwrap();
    let (want, _) = st.tensor_f32("embeddings").unwrap();
    let min_st = g
        .iter()
        .zip(want.chunks_exact(384))
        .map(|(e, w)| cosine(&e.vector, w))
        .fold(1f64, f64::min);
    println!("real MiniLM on the GPU vs sentence-transformers: min cosine {min_st:.9}");
    if std::env::var_os("FAVLO_TEST_MINILM_BF16").is_none() {
        assert!(min_st >= 0.9999, "GPU vs sentence-transformers: {min_st}");
    }
}
