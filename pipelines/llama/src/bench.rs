//! Prefill and decode throughput at a given thread count (`favlo bench chat`).
//!
//! Key design choice: the measurement runs inside a dedicated rayon pool of
//! `threads` workers (`ThreadPool::install`), so every kernel's parallel loop
//! uses exactly that many threads without touching the global pool. The prompt
//! is synthetic (deterministic ids from the ordinary vocabulary range), so the
//! figures do not depend on a tokenizer or on where a greedy decode wanders.

use std::time::Instant;

use crate::error::LlamaError;
use crate::runtime::LlamaRuntime;
use favlo_pipeline::SamplingParams;

use crate::sampler::{Sampler, SplitMix64};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Prompt length for the prefill figure.
    pub prompt_tokens: usize,
    /// Tokens decoded one at a time after the prompt.
    pub decode_tokens: usize,
    /// Rayon threads.
    pub threads: usize,
    /// Decode by sampling at this temperature (OpenAI's other defaults: top-p 1, no
    /// top-k, min-p or penalties; a fixed seed) instead of greedily; 0 = greedy.
    pub temperature: f32,
    /// Also decode 1, 2, … up to this many sequences together
    /// (`LlamaModel::decode_batch`; the model must be opened with at least as many),
    /// each after the same prompt, greedily: [`BenchReport::batch_decode`]. 1 = off.
    /// One sequence through `decode_batch` is how `favlo serve --parallel N` decodes
    /// a lone chat (that sequence's batch-1 step).
    pub sequences: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            prompt_tokens: 128,
            decode_tokens: 64,
            threads: 1,
            temperature: 0.0,
            sequences: 1,
        }
    }
}

/// Measured throughput.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    pub threads: usize,
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Resident weight bytes (each decode step reads all of them once).
    pub weight_bytes: u64,
    /// `weight_bytes * decode_tok_s` in GB/s: the memory traffic decode sustains.
    pub decode_gb_s: f64,
    /// With [`BenchOptions::sequences`] > 1, for every batch size from 1 up to it:
    /// (sequences, timed steps, tokens/s over all of them) of the batched decode.
    pub batch_decode: Vec<(usize, usize, f64)>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "threads {}: prefill {} tok {:.1} tok/s, decode {} tok {:.1} tok/s ({:.2} GB/s of weights)",
            self.threads,
            self.prompt_tokens,
            self.prefill_tok_s,
            self.decode_tokens,
            self.decode_tok_s,
            self.decode_gb_s
        )?;
        for &(n, steps, rate) in &self.batch_decode {
            write!(
                f,
                "; {n} sequence{} together: {steps} steps {rate:.1} tok/s in all ({:.1} each)",
                if n == 1 { "" } else { "s" },
                rate / n as f64
            )?;
        }
        Ok(())
    }
}

/// Run the benchmark on `rt` (its prefix cache is discarded).
pub fn bench(rt: &mut LlamaRuntime, opts: &BenchOptions) -> Result<BenchReport, LlamaError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.max(1))
        .build()
        .map_err(|e| LlamaError::Request {
            message: format!("thread pool: {e}"),
        })?;
    let cap = rt.model.capacity();
    let prompt_n = opts.prompt_tokens.clamp(1, cap.saturating_sub(1).max(1));
    let decode_n = opts.decode_tokens.min(cap - prompt_n);
    let vocab = rt.config().vocab_size as u64;
    let lo = 256.min(vocab / 2);
    let mut rng = SplitMix64::new(42);
    let prompt: Vec<u32> = (0..prompt_n)
        .map(|_| (lo + rng.next_u64() % (vocab - lo)) as u32)
        .collect();
    rt.cached.clear();
    let params = SamplingParams {
        temperature: opts.temperature,
        seed: Some(42),
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(&params, &prompt);
    let result = pool.install(|| -> Result<BenchReport, LlamaError> {
        let model = &mut rt.model;
        let logits = &mut rt.logits;
        // As `generate` runs a step without penalties: on a model that picks tokens
        // where the logits are (CUDA), only the chosen token comes back.
        let on_device = model.chooses_on_device();
        let mut step = |ids: &[u32], n_past: usize| -> Result<u32, LlamaError> {
            if on_device
                && let Some(t) = model.forward_choose(ids, n_past, &sampler.device_choice())?
            {
                return Ok(t);
            }
            model.forward(ids, n_past, logits, false)?;
            Ok(sampler.choose(logits))
        };
        // Warm-up: touch the weights and the thread pool once; on a device, the whole
        // timed path (first launches of each kernel and GEMM shape load lazily).
        let warm = if on_device { prompt_n } else { prompt_n.min(8) };
        let first = step(&prompt[..warm], 0)?;
        if on_device && decode_n > 0 {
            step(&[first], warm)?;
        }
        let t0 = Instant::now();
        let mut next = step(&prompt, 0)?;
        let prefill = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for i in 0..decode_n {
            next = step(&[next], prompt_n + i)?;
        }
        let decode = t1.elapsed().as_secs_f64();
        let batch_decode = if opts.sequences > 1 {
            (1..=opts.sequences)
                .map(|n| batch_rate(model, &prompt, n, decode_n))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let weight_bytes = model.weight_bytes();
        let decode_tok_s = decode_n as f64 / decode.max(1e-9);
        Ok(BenchReport {
            threads: opts.threads.max(1),
            prompt_tokens: prompt_n,
            decode_tokens: decode_n,
            prefill_ms: prefill * 1e3,
            decode_ms: decode * 1e3,
            prefill_tok_s: prompt_n as f64 / prefill.max(1e-9),
            decode_tok_s,
            weight_bytes,
            decode_gb_s: weight_bytes as f64 * decode_tok_s / 1e9,
            batch_decode,
        })
    });
    rt.cached.clear();
    result
}

/// `n` sequences prefilled with `prompt`, then greedy batched decode steps (one to
/// capture the graph, then `steps - 1` timed): (n, timed steps, tokens/s in all).
fn batch_rate(
    model: &mut crate::model::LlamaModel,
    prompt: &[u32],
    n: usize,
    steps: usize,
) -> Result<(usize, usize, f64), LlamaError> {
    if model.sequences() < n {
        return Err(LlamaError::Request {
            message: format!(
                "{n} sequences asked for; the model was opened for {}",
                model.sequences()
            ),
        });
    }
    let vocab = model.config().vocab_size;
    let mut logits = vec![0.0; n * vocab];
    for (s, out) in logits.chunks_mut(vocab).enumerate() {
        model.forward_seq(s, prompt, 0, out)?;
    }
    let mut at = prompt.len();
    // Greedy: the argmax of the prompt's logits, then of each step's, taken where the
    // logits are (as a chat without penalties does).
    let mut next: Vec<u32> = logits
        .chunks(vocab)
        .map(|l| crate::sampler::argmax(l) as u32)
        .collect();
    let device = model.chooses_on_device();
    let choices = vec![device.then_some(crate::model::DeviceChoice::GREEDY); n];
    let mut step = |next: &mut Vec<u32>, at: usize| -> Result<(), LlamaError> {
        let batch: Vec<(usize, u32, usize)> =
            next.iter().enumerate().map(|(s, &t)| (s, t, at)).collect();
        let picked = model.decode_batch_choose(&batch, &choices, &mut logits)?;
        for ((t, p), l) in next.iter_mut().zip(picked).zip(logits.chunks(vocab)) {
            *t = p.unwrap_or_else(|| crate::sampler::argmax(l) as u32);
        }
        Ok(())
    };
    step(&mut next, at)?;
    at += 1;
    let timed = steps.saturating_sub(1);
    let t0 = Instant::now();
    for i in 0..timed {
        step(&mut next, at + i)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok((n, timed, (n * timed) as f64 / secs.max(1e-9)))
}
