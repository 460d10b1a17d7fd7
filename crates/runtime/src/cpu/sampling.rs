//! argmax and top-k over logits.
//!
//! Key design choice: NaN never wins; ties go to the lower index (deterministic).

/// Index of the largest value (first one on ties; 0 for an empty or all-NaN slice).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &v) in x.iter().enumerate() {
        if v > bv || (!found && !v.is_nan()) {
            best = i;
            bv = v;
            found = true;
        }
    }
    best
}

/// The `k` largest values with their indexes, sorted descending (ties: lower index first).
pub fn top_k(x: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = x
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, f)| !f.is_nan())
        .collect();
    let k = k.min(v.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < v.len() {
        v.select_nth_unstable_by(k - 1, cmp);
        v.truncate(k);
    }
    v.sort_unstable_by(cmp);
    v
}
