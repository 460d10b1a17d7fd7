//! The two default chat models on CUDA against the CPU path with the same MX weights
//! (feature `cuda`; `cargo test -p favlo-llama --features cuda --test cuda_chat`).
//!
//! SmolLM2-135M-Instruct (`FAVLO_TEST_SMOLLM2_GGUF`) and Qwen2.5-Coder-0.5B-Instruct
//! (`FAVLO_TEST_QWEN25_GGUF`), each opened twice from the same GGUF with MXFP8 weights
//! (the CUDA default): on the CPU (f32 KV cache, f32 activations) and on cuda:0. On the
//! 5 chat prompts of the llama.cpp agreement fixtures (`tests/fixtures/*_refs.json`):
//! - the prompt's last-token logits: max |gpu − cpu| / max |cpu| ≤ 1e-4 with an f32
//!   device KV cache and ≤ 3e-3 with the default f16 one (the device rounds x to ~22
//!   bits per 32-value block for the tensor cores and sums in another order; f16 keys
//!   and values round each cached value to 11 bits). Measured on an H200 (2026-11-30):
//!   f32 KV ≤ 2.0e-6 (SmolLM2) / 7.9e-7 (Qwen2.5), f16 KV ≤ 4.5e-4 / 6.0e-4;
//! - free-running greedy 32 tokens: the device's equal the CPU's exactly on ≥ 4 of the
//!   5 prompts (the agreement rule of the llama.cpp tests; a near-tie may flip;
//!   measured 5/5 on both models with both caches);
//! - one chat through `LanguagePipeline::complete` on the device gives the greedy text;
//! - a sampled chat (temperature 1, top-p 0.9, seeded) picks its tokens with the device
//!   sampler and gives the text the host sampler gives on the same model and seed;
//! - the chunked batched prefill (`forward(prompt, .., all = false)`) against the token
//!   loop over the decode graph (`all = true`) on the same device model: the prompt's
//!   last logits, the logits of one decode step after it, and a prompt prefilled in two
//!   calls (n_past > 0), on the 5 prompts and one 301-token prompt (the tests open with
//!   128-token chunks: three, the last ragged): max |Δ| / max |logit| ≤ 1e-4 (f32 KV) / 1e-3 (f16 KV); measured on
//!   an H200 (2026-11-30, SmolLM2): ≤ 1.2e-6 / ≤ 3.1e-4;
//! - four sequences decoded together (`decode_batch`: the bias + RoPE store over heads
//!   of 64, the GQA groups of 3 and 7): the first 4 prompts, one per sequence, then 16
//!   batched steps fed the CPU's greedy tokens, one sequence leaving after 8; every
//!   step's logits against the CPU's ≤ 1e-4 (f32 KV) / 3e-3 (f16 KV), the same argmax;
//! - four chats through `LanguagePipeline::serve_chats` on a 3-sequence opening
//!   (greedy, different prompts and `max_tokens`, one with a stop string; three start
//!   together, the fourth arrives mid-way and joins when a sequence frees): each text,
//!   finish reason and token count equal the same request's `complete` alone on a
//!   1-sequence opening, and each sink received its own text.
//!
//! Skips loudly (and passes) without the GGUF variables or without CUDA;
//! `FAVLO_REQUIRE_CUDA=1` turns a missing GPU into a failure.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{cuda_ok, fixture_prompts, open_on, rel};
use favlo_llama::LlamaRuntime;
use favlo_runtime::device::Device;

const CASES: usize = 5;
const STEPS: usize = 32;

fn model_path(env: &str) -> Option<PathBuf> {
    let p = std::env::var_os(env).map(PathBuf::from);
    if p.is_none() {
        eprintln!(
            "\n!!!!! SKIPPED: set {env}=/path/model.gguf (favlo pull) to run the CUDA chat test !!!!!\n"
        );
    }
    p
}

/// The fixture prompts' token ids.
fn prompts(refs: &str) -> Vec<Vec<u32>> {
    fixture_prompts(refs, CASES)
}

/// Prompt logits, then `STEPS` pure argmax tokens (no stop tokens).
fn greedy(rt: &mut LlamaRuntime, prompt: &[u32]) -> (Vec<f32>, Vec<u32>) {
    let v = rt.config().vocab_size;
    let m = rt.model();
    let mut logits = vec![0.0; v];
    m.forward(prompt, 0, &mut logits, false).unwrap();
    let first = logits.clone();
    let mut out = Vec::new();
    for i in 0..STEPS {
        let t = favlo_llama::sampler::argmax(&logits) as u32;
        out.push(t);
        m.forward(&[t], prompt.len() + i, &mut logits, false)
            .unwrap();
    }
    (first, out)
}

fn compare(env: &str, refs: &str) {
    let Some(path) = model_path(env) else { return };
    if !cuda_ok("the CUDA chat test") {
        return;
    }
    let prompts = prompts(refs);
    let mut cpu = open_on(&path, Device::Cpu, false);
    let want: Vec<(Vec<f32>, Vec<u32>)> = prompts.iter().map(|p| greedy(&mut cpu, p)).collect();
    drop(cpu);
    for (kv_f16, tol) in [(false, 1e-4f32), (true, 3e-3)] {
        let t0 = std::time::Instant::now();
        let mut gpu = open_on(&path, Device::Cuda(0), kv_f16);
        eprintln!(
            "{env}: opened on {} (KV {}) in {:.2} s, context {}",
            gpu.model().device_name(),
            if kv_f16 { "f16" } else { "f32" },
            t0.elapsed().as_secs_f64(),
            gpu.model().capacity()
        );
        let mut exact = 0;
        for (i, (p, (wl, wt))) in prompts.iter().zip(&want).enumerate() {
            let (gl, gt) = greedy(&mut gpu, p);
            let max = wl.iter().fold(0f32, |a, b| a.max(b.abs()));
            let err = gl
                .iter()
                .zip(wl)
                .fold(0f32, |a, (g, w)| a.max((g - w).abs()));
            assert!(gl.iter().all(|x| x.is_finite()), "non-finite logits");
            let same = gt == *wt;
            let first_diff = gt.iter().zip(wt).position(|(a, b)| a != b);
            exact += usize::from(same);
            eprintln!(
                "{env} KV f16 {kv_f16} prompt {i} ({} ids): logits max abs err {err:.4} (max |logit| {max:.2}, rel {:.2e}); greedy {STEPS} equal: {same} (first difference at {first_diff:?})",
                p.len(),
                err / max
            );
            assert!(
                err <= tol * max,
                "prompt {i}: logits rel err {} > {tol}",
                err / max
            );
        }
        eprintln!(
            "{env} KV f16 {kv_f16}: {exact}/{CASES} prompts greedy-equal over {STEPS} tokens"
        );
        assert!(exact >= 4, "{exact}/{CASES} prompts agree");
    }
}

#[test]
fn smollm2_cuda_matches_cpu() {
    compare("FAVLO_TEST_SMOLLM2_GGUF", "smollm2_refs.json");
}

#[test]
fn qwen25_cuda_matches_cpu() {
    compare("FAVLO_TEST_QWEN25_GGUF", "qwen25_refs.json");
}

/// Batched chunk prefill (and the decode step after it) against the token loop.
fn prefill_matches_token_loop(env: &str, refs: &str) {
    let Some(path) = model_path(env) else { return };
    if !cuda_ok("the CUDA chat test") {
        return;
    }
    let mut cases = prompts(refs);
    let mut long: Vec<u32> = Vec::new();
    while long.len() < 301 {
        for p in &cases {
            long.extend_from_slice(p);
        }
    }
    long.truncate(301);
    cases.push(long);
    for (kv_f16, tol) in [(false, 1e-4f32), (true, 1e-3)] {
        let mut gpu = open_on(&path, Device::Cuda(0), kv_f16);
        let v = gpu.config().vocab_size;
        let m = gpu.model();
        let mut worst = 0f32;
        for (ci, p) in cases.iter().enumerate() {
            let n = p.len();
            let mut all = vec![0.0; n * v];
            let t0 = std::time::Instant::now();
            m.forward(p, 0, &mut all, true).unwrap();
            let t_loop = t0.elapsed();
            let want = all[(n - 1) * v..].to_vec();
            let next = favlo_llama::sampler::argmax(&want) as u32;
            let mut want_dec = vec![0.0; v];
            m.forward(&[next], n, &mut want_dec, false).unwrap();
            let mut got = vec![0.0; v];
            let t1 = std::time::Instant::now();
            m.forward(p, 0, &mut got, false).unwrap();
            let t_batch = t1.elapsed();
            let mut got_dec = vec![0.0; v];
            m.forward(&[next], n, &mut got_dec, false).unwrap();
            let k = n / 3;
            let mut split = vec![0.0; v];
            m.forward(&p[..k], 0, &mut split, false).unwrap();
            m.forward(&p[k..], k, &mut split, false).unwrap();
            let (e0, e1, e2) = (
                rel(&got, &want),
                rel(&got_dec, &want_dec),
                rel(&split, &want),
            );
            eprintln!(
                "{env} KV f16 {kv_f16} case {ci} ({n} ids): prefill {e0:.2e}, decode after it {e1:.2e}, split at {k} {e2:.2e} (token loop {:.1} ms, batched {:.1} ms)",
                t_loop.as_secs_f64() * 1e3,
                t_batch.as_secs_f64() * 1e3
            );
            worst = worst.max(e0).max(e1).max(e2);
        }
        assert!(worst <= tol, "KV f16 {kv_f16}: {worst:.2e} > {tol}");
    }
}

#[test]
fn smollm2_cuda_prefill_matches_token_loop() {
    prefill_matches_token_loop("FAVLO_TEST_SMOLLM2_GGUF", "smollm2_refs.json");
}

#[test]
fn qwen25_cuda_prefill_matches_token_loop() {
    prefill_matches_token_loop("FAVLO_TEST_QWEN25_GGUF", "qwen25_refs.json");
}

/// SmolLM2 opened on cuda:0 (f32 KV cache), or `None` after saying why the test skips.
fn smollm2_on_cuda() -> Option<LlamaRuntime> {
    let path = model_path("FAVLO_TEST_SMOLLM2_GGUF")?;
    if !cuda_ok("the CUDA chat test") {
        return None;
    }
    Some(open_on(&path, Device::Cuda(0), true))
}

/// The `LanguagePipeline` seam runs unchanged on the device model: a greedy chat's text
/// is the decoded greedy tokens of the device's own forward loop.
#[test]
fn smollm2_cuda_complete_is_the_greedy_text() {
    use favlo_pipeline::StopFlag;
    use favlo_pipeline::{ChatMessage, CollectSink, CompletionRequest, LanguagePipeline, Role};
    let Some(mut rt) = smollm2_on_cuda() else {
        return;
    };
    let mut req = CompletionRequest::new(vec![ChatMessage::new(
        Role::User,
        "What is the capital of France?",
    )]);
    req.sampling.temperature = 0.0;
    req.max_tokens = Some(12);
    let ids = rt.prompt_ids(&req.messages, None).unwrap();
    let (_, greedy_ids) = greedy(&mut rt, &ids);
    let mut sink = CollectSink::default();
    let out = rt.complete(&req, &mut sink, &StopFlag::new()).unwrap();
    let tok = rt.tokenizer().unwrap();
    let n = out.completion_tokens;
    assert!(n > 0 && n <= 12);
    assert_eq!(out.text, tok.decode(&greedy_ids[..n], false).unwrap());
    assert_eq!(sink.text, out.text);
    eprintln!("cuda complete: {:?}", out.text);
}

/// A sampled chat (temperature 1, top-p 0.9, seeded) picks its tokens on the device
/// (the request has no penalties, logprobs or grammar) and gives the text the host
/// sampler gives on the same device model with the same seed (the request with
/// `logprobs`, which copies the logits back and samples on the host): the device rule
/// is the host's, fed the host's draw, so only a draw within ~1e-6 of a boundary could
/// differ, on 3 seeds × 2 prompts.
#[test]
fn smollm2_cuda_sampled_chat_matches_the_host_sampler() {
    use favlo_pipeline::StopFlag;
    use favlo_pipeline::{ChatMessage, CollectSink, CompletionRequest, LanguagePipeline, Role};
    let Some(mut rt) = smollm2_on_cuda() else {
        return;
    };
    let (mut same, mut runs) = (0, 0);
    for prompt in ["Tell me a story about a lighthouse.", "List three fruits."] {
        for seed in [1u64, 2, 3] {
            let mut req = CompletionRequest::new(vec![ChatMessage::new(Role::User, prompt)]);
            req.sampling.temperature = 1.0;
            req.sampling.top_p = 0.9;
            req.sampling.seed = Some(seed);
            req.max_tokens = Some(24);
            let dev = rt
                .complete(&req, &mut CollectSink::default(), &StopFlag::new())
                .unwrap();
            req.logprobs = true;
            let host = rt
                .complete(&req, &mut CollectSink::default(), &StopFlag::new())
                .unwrap();
            assert!(dev.completion_tokens > 0);
            runs += 1;
            if dev.text == host.text {
                same += 1;
            } else {
                eprintln!("seed {seed}: device {:?} vs host {:?}", dev.text, host.text);
            }
        }
    }
    eprintln!("sampled chat: device sampler = host sampler on {same}/{runs}");
    assert_eq!(same, runs);
}

/// Four sequences decoded together against the CPU's logits, step by step.
fn batched_decode_matches_cpu(env: &str, refs: &str) {
    use common::open_seqs;
    use favlo_llama::WeightFormat;
    let Some(path) = model_path(env) else { return };
    if !cuda_ok("the CUDA batched decode test") {
        return;
    }
    const N: usize = 4;
    const BATCH_STEPS: usize = 16;
    let prompts = prompts(refs);
    let mut cpu = open_on(&path, Device::Cpu, false);
    let v = cpu.config().vocab_size;
    // Per prompt: logits after it and after each greedy token, and the tokens.
    let want: Vec<(Vec<Vec<f32>>, Vec<u32>)> = prompts[..N]
        .iter()
        .map(|p| {
            let m = cpu.model();
            let mut l = vec![0.0; v];
            m.forward(p, 0, &mut l, false).unwrap();
            let (mut trace, mut toks) = (vec![l.clone()], Vec::new());
            for i in 0..BATCH_STEPS {
                let t = favlo_llama::sampler::argmax(&l) as u32;
                toks.push(t);
                m.forward(&[t], p.len() + i, &mut l, false).unwrap();
                trace.push(l.clone());
            }
            (trace, toks)
        })
        .collect();
    drop(cpu);
    for (kv_f16, tol) in [(false, 1e-4f32), (true, 3e-3)] {
        let mut gpu = open_seqs(&path, Device::Cuda(0), WeightFormat::Mxfp8, kv_f16, N);
        let m = gpu.model();
        let mut worst = 0f32;
        for (s, p) in prompts[..N].iter().enumerate() {
            let mut got = vec![0.0; v];
            m.forward_seq(s, p, 0, &mut got).unwrap();
            let e = rel(&got, &want[s].0[0]);
            worst = worst.max(e);
            assert!(e <= tol, "{env} sequence {s} prompt: {e:.2e}");
        }
        for j in 0..BATCH_STEPS {
            let steps: Vec<(usize, u32, usize)> = (0..N)
                .filter(|&s| s != 2 || j < 8)
                .map(|s| (s, want[s].1[j], prompts[s].len() + j))
                .collect();
            let mut logits = vec![0.0; steps.len() * v];
            m.decode_batch(&steps, &mut logits).unwrap();
            for (&(s, _, _), got) in steps.iter().zip(logits.chunks(v)) {
                let w = &want[s].0[j + 1];
                let e = rel(got, w);
                worst = worst.max(e);
                assert!(
                    e <= tol,
                    "{env} KV f16 {kv_f16} sequence {s} step {j}: {e:.2e}"
                );
                assert_eq!(
                    favlo_llama::sampler::argmax(got),
                    favlo_llama::sampler::argmax(w),
                    "{env} sequence {s} step {j}: argmax"
                );
            }
        }
        eprintln!(
            "{env} KV f16 {kv_f16}: {N} sequences decoded together, worst vs CPU {worst:.2e} (bound {tol:.0e})"
        );
    }
}

#[test]
fn smollm2_cuda_batched_decode_matches_cpu() {
    batched_decode_matches_cpu("FAVLO_TEST_SMOLLM2_GGUF", "smollm2_refs.json");
}

#[test]
fn qwen25_cuda_batched_decode_matches_cpu() {
    batched_decode_matches_cpu("FAVLO_TEST_QWEN25_GGUF", "qwen25_refs.json");
}

/// A test queue: the chats, one of them held back until the pipeline has asked for
/// more `late_after` times (it joins the running ones mid-way), and the results.
struct TestQueue {
    waiting: std::collections::VecDeque<favlo_pipeline::QueuedChat>,
    late: Option<favlo_pipeline::QueuedChat>,
    late_after: usize,
    asked: usize,
    /// (chat tag, `None` when the queue hands it out / `Some(piece)` per token), in order.
    events: Events,
    results: Vec<(
        u64,
        Result<favlo_pipeline::Completion, favlo_pipeline::PipelineError>,
    )>,
}

impl favlo_pipeline::ChatQueue for TestQueue {
    fn next(&mut self) -> Option<favlo_pipeline::QueuedChat> {
        self.asked += 1;
        if self.asked > self.late_after
            && let Some(c) = self.late.take()
        {
            self.waiting.push_back(c);
        }
        let c = self.waiting.pop_front()?;
        self.events.lock().unwrap().push((c.tag, None));
        Some(c)
    }
    fn done(
        &mut self,
        chat: favlo_pipeline::QueuedChat,
        result: Result<favlo_pipeline::Completion, favlo_pipeline::PipelineError>,
    ) {
        self.results.push((chat.tag, result));
    }
}

type Events = std::sync::Arc<std::sync::Mutex<Vec<(u64, Option<String>)>>>;

/// A sink whose text the test reads after the pipeline has dropped it; each piece is
/// also logged, with its chat's tag, in the order the chats produced them.
struct SharedText(std::sync::Arc<std::sync::Mutex<String>>, u64, Events);

impl favlo_pipeline::TokenSink for SharedText {
    fn token(
        &mut self,
        piece: &str,
        _: Option<favlo_pipeline::TokenLogprob>,
    ) -> Result<(), favlo_pipeline::RequestClosed> {
        self.0.lock().unwrap().push_str(piece);
        self.2
            .lock()
            .unwrap()
            .push((self.1, Some(piece.to_string())));
        Ok(())
    }
}

/// Chats decoded together through the seam (`serve_chats` on a 3-sequence opening:
/// three start together, a fourth arrives mid-way and joins when a sequence frees)
/// give what each gives alone through `complete` on a 1-sequence opening. The fourth's
/// prompt spans three prefill chunks (128 tokens here): it is prefilled a chunk per
/// step while the others decode, so they emit tokens between its arrival and its first.
#[test]
fn smollm2_cuda_serve_chats_equals_complete() {
    use common::open_seqs;
    use favlo_llama::WeightFormat;
    use favlo_pipeline::{
        ChatMessage, CollectSink, CompletionRequest, LanguagePipeline, QueuedChat, Role, StopFlag,
    };
    let Some(path) = model_path("FAVLO_TEST_SMOLLM2_GGUF") else {
        return;
    };
    if !cuda_ok("the CUDA batched chat test") {
        return;
    }
    let long = format!(
        "{} Now, in one word: name a color.",
        "The harbour was quiet at dawn; gulls circled the masts and a bell rang twice. ".repeat(14)
    );
    let specs: [(&str, usize, Option<&str>); 4] = [
        ("What is the capital of France?", 40, None),
        ("List three fruits.", 6, None),
        ("Tell me a story about a lighthouse.", 24, Some(".")),
        (long.as_str(), 16, None),
    ];
    let request = |i: usize| {
        let (text, max, stop) = specs[i];
        let mut r = CompletionRequest::new(vec![ChatMessage::new(Role::User, text)]);
        r.sampling.temperature = 0.0;
        r.max_tokens = Some(max);
        r.stop = stop.iter().map(|s| s.to_string()).collect();
        r
    };
    let reqs: Vec<CompletionRequest> = (0..specs.len()).map(request).collect();
    let mut one = open_seqs(&path, Device::Cuda(0), WeightFormat::Mxfp8, false, 1);
    let alone: Vec<_> = reqs
        .iter()
        .map(|r| {
            one.complete(r, &mut CollectSink::default(), &StopFlag::new())
                .unwrap()
        })
        .collect();
    drop(one);
    assert!(
        alone[3].prompt_tokens > 2 * 128 && alone[3].prompt_tokens < 384,
        "the late prompt spans three chunks: {} tokens",
        alone[3].prompt_tokens
    );
    let mut rt = open_seqs(&path, Device::Cuda(0), WeightFormat::Mxfp8, false, 3);
    assert_eq!(rt.max_batch(), 3);
    let events: Events = Default::default();
    let texts: Vec<_> = reqs
        .iter()
        .map(|_| std::sync::Arc::new(std::sync::Mutex::new(String::new())))
        .collect();
    let mut chats: std::collections::VecDeque<QueuedChat> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| QueuedChat {
            tag: i as u64,
            request: request(i),
            sink: Box::new(SharedText(
                std::sync::Arc::clone(t),
                i as u64,
                std::sync::Arc::clone(&events),
            )),
            stop: StopFlag::new(),
        })
        .collect();
    let late = chats.pop_back();
    let mut q = TestQueue {
        waiting: chats,
        late,
        late_after: 6,
        asked: 0,
        events: std::sync::Arc::clone(&events),
        results: Vec::new(),
    };
    rt.serve_chats(&mut q);
    assert_eq!(q.results.len(), 4, "every chat handed back");
    // The late chat's arrival, its first token, and the others' tokens in between.
    let ev = events.lock().unwrap().clone();
    let taken = ev
        .iter()
        .position(|e| *e == (3, None))
        .expect("chat 3 taken");
    let first = ev
        .iter()
        .position(|e| e.0 == 3 && e.1.is_some())
        .expect("chat 3 decoded");
    let between = ev[taken..first].iter().filter(|e| e.1.is_some()).count();
    let after = ev[first..]
        .iter()
        .filter(|e| e.0 != 3 && e.1.is_some())
        .count();
    eprintln!(
        "chat 3: {between} tokens of the others between its arrival and its first, {after} after"
    );
    assert!(after > 0, "a companion chat still ran after chat 3 began");
    assert!(
        between >= 2,
        "chat 3's three chunks ran between the others' steps: {between} tokens"
    );
    for (tag, r) in q.results {
        let i = tag as usize;
        let g = r.unwrap();
        let a = &alone[i];
        eprintln!(
            "chat {i} together: {:?} ({:?}, {} tokens)",
            g.text, g.finish_reason, g.completion_tokens
        );
        assert_eq!(g.text, a.text, "chat {i}");
        assert_eq!(g.finish_reason, a.finish_reason, "chat {i}");
        assert_eq!(g.completion_tokens, a.completion_tokens, "chat {i}");
        assert!(texts[i].lock().unwrap().starts_with(&g.text), "chat {i}");
    }
}
