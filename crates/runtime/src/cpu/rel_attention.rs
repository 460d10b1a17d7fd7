//! Multi-head self-attention with windowed relative-position keys and values
//! (VITS / Glow-TTS text encoder), on channel-major `[heads·d, T]` slices.
//!
//! Key design choice: the content terms (`QᵀK` and `V·Pᵀ`) are GEMMs read straight
//! from the `[C, T]` layout through `gemm` strides (no transposed copies); the
//! relative terms touch only `2w + 1` diagonals, so they are plain loops. Heads
//! run in parallel on rayon workers, each with its own score block. No mask:
//! the caller runs one unpadded sequence.

/// Shape of a windowed relative-position attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelAttnShape {
    /// Heads (the relative embeddings are shared by every head).
    pub heads: usize,
    /// Channels per head `d`.
    pub head_dim: usize,
    /// Sequence length `T`.
    pub len: usize,
    /// Window `w`: relative positions `−w..=w` have embeddings.
    pub window: usize,
}

impl RelAttnShape {
    /// Elements of the score scratch (`heads·T·T`: one block per head).
    pub fn scratch_len(&self) -> usize {
        self.heads * self.len * self.len
    }
}

fn gemm_call(
    m: usize,
    n: usize,
    k: usize,
    dst: (*mut f32, isize, isize),
    lhs: (*const f32, isize, isize),
    rhs: (*const f32, isize, isize),
) {
    // SAFETY: the callers pass pointers and strides that stay inside live slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.1,
            dst.2,
            false,
            lhs.0,
            lhs.1,
            lhs.2,
            rhs.0,
            rhs.1,
            rhs.2,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `out[h·d + c, i] = Σ_j p_h[i, j] · (v[h·d + c, j] + [|j−i| ≤ w] emb_v[j−i+w, c])`
/// with `p_h[i, ·] = softmax_j((q_i · k_j + [|j−i| ≤ w] q_i · emb_k[j−i+w]) / √d)`.
/// `q`, `k`, `v`, `out`: `[heads·d, T]`; `emb_k`, `emb_v`: `[2w + 1, d]`;
/// `scores`: scratch of [`RelAttnShape::scratch_len`].
#[allow(clippy::too_many_arguments)]
pub fn attention_rel_window(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    emb_k: &[f32],
    emb_v: &[f32],
    shape: RelAttnShape,
    out: &mut [f32],
    scores: &mut [f32],
) {
    let RelAttnShape {
        heads,
        head_dim: d,
        len: t,
        window: w,
    } = shape;
    let n = heads * d * t;
    let ne = (2 * w + 1) * d;
    let ok = q.len() >= n
        && k.len() >= n
        && v.len() >= n
        && out.len() >= n
        && emb_k.len() >= ne
        && emb_v.len() >= ne
        && scores.len() >= heads * t * t;
    debug_assert!(ok, "attention_rel_window: short operand");
    if !ok || n == 0 {
        return;
    }
    let scale = 1.0 / (d as f32).sqrt();
    let ti = t as isize;
    let head = |(h, (oh, scores)): (usize, (&mut [f32], &mut [f32]))| {
        let (qh, kh, vh) = (
            &q[h * d * t..(h + 1) * d * t],
            &k[h * d * t..(h + 1) * d * t],
            &v[h * d * t..(h + 1) * d * t],
        );
        // scores(i, j) = Σ_c q[c, i] k[c, j]
        gemm_call(
            t,
            t,
            d,
            (scores.as_mut_ptr(), 1, ti),
            (qh.as_ptr(), ti, 1),
            (kh.as_ptr(), 1, ti),
        );
        for i in 0..t {
            let row = &mut scores[i * t..(i + 1) * t];
            let lo = i.saturating_sub(w);
            let hi = (i + w).min(t - 1);
            for (j, s) in row.iter_mut().enumerate().take(hi + 1).skip(lo) {
                let e = &emb_k[(j + w - i) * d..(j + w - i + 1) * d];
                let mut acc = 0f32;
                for (c, ev) in e.iter().enumerate() {
                    acc += qh[c * t + i] * ev;
                }
                *s += acc;
            }
            let max = row.iter().fold(f32::NEG_INFINITY, |m, s| m.max(*s * scale));
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = (*s * scale - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|s| *s *= inv);
        }
        // out(c, i) = Σ_j v[c, j] p[i, j]
        gemm_call(
            d,
            t,
            t,
            (oh.as_mut_ptr(), 1, ti),
            (vh.as_ptr(), 1, ti),
            (scores.as_ptr(), ti, 1),
        );
        for i in 0..t {
            let lo = i.saturating_sub(w);
            let hi = (i + w).min(t - 1);
            for j in lo..=hi {
                let p = scores[i * t + j];
                let e = &emb_v[(j + w - i) * d..(j + w - i + 1) * d];
                for (c, ev) in e.iter().enumerate() {
                    oh[c * t + i] += p * ev;
                }
            }
        }
    };
    let work = out[..n]
        .chunks_exact_mut(d * t)
        .zip(scores[..heads * t * t].chunks_exact_mut(t * t))
        .enumerate();
    if heads > 1 && t * t * d >= 1 << 14 {
        use rayon::prelude::*;
        work.par_bridge().for_each(head);
    } else {
        work.for_each(head);
    }
}
