//! Token sampling: penalties, temperature, top-k, top-p, min-p, and a seeded PRNG.
//!
//! Key design choices:
//! - The PRNG is our own SplitMix64 (fixed algorithm, so the same seed gives the
//!   same tokens on every build and platform).
//! - Order of operations (llama.cpp-like): repetition penalty (CTRL: divide
//!   positive logits, multiply negative ones, over prompt + generated tokens),
//!   presence/frequency penalties (OpenAI: over generated tokens only), then
//!   greedy when `temperature == 0`, else top-k → softmax(logits/T) → min-p →
//!   top-p → draw. Tokens more than 30·T nats below the best (probability ratio
//!   < 1e-13) are dropped first, and the sorted order the rule is stated in is never
//!   materialized: top-k and the top-p / draw boundaries are selections (`select`),
//!   O(n) per token rather than a sort of a 152k vocabulary.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use favlo_pipeline::SamplingParams;

use crate::model::DeviceChoice;

mod select;
use select::Cand;

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// A generator seeded from the process's hash randomness (no seed given).
    pub fn from_entropy() -> Self {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        SplitMix64(h.finish())
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A sampler for one generation.
pub struct Sampler {
    p: SamplingParams,
    rng: SplitMix64,
    /// Occurrences of each generated token (presence/frequency penalties).
    counts: HashMap<u32, u32>,
    /// Every token seen (prompt + generated) for the repetition penalty.
    seen: HashMap<u32, ()>,
}

impl Sampler {
    /// A sampler with `params`; `prompt` feeds the repetition penalty.
    pub fn new(params: &SamplingParams, prompt: &[u32]) -> Self {
        let rng = params
            .seed
            .map_or_else(SplitMix64::from_entropy, SplitMix64::new);
        let seen = prompt.iter().map(|&t| (t, ())).collect();
        Sampler {
            p: params.clone(),
            rng,
            counts: HashMap::new(),
            seen,
        }
    }

    /// Record a generated token.
    pub fn accept(&mut self, token: u32) {
        *self.counts.entry(token).or_insert(0) += 1;
        self.seen.insert(token, ());
    }

    /// True when no penalty changes any logit, so [`Self::choose`] depends on the raw
    /// logits alone and the choice can be made where they are ([`Self::device_choice`]).
    pub fn penalty_free(&self) -> bool {
        let r = self.p.repetition_penalty;
        (r == 1.0 || r <= 0.0) && self.p.presence_penalty == 0.0 && self.p.frequency_penalty == 0.0
    }

    /// The next step's choice as a model that picks tokens where the logits are takes
    /// it: the parameters and, when sampling, the draw that [`Self::choose`] would take
    /// from this sampler's generator (consumed here, once per step, as `choose` does),
    /// so a seeded generation picks the same tokens either way except for a draw within
    /// ~1e-6 of a boundary. Only meaningful when [`Self::penalty_free`].
    pub fn device_choice(&mut self) -> DeviceChoice {
        let t = self.p.temperature;
        if t <= 0.0 || !t.is_finite() {
            return DeviceChoice::GREEDY;
        }
        DeviceChoice {
            temperature: t,
            top_k: self.p.top_k,
            top_p: self.p.top_p,
            min_p: self.p.min_p,
            uniform: self.rng.next_f64(),
        }
    }

    /// Apply the penalties in place.
    pub fn penalize(&self, logits: &mut [f32]) {
        let r = self.p.repetition_penalty;
        if r != 1.0 && r > 0.0 {
            for &t in self.seen.keys() {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l > 0.0 { *l / r } else { *l * r };
                }
            }
        }
        let (pp, fp) = (self.p.presence_penalty, self.p.frequency_penalty);
        if pp != 0.0 || fp != 0.0 {
            for (&t, &n) in &self.counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l -= pp + fp * n as f32;
                }
            }
        }
    }

    /// Choose the next token from (already penalized and masked) `logits`.
    ///
    /// The rule is stated on the candidates sorted by (logit descending, id
    /// ascending), but it is computed without sorting them (`select`): top-k by
    /// selection, then the top-p prefix and the draw as the points where the running
    /// weight crosses a threshold. Sums run in another order than a walk of the sorted
    /// list would take them, so a draw within ~1e-15 of a boundary may land on the
    /// neighbour; everywhere else the choice is the sorted rule's.
    pub fn choose(&mut self, logits: &[f32]) -> u32 {
        let best = argmax(logits);
        let temp = self.p.temperature;
        if temp <= 0.0 || !temp.is_finite() {
            return best as u32;
        }
        let max = logits[best];
        if !max.is_finite() {
            return best as u32;
        }
        let floor = max - 30.0 * temp;
        let mut cand: Vec<Cand> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| **l >= floor)
            .map(|(i, &logit)| Cand {
                id: i as u32,
                logit,
                w: 0.0,
            })
            .collect();
        select::top_k(&mut cand, self.p.top_k);
        // Weights at temperature T (stable: shifted by the max, so the best weighs 1).
        for c in cand.iter_mut() {
            c.w = (((c.logit - max) / temp) as f64).exp();
        }
        let total: f64 = cand.iter().map(|c| c.w).sum();
        // min-p: p ≥ min_p · p_best, i.e. w ≥ min_p (the kept ones moved to the front).
        let mut keep = cand.len();
        if self.p.min_p > 0.0 {
            let cut = f64::from(self.p.min_p);
            keep = 0;
            for i in 0..cand.len() {
                if cand[i].w >= cut {
                    cand.swap(i, keep);
                    keep += 1;
                }
            }
            if keep == 0 {
                // Only the best survives (min_p > 1): the first candidate in the order.
                let first = (0..cand.len())
                    .min_by(|&a, &b| select::order(&cand[a], &cand[b]))
                    .unwrap_or(0);
                cand.swap(first, 0);
                keep = 1;
            }
        }
        // top-p: the shortest prefix in the order whose mass reaches top_p.
        if self.p.top_p < 1.0 && self.p.top_p > 0.0 {
            let target = f64::from(self.p.top_p) * total;
            let kept: f64 = cand[..keep].iter().map(|c| c.w).sum();
            if kept >= target {
                keep = select::cross(&mut cand[..keep], target, true) + 1;
            }
        }
        let mass: f64 = cand[..keep].iter().map(|c| c.w).sum();
        let u = self.rng.next_f64() * mass;
        let k = select::cross(&mut cand[..keep], u, false);
        cand[k].id
    }
}

/// Index of the largest value (first on ties; NaN never wins).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best
}

/// `log_softmax(logits)[id]` and the `n` best `(id, logprob)` pairs, in f64.
pub fn logprobs(logits: &[f32], id: usize, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let lp = |i: usize| (logits[i] as f64 - lse) as f32;
    let mut top: Vec<(u32, f32)> = Vec::new();
    if n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let n = n.min(idx.len());
        idx.select_nth_unstable_by(n - 1, |&a, &b| {
            logits[b as usize].total_cmp(&logits[a as usize])
        });
        idx.truncate(n);
        idx.sort_unstable_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        top = idx.into_iter().map(|i| (i, lp(i as usize))).collect();
    }
    (lp(id), top)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn params(t: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            seed: Some(7),
            ..SamplingParams::default()
        }
    }

    #[test]
    fn splitmix_known_values() {
        // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn greedy_and_seeded_sampling() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let mut s = Sampler::new(&params(0.0), &[]);
        assert_eq!(s.choose(&logits), argmax(&logits) as u32);
        let draw = |seed| {
            let mut s = Sampler::new(
                &SamplingParams {
                    seed: Some(seed),
                    ..params(1.0)
                },
                &[],
            );
            (0..20).map(|_| s.choose(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn sampling_frequencies_match_softmax() {
        // 4 tokens, T=0.5: empirical frequencies within 1% of the f64 softmax.
        let logits = [0.1f32, 0.7, -0.3, 0.4];
        let mut s = Sampler::new(&params(0.5), &[]);
        let mut counts = [0usize; 4];
        let n = 200_000;
        for _ in 0..n {
            counts[s.choose(&logits) as usize] += 1;
        }
        let z: f64 = logits.iter().map(|&l| (l as f64 / 0.5).exp()).sum();
        for i in 0..4 {
            let p = (logits[i] as f64 / 0.5).exp() / z;
            assert!((counts[i] as f64 / n as f64 - p).abs() < 0.01, "token {i}");
        }
    }

    #[test]
    fn top_k_top_p_min_p_restrict_support() {
        let logits = [2.0f32, 1.9, 1.0, 0.0, -1.0];
        let support = |p: SamplingParams| {
            let mut s = Sampler::new(&p, &[]);
            let mut seen = [false; 5];
            for _ in 0..5000 {
                seen[s.choose(&logits) as usize] = true;
            }
            seen
        };
        assert_eq!(
            support(SamplingParams {
                top_k: 2,
                ..params(1.0)
            }),
            [true, true, false, false, false]
        );
        // p = [.40,.36,.15,.05,.02]: top_p 0.7 keeps the first two.
        assert_eq!(
            support(SamplingParams {
                top_p: 0.7,
                ..params(1.0)
            }),
            [true, true, false, false, false]
        );
        // min_p 0.3 keeps p >= 0.12: three tokens.
        assert_eq!(
            support(SamplingParams {
                min_p: 0.3,
                ..params(1.0)
            }),
            [true, true, true, false, false]
        );
    }

    /// The rule as it reads: sort every candidate, then walk the sorted list (the
    /// sampler's previous implementation), as the reference for the selections.
    fn choose_sorted(p: &SamplingParams, rng: &mut SplitMix64, logits: &[f32]) -> u32 {
        let best = argmax(logits);
        let temp = p.temperature;
        if temp <= 0.0 || !temp.is_finite() {
            return best as u32;
        }
        let max = logits[best];
        let floor = max - 30.0 * temp;
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| **l >= floor)
            .map(|(i, &l)| (i as u32, l))
            .collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if p.top_k > 0 {
            cand.truncate(p.top_k.max(1));
        }
        let mut probs: Vec<f64> = cand
            .iter()
            .map(|&(_, l)| (((l - max) / temp) as f64).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
        let mut keep = probs.len();
        if p.min_p > 0.0 {
            let cut = p.min_p as f64 * probs[0];
            keep = probs.iter().take_while(|&&q| q >= cut).count().max(1);
        }
        if p.top_p < 1.0 && p.top_p > 0.0 {
            let mut acc = 0.0;
            let mut n = 0;
            for &q in &probs[..keep] {
                acc += q;
                n += 1;
                if acc >= p.top_p as f64 {
                    break;
                }
            }
            keep = n.max(1);
        }
        let mass: f64 = probs[..keep].iter().sum();
        let mut u = rng.next_f64() * mass;
        for (i, &q) in probs[..keep].iter().enumerate() {
            if u < q {
                return cand[i].0;
            }
            u -= q;
        }
        cand[keep - 1].0
    }

    /// The selections choose what the sorted walk chooses: 3000 cases over vocabularies
    /// of 1 to 152k, continuous, tied (quantized) and partly −inf logits, random T,
    /// top-k, top-p and min-p, 8 draws each from the same seed.
    #[test]
    fn selection_matches_the_sorted_rule() {
        let mut g = SplitMix64::new(0xfa71_0c0d);
        let (mut draws, mut differ) = (0usize, 0usize);
        for case in 0..3000 {
            let vocab = match case % 6 {
                0 => 1 + (g.next_u64() % 8) as usize,
                1 | 2 => 1 + (g.next_u64() % 300) as usize,
                3 | 4 => 1 + (g.next_u64() % 5000) as usize,
                _ => 151_936,
            };
            if vocab == 151_936 && case % 60 != 5 {
                continue;
            }
            let spread = 0.5 + 8.0 * g.next_f64();
            let quant = case % 3 == 1;
            let logits: Vec<f32> = (0..vocab)
                .map(|_| {
                    let x = ((g.next_f64() + g.next_f64() + g.next_f64() - 1.5) * spread) as f32;
                    if case % 7 == 3 && g.next_u64().is_multiple_of(4) {
                        f32::NEG_INFINITY
                    } else if quant {
                        (x * 2.0).round() / 2.0
                    } else {
                        x
                    }
                })
                .collect();
            if logits.iter().all(|l| *l == f32::NEG_INFINITY) {
                continue;
            }
            // Drawn in this order (the cases the test has always run).
            let temperature = [0.3f32, 0.7, 1.0, 1.5][(g.next_u64() % 4) as usize];
            let top_k = [0usize, 0, 1, 5, 40, 1000][(g.next_u64() % 6) as usize];
            let top_p = [1.0f32, 1.0, 0.9, 0.5, 0.999][(g.next_u64() % 5) as usize];
            let min_p = [0.0f32, 0.0, 0.05, 0.3][(g.next_u64() % 4) as usize];
            let seed = g.next_u64();
            let p = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                seed: Some(seed),
                ..SamplingParams::default()
            };
            let mut s = Sampler::new(&p, &[]);
            let mut r = SplitMix64::new(seed);
            for _ in 0..8 {
                draws += 1;
                if s.choose(&logits) != choose_sorted(&p, &mut r, &logits) {
                    differ += 1;
                }
            }
        }
        assert!(draws > 10_000, "{draws} draws");
        assert_eq!(
            differ, 0,
            "{differ} of {draws} draws differ from the sorted rule"
        );
    }

    #[test]
    fn penalties() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..params(0.0)
        };
        let mut s = Sampler::new(&p, &[0, 1]);
        s.accept(2);
        s.accept(2);
        let mut l = vec![4.0f32, -1.0, 3.0, 1.0];
        s.penalize(&mut l);
        // 0: 4/2; 1: -1*2; 2: 3/2 - 0.5 - 0.5; 3 untouched.
        assert_eq!(l, vec![2.0, -2.0, 0.5, 1.0]);
    }

    #[test]
    fn logprobs_match_f64_softmax() {
        let l = [1.0f32, 3.0, 2.0, -1.0];
        let (lp, top) = logprobs(&l, 2, 2);
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        assert!((lp as f64 - (2.0f64.exp() / z).ln()).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
    }
}
