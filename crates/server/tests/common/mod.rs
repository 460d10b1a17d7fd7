//! Fakes for router tests: a catalog of three rows and pipelines that echo.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use favlo_pipeline::{
    Completion, CompletionRequest, Control, Embedding, EmbeddingsPipeline, FinishReason,
    LanguagePipeline, Ledger, MediaError, MediaFile, MediaHold, MediaJob, MediaKind, MediaOutput,
    MediaPipeline, ModelKind, ModelSpec, Owner, PipelineError, PipelineFactory, StopFlag,
    TokenSink, TokenVocab,
};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::SpanKind;
use favlo_server::{AppState, Catalog, CatalogRow, ServeConfig, ServerDeps};

pub struct FakeCatalog;

fn row(id: &str, kind: ModelKind, pulled: bool) -> CatalogRow {
    CatalogRow {
        id: id.into(),
        kind,
        family: "fake".into(),
        pulled,
        description: String::new(),
    }
}

impl Catalog for FakeCatalog {
    fn rows(&self) -> Vec<CatalogRow> {
        vec![
            row("chat-a", ModelKind::Chat, true),
            row("chat-b", ModelKind::Chat, true),
            row("chat-p", ModelKind::Chat, true),
            row("emb", ModelKind::Embeddings, true),
            row("img", ModelKind::Image, true),
            row("not-pulled", ModelKind::Chat, false),
        ]
    }
    fn spec(&self, id: &str) -> Result<ModelSpec, String> {
        let r = self.row(id).ok_or("no row")?;
        Ok(ModelSpec {
            id: r.id,
            family: "fake".into(),
            kind: r.kind,
            dir: "/nonexistent".into(),
            files: vec![],
            context_length: None,
            defaults: serde_json::json!({}),
        })
    }
    fn pull(&self, id: &str) -> Result<(), String> {
        Err(format!("{id} cannot be pulled in tests"))
    }
}

/// Vocabulary: every printable ASCII byte as one token, then a few words; last id = EOS.
pub fn vocab() -> TokenVocab {
    let mut tokens: Vec<Vec<u8>> = (0x20u8..0x7f).map(|b| vec![b]).collect();
    for w in [
        "{\"", "\":", "\"name", "true", "false", "null", "12", "\",\"", "}", "ab",
    ] {
        tokens.push(w.as_bytes().to_vec());
    }
    tokens.push(Vec::new()); // EOS
    let eos = (tokens.len() - 1) as u32;
    TokenVocab {
        tokens,
        eos: vec![eos],
        special: vec![],
    }
}

#[derive(Default)]
pub struct Log {
    pub opened: Vec<String>,
    pub closed: Vec<String>,
    pub tokens_sent: AtomicUsize,
    /// The chats (last message) of every `serve_chats` call of chat-p.
    pub batches: Vec<Vec<String>>,
}

pub struct FakeFactory {
    pub log: Arc<Mutex<Log>>,
}

struct FakeChat {
    id: String,
    log: Arc<Mutex<Log>>,
    _weights: favlo_runtime::buffer::Buffer<f32>,
    vocab: Arc<TokenVocab>,
}

impl Drop for FakeChat {
    fn drop(&mut self) {
        self.log.lock().unwrap().closed.push(self.id.clone());
    }
}

impl LanguagePipeline for FakeChat {
    fn complete(
        &mut self,
        req: &CompletionRequest,
        sink: &mut dyn TokenSink,
        stop: &StopFlag,
    ) -> Result<Completion, PipelineError> {
        let last = req
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let mut text = String::new();
        let mut n = 0;
        if let Some(g) = &req.grammar {
            // Greedy over the fake vocab: the longest allowed token, eos when complete.
            let mut allowed = vec![false; self.vocab.len()];
            let mut rng = req.sampling.seed.unwrap_or(7);
            for _ in 0..3000 {
                let mut m = g.mask();
                m.allowed(&mut allowed)?;
                let eos = self.vocab.eos[0] as usize;
                if allowed[eos] {
                    break;
                }
                // A seeded random "model" that likes to close things: 70% of the
                // time it picks among tokens holding a quote or a closing bracket.
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let all: Vec<usize> = (0..allowed.len()).filter(|&i| allowed[i]).collect();
                let closers: Vec<usize> = all
                    .iter()
                    .copied()
                    .filter(|&i| {
                        self.vocab.tokens[i]
                            .iter()
                            .any(|b| matches!(b, b'"' | b'}' | b']'))
                    })
                    .collect();
                let r = (rng >> 33) as usize;
                let from = if !closers.is_empty() && r % 10 < 7 {
                    &closers
                } else {
                    &all
                };
                let pick = from.get((r / 10) % from.len().max(1)).copied();
                let Some(pick) = pick else {
                    return Err(PipelineError::internal("dead end"));
                };
                m.commit(pick as u32)?;
                drop(m);
                let piece = String::from_utf8_lossy(&self.vocab.tokens[pick]).into_owned();
                sink.token(&piece, None)?;
                text.push_str(&piece);
                n += 1;
            }
            return Ok(Completion {
                text,
                finish_reason: FinishReason::Stop,
                prompt_tokens: 3,
                completion_tokens: n,
                logprobs: vec![],
                prefill_ms: 0.0,
                decode_ms: 0.0,
            });
        }
        assert!(last != "panic", "the fake chat panics on request");
        if let Some(ms) = last.strip_prefix("wait ").and_then(|m| m.parse().ok()) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let reply = if last.contains("weather") && req.tools.is_some() {
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>".to_string()
        } else if last == "forever" {
            "x".repeat(100_000)
        } else {
            format!("echo: {last}")
        };
        let max = req.max_tokens.unwrap_or(usize::MAX);
        let mut finish = FinishReason::Stop;
        for ch in reply.chars() {
            if n >= max {
                finish = FinishReason::Length;
                break;
            }
            if stop.is_raised() {
                break;
            }
            let lp = req.logprobs.then(|| favlo_pipeline::TokenLogprob {
                token: ch.to_string(),
                logprob: -0.5,
                bytes: ch.to_string().into_bytes(),
                top: vec![],
            });
            sink.token(&ch.to_string(), lp)?;
            self.log
                .lock()
                .unwrap()
                .tokens_sent
                .fetch_add(1, Ordering::Relaxed);
            text.push(ch);
            n += 1;
            if last == "forever" {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        Ok(Completion {
            text,
            finish_reason: finish,
            prompt_tokens: 5,
            completion_tokens: n,
            logprobs: vec![],
            prefill_ms: 1.0,
            decode_ms: 1.0,
        })
    }
    fn context_length(&self) -> usize {
        512
    }
    fn vocab(&self) -> Option<Arc<TokenVocab>> {
        Some(self.vocab.clone())
    }
    fn max_batch(&self) -> usize {
        if self.id == "chat-p" { 3 } else { 1 }
    }
    /// One chat after another, as the default does, recording which chats one call
    /// served.
    /// (Recorded as each chat starts, so a client that has its answer finds it.)
    fn serve_chats(&mut self, queue: &mut dyn favlo_pipeline::ChatQueue) {
        let run = {
            let mut l = self.log.lock().unwrap();
            l.batches.push(Vec::new());
            l.batches.len() - 1
        };
        while let Some(mut chat) = queue.next() {
            let last = chat.request.messages.last().map(|m| m.content.clone());
            self.log.lock().unwrap().batches[run].push(last.unwrap_or_default());
            let r = self.complete(&chat.request, &mut *chat.sink, &chat.stop);
            queue.done(chat, r);
        }
    }
}

struct FakeEmb;
impl EmbeddingsPipeline for FakeEmb {
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>, PipelineError> {
        Ok(texts
            .iter()
            .map(|t| Embedding {
                vector: vec![t.len() as f32, 1.0, -2.0, 0.5],
                tokens: t.split_whitespace().count() + 2,
                truncated: false,
            })
            .collect())
    }
    fn dimensions(&self) -> usize {
        4
    }
    fn max_tokens(&self) -> usize {
        128
    }
    fn supports_truncation(&self) -> bool {
        true
    }
}

impl PipelineFactory for FakeFactory {
    fn open_language(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn LanguagePipeline>, PipelineError> {
        self.log.lock().unwrap().opened.push(spec.id.clone());
        let w = ledger
            .alloc::<f32>(owner, SpanKind::Resident, 1024)
            .map_err(PipelineError::internal)?;
        Ok(Box::new(FakeChat {
            id: spec.id.clone(),
            log: self.log.clone(),
            _weights: w,
            vocab: Arc::new(vocab()),
        }))
    }
    fn open_embeddings(
        &self,
        _spec: &ModelSpec,
        _ledger: &Arc<Ledger>,
        _owner: &Owner,
    ) -> Result<Arc<dyn EmbeddingsPipeline>, PipelineError> {
        Ok(Arc::new(FakeEmb))
    }
    fn parse_media(
        &self,
        _spec: &ModelSpec,
        id: &str,
        body: &serde_json::Value,
    ) -> Result<MediaJob, PipelineError> {
        fake_media_parse(id, body)
    }
    fn open_media(
        &self,
        spec: &ModelSpec,
        ledger: &Arc<Ledger>,
        owner: &Owner,
    ) -> Result<Box<dyn MediaPipeline>, PipelineError> {
        self.log.lock().unwrap().opened.push(spec.id.clone());
        let w = ledger
            .alloc::<f32>(owner, SpanKind::Resident, 256)
            .map_err(PipelineError::internal)?;
        Ok(Box::new(FakeMedia {
            id: spec.id.clone(),
            log: self.log.clone(),
            _weights: w,
        }))
    }
}

/// `{steps: 1..=50, seed?, stage_ms?}`: a stage-by-stage hash chain.
pub fn fake_media_parse(id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
    let steps = body
        .get("steps")
        .map_or(Some(4), serde_json::Value::as_u64)
        .filter(|s| (1..=50).contains(s))
        .ok_or_else(|| {
            PipelineError::invalid("steps must be an integer from 1 to 50", Some("steps"))
        })?;
    let seed = body
        .get("seed")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(1);
    let ms = body
        .get("stage_ms")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(50);
    Ok(MediaJob {
        id: id.into(),
        kind: MediaKind::Image,
        params: serde_json::json!({"steps": steps, "seed": seed, "stage_ms": ms,
                                   "size": "1x1", "response_format": "png"}),
    })
}

/// The uninterrupted result of a fake job.
pub fn fake_media_value(seed: u64, steps: u64) -> u64 {
    (0..steps).fold(seed, |acc, s| {
        acc.wrapping_mul(6364136223846793005).wrapping_add(s + 1)
    })
}

pub struct FakeMedia {
    id: String,
    log: Arc<Mutex<Log>>,
    _weights: favlo_runtime::buffer::Buffer<f32>,
}

impl MediaPipeline for FakeMedia {
    fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
        fake_media_parse(id, body)
    }
    fn stages(&self, job: &MediaJob) -> Option<usize> {
        job.params["steps"].as_u64().map(|s| s as usize)
    }
    fn generate(
        &mut self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError> {
        let steps = job.params["steps"].as_u64().unwrap();
        let ms = job.params["stage_ms"].as_u64().unwrap();
        let (mut stage, mut acc) = match hold {
            Some(h) => (h.stage as u64, *h.state.downcast::<u64>().unwrap()),
            None => (0, job.params["seed"].as_u64().unwrap()),
        };
        while stage < steps {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            acc = acc
                .wrapping_mul(6364136223846793005)
                .wrapping_add(stage + 1);
            stage += 1;
            if stage < steps {
                let (st, a) = (stage as usize, acc);
                control.check(|| MediaHold {
                    stage: st,
                    state: Box::new(a),
                })?;
            }
        }
        Ok(MediaOutput::Image {
            width: 1,
            height: 1,
            channels: 3,
            pixels: acc.to_le_bytes()[..3].to_vec(),
        })
    }
    fn pack(&self, _job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
        match output {
            MediaOutput::Image { pixels, .. } => Ok(MediaFile {
                mime: "image/png".into(),
                extension: "png".into(),
                bytes: pixels,
            }),
            _ => Err(PipelineError::internal("not an image")),
        }
    }
    fn close(self: Box<Self>) -> Result<(), PipelineError> {
        self.log.lock().unwrap().closed.push(self.id.clone());
        Ok(())
    }
}

/// A fresh temporary Favlo home per state (kept for the test process).
pub fn home() -> std::path::PathBuf {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::mem::forget(dir);
    path
}

pub fn state_with(config: ServeConfig) -> (Arc<AppState>, Arc<Mutex<Log>>, Arc<Ledger>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 1 << 30, None);
    let deps = ServerDeps {
        catalog: Arc::new(FakeCatalog),
        factory: Arc::new(FakeFactory { log: log.clone() }),
        ledger: ledger.clone(),
        ui: None,
        home: home(),
    };
    (AppState::new(config, deps), log, ledger)
}
