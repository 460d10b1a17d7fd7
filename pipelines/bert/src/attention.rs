//! Bidirectional attention over a packed batch, read straight from the fused QKV rows.
//!
//! Key choices: no mask and no padding (each sequence attends over its own rows only); the two
//! products of each (sequence, block of ≤ [`QUERY_BLOCK`] queries, head) run on the runtime's
//! register-blocked `sgemm_nn` (scores = Q·Kᵀ with Kᵀ built once per sequence and head,
//! context = P·V with V read in place from the QKV rows and written in place into the context
//! rows), and the softmax is vectorized ([`crate::epilogue::softmax_rows`]). Query blocks bound
//! the score buffer to `QUERY_BLOCK × len` floats, so 8192-token inputs need no `len²` buffer.
//! Tasks are (sequence, query block) pairs run in parallel; each writes a disjoint row range.

use favlo_runtime::cpu::sgemm_nn;
use rayon::prelude::*;

use crate::epilogue::softmax_rows;

/// Query rows per task.
pub const QUERY_BLOCK: usize = 64;

/// Geometry of the fused QKV rows: `qkv[t, 3h]` = `[q | k | v]`, each `heads × head_dim`.
#[derive(Clone, Copy, Debug)]
pub struct PackedShape {
    pub heads: usize,
    pub head_dim: usize,
}

/// `ctx[t, h]` = softmax(scale · Q Kᵀ) V per sequence `offsets[i]..offsets[i+1]` and head;
/// `kt` is scratch of at least `t·h` floats (the transposed keys).
pub fn attend_packed(
    qkv: &[f32],
    kt: &mut [f32],
    ctx: &mut [f32],
    offsets: &[usize],
    shape: PackedShape,
    scale: f32,
) {
    let h = shape.heads * shape.head_dim;
    let t = offsets.last().copied().unwrap_or(0);
    if h == 0 || qkv.len() < t * 3 * h || ctx.len() < t * h || kt.len() < t * h {
        debug_assert!(h == 0, "attend_packed: short qkv, kt or ctx");
        return;
    }
    // Kᵀ of every sequence and head once: `kt[start*h + head*dh*len + d*len + j]`.
    let mut parts: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(offsets.len());
    let mut rest = &mut kt[..t * h];
    for w in offsets.windows(2) {
        let len = w[1].saturating_sub(w[0]);
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(len * h);
        parts.push((w[0], len, head));
        rest = tail;
    }
    // `head·dh·len + d·len + j` is `c·len + j` with c = head·dh + d: a plain transpose of the
    // sequence's `[len, h]` key rows (row stride 3h). Blocks of 16 keys: each inner loop writes
    // one 64-byte run of Kᵀ and reads 16 rows that stay in L1.
    parts.into_par_iter().for_each(|(start, len, dst)| {
        let keys = &qkv[start * 3 * h..(start + len) * 3 * h];
        let mut j0 = 0;
        while j0 < len {
            let j1 = (j0 + 16).min(len);
            for c in 0..h {
                let out = &mut dst[c * len + j0..c * len + j1];
                for (o, j) in out.iter_mut().zip(j0..j1) {
                    *o = keys[j * 3 * h + h + c];
                }
            }
            j0 = j1;
        }
    });
    // (sequence start, sequence len, first query row, output rows) per task.
    let mut tasks: Vec<(usize, usize, usize, &mut [f32])> = Vec::new();
    let mut rest = &mut ctx[..t * h];
    for w in offsets.windows(2) {
        let (start, len) = (w[0], w[1].saturating_sub(w[0]));
        let mut q0 = 0;
        while q0 < len {
            let rows = (len - q0).min(QUERY_BLOCK);
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(rows * h);
            tasks.push((start, len, q0, head));
            rest = tail;
            q0 += rows;
        }
    }
    let kt = &*kt;
    tasks.into_par_iter().for_each(|(start, len, q0, out)| {
        block(
            qkv,
            &kt[start * h..(start + len) * h],
            out,
            start,
            len,
            q0,
            shape,
            scale,
        );
    });
}

/// One query block of one sequence, all heads; `kt` is the sequence's `[heads][dh][len]` Kᵀ.
#[allow(clippy::too_many_arguments)]
fn block(
    qkv: &[f32],
    kt: &[f32],
    out: &mut [f32],
    start: usize,
    len: usize,
    q0: usize,
    shape: PackedShape,
    scale: f32,
) {
    let (dh, h) = (shape.head_dim, shape.heads * shape.head_dim);
    let ld = 3 * h;
    let rows = out.len() / h;
    let seq = &qkv[start * ld..(start + len) * ld];
    let mut scores = vec![0f32; rows * len];
    for head in 0..shape.heads {
        let (qc, vc) = (head * dh, 2 * h + head * dh);
        let kth = &kt[head * dh * len..(head + 1) * dh * len];
        let qa = &seq[q0 * ld + qc..];
        sgemm_nn(rows, len, dh, qa, ld, kth, len, &mut scores, len);
        softmax_rows(&mut scores, len, scale);
        sgemm_nn(
            rows,
            dh,
            len,
            &scores,
            len,
            &seq[vc..],
            ld,
            &mut out[qc..],
            h,
        );
    }
}

/// Scalar float64 reference: the same attention, one (sequence, head, query) at a time.
pub fn reference(qkv: &[f32], offsets: &[usize], shape: PackedShape, scale: f32, out: &mut [f32]) {
    let (dh, h) = (shape.head_dim, shape.heads * shape.head_dim);
    let ld = 3 * h;
    for w in offsets.windows(2) {
        let (s0, s1) = (w[0], w[1]);
        for head in 0..shape.heads {
            for i in s0..s1 {
                let q = &qkv[i * ld + head * dh..i * ld + head * dh + dh];
                let scores: Vec<f64> = (s0..s1)
                    .map(|j| {
                        let k = &qkv[j * ld + h + head * dh..j * ld + h + head * dh + dh];
                        q.iter()
                            .zip(k)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum::<f64>()
                            * f64::from(scale)
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..dh {
                    let v: f64 = (s0..s1)
                        .zip(&e)
                        .map(|(j, p)| p * f64::from(qkv[j * ld + 2 * h + head * dh + d]))
                        .sum();
                    out[i * h + head * dh + d] = (v / sum) as f32;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn packed_attention_matches_f64_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let shape = PackedShape {
            heads: 3,
            head_dim: 20,
        };
        let h = 60;
        // Lengths around the query block, a single token, and a long one.
        let lens = [1, 7, 64, 65, 130, 3];
        let mut offsets = vec![0];
        for l in lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        let t = *offsets.last().unwrap();
        let qkv: Vec<f32> = (0..t * 3 * h)
            .map(|_| rng.random_range(-2.0f32..2.0))
            .collect();
        let scale = 1.0 / (20f32).sqrt();
        let mut got = vec![0f32; t * h];
        let mut kt = vec![0f32; t * h];
        attend_packed(&qkv, &mut kt, &mut got, &offsets, shape, scale);
        let mut want = vec![0f32; t * h];
        reference(&qkv, &offsets, shape, scale, &mut want);
        let amax = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err / amax <= 1e-5, "rel err {}", err / amax);
    }
}
