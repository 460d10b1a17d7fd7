//! Embedding gather: copy (converting) rows of a table into a dense f32 output.
//!
//! Key design choice: reuses [`WeightRef::row_to_f32`], so every table type the linear
//! kernels read (f32, bf16, f16, MX) can be an embedding table (tied embeddings).

use super::weight::WeightRef;

/// out[i, :] = table[ids[i], :]; an out-of-range id gives a zero row.
pub fn embedding(table: WeightRef<'_>, ids: &[u32], out: &mut [f32]) {
    let (n, k) = (table.n(), table.k());
    debug_assert_eq!(
        out.len(),
        ids.len() * k,
        "embedding: out.len() != ids.len()*k"
    );
    if k == 0 || !table.is_consistent() {
        return;
    }
    for (row, &id) in out.chunks_exact_mut(k).zip(ids) {
        let id = id as usize;
        debug_assert!(id < n, "embedding: id {id} out of range {n}");
        if id < n {
            table.row_to_f32(id, row);
        } else {
            row.fill(0.0);
        }
    }
}
