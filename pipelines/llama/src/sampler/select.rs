//! Choosing among sampling candidates in the sampler's order (larger logit first, then
//! smaller id) without sorting them.
//!
//! Key design choice: the sampler's rule is defined on the sorted candidates (top-k, the
//! top-p prefix, the draw walking the prefix), but it only ever needs one boundary of
//! that order at a time: the k-th element, or the element where the running weight
//! crosses a threshold. Both come from a quickselect that carries the weight of the side
//! it drops, so a step costs O(n) expected instead of an O(n log n) sort of a vocabulary
//! that, at temperature 1, is almost entirely within the 30·T candidate window.

use std::cmp::Ordering;

/// A candidate token: its id, logit and weight exp((logit − max) / T).
#[derive(Clone, Copy, Debug)]
pub(super) struct Cand {
    pub id: u32,
    pub logit: f32,
    pub w: f64,
}

/// The sampler's order: larger logit first, then smaller id (a strict total order).
pub(super) fn order(a: &Cand, b: &Cand) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Keeps the `k` first candidates in the order (in no particular order among them).
pub(super) fn top_k(v: &mut Vec<Cand>, k: usize) {
    if k > 0 && k < v.len() {
        v.select_nth_unstable_by(k - 1, order);
        v.truncate(k);
    }
}

/// Rearranges `v` (non-empty) and returns `k` such that `v[..k]` are exactly the
/// candidates before `v[k]` in the order, where `v[k]` is where the running weight in
/// that order crosses `t`: `Σ w(v[..k]) ≤ t < Σ w(v[..=k])` for a draw (`reach` false),
/// `Σ w(v[..k]) < t ≤ Σ w(v[..=k])` for a mass to reach (`reach` true). When `t` lies
/// past the total (rounding), `v[k]` is the last candidate in the order.
pub(super) fn cross(v: &mut [Cand], t: f64, reach: bool) -> usize {
    let inside = |upto: f64| if reach { t <= upto } else { t < upto };
    let (mut lo, mut hi, mut base) = (0usize, v.len(), 0.0f64);
    let mut rounds = 0;
    while hi - lo > 1 {
        rounds += 1;
        if rounds > 64 {
            // Pivots this unlucky are not expected; finish with a sort and a walk.
            v[lo..hi].sort_unstable_by(order);
            for (i, c) in v[lo..hi].iter().enumerate() {
                base += c.w;
                if inside(base) {
                    return lo + i;
                }
            }
            return hi - 1;
        }
        // Median of three as the pivot, parked at hi − 1.
        let mid = lo + (hi - lo) / 2;
        let (a, b, c) = (lo, mid, hi - 1);
        let m = if order(&v[a], &v[b]) == Ordering::Less {
            if order(&v[b], &v[c]) == Ordering::Less {
                b
            } else if order(&v[a], &v[c]) == Ordering::Less {
                c
            } else {
                a
            }
        } else if order(&v[a], &v[c]) == Ordering::Less {
            a
        } else if order(&v[b], &v[c]) == Ordering::Less {
            c
        } else {
            b
        };
        v.swap(m, hi - 1);
        let p = v[hi - 1];
        let mut s = lo;
        let mut mass = 0.0f64;
        for i in lo..hi - 1 {
            if order(&v[i], &p) == Ordering::Less {
                v.swap(i, s);
                mass += v[s].w;
                s += 1;
            }
        }
        v.swap(s, hi - 1);
        if inside(base + mass) {
            hi = s;
        } else if inside(base + mass + v[s].w) {
            return s;
        } else {
            base += mass + v[s].w;
            lo = s + 1;
        }
    }
    // One candidate left (the crossing), or none when t ran past the last pivot.
    if lo < hi { lo } else { hi.saturating_sub(1) }
}
