//! Scaled dot-product attention: causal over a KV cache (prefill and decode, GQA) and
//! bidirectional with a key mask (encoders).
//!
//! Key design choices:
//! - Work is split over (kv head, block of query tokens) tasks; all query heads that
//!   share a kv head are handled together so every K/V row is read once per task and
//!   reused from L1 across the group.
//! - Exact two-pass softmax per query row (scores, max, exp, normalize), then a
//!   weighted sum of V rows with SIMD axpy.

use super::linear::SyncPtr;
use super::simd;
use rayon::prelude::*;

/// Head geometry of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
}

/// Query tokens per task.
const TOKEN_BLOCK: usize = 16;

/// Causal attention of `t` new tokens (positions n_past..n_past+t) over a KV cache that
/// holds n_past+t positions. q, out: [t, n_heads, hd]; caches: [capacity, n_kv_heads, hd].
#[allow(clippy::too_many_arguments)]
pub fn attention_causal(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    n_past: usize,
    t: usize,
    scale: f32,
) {
    attend(
        q,
        k_cache,
        v_cache,
        out,
        shape,
        t,
        n_past + t,
        |i| n_past + i + 1,
        None,
        scale,
    );
}

/// Bidirectional attention over one sequence of `s` tokens; `key_mask[j] == false`
/// hides key j. q, out: [s, n_heads, hd]; k, v: [s, n_kv_heads, hd].
#[allow(clippy::too_many_arguments)]
pub fn attention_full(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    s: usize,
    key_mask: Option<&[bool]>,
    scale: f32,
) {
    attend(q, k, v, out, shape, s, s, |_| s, key_mask, scale);
}

#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    t: usize,
    ctx: usize,
    visible: impl Fn(usize) -> usize + Sync,
    mask: Option<&[bool]>,
    scale: f32,
) {
    let AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    } = shape;
    let ok = nkv > 0
        && nh % nkv == 0
        && hd > 0
        && q.len() >= t * nh * hd
        && out.len() >= t * nh * hd
        && k.len() >= ctx * nkv * hd
        && v.len() >= ctx * nkv * hd
        && mask.is_none_or(|m| m.len() >= ctx);
    debug_assert!(
        ok,
        "attention: inconsistent shapes {shape:?} t={t} ctx={ctx}"
    );
    if !ok || t == 0 {
        return;
    }
    let group = nh / nkv;
    let blocks = t.div_ceil(TOKEN_BLOCK);
    let optr = SyncPtr(out.as_mut_ptr());
    let task = |id: usize| {
        let (g, b) = (id / blocks, id % blocks);
        let i0 = b * TOKEN_BLOCK;
        let i1 = (i0 + TOKEN_BLOCK).min(t);
        let mut scores = vec![0f32; group * ctx];
        for i in i0..i1 {
            let len = visible(i).min(ctx);
            // Scores: each K row once, dotted with every query head of the group.
            for j in 0..len {
                let visible_key = mask.is_none_or(|m| m[j]);
                let kr = &k[(j * nkv + g) * hd..(j * nkv + g + 1) * hd];
                for r in 0..group {
                    let h = g * group + r;
                    let qv = &q[(i * nh + h) * hd..(i * nh + h + 1) * hd];
                    scores[r * ctx + j] = if visible_key {
                        scale * simd::dot(qv, kr)
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            }
            // Normalize each row; all-masked rows give zero weights.
            for r in 0..group {
                let row = &mut scores[r * ctx..r * ctx + len];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if max == f32::NEG_INFINITY {
                    row.fill(0.0);
                    continue;
                }
                let mut sum = 0f32;
                for s in row.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let inv = 1.0 / sum;
                row.iter_mut().for_each(|s| *s *= inv);
            }
            // Weighted sum of V rows.
            for r in 0..group {
                let h = g * group + r;
                // SAFETY: (i, h) rows are written by this task only; in bounds (checked above).
                let o = unsafe {
                    std::slice::from_raw_parts_mut(optr.ptr().add((i * nh + h) * hd), hd)
                };
                o.fill(0.0);
                for j in 0..len {
                    let p = scores[r * ctx + j];
                    if p != 0.0 {
                        simd::axpy(o, p, &v[(j * nkv + g) * hd..(j * nkv + g + 1) * hd]);
                    }
                }
            }
        }
    };
    let n_tasks = nkv * blocks;
    let work = t * ctx * nh * hd;
    if work < (1 << 15) || n_tasks == 1 {
        (0..n_tasks).for_each(task);
    } else {
        (0..n_tasks).into_par_iter().for_each(task);
    }
}
