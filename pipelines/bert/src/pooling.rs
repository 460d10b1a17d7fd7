//! Sentence pooling and L2 normalisation over one sequence's last hidden states.
//!
//! Key choice: pooling sees only the real tokens of a sequence (batches are packed, see
//! [`crate::model`]), so "mean over the attention mask" is a plain mean here, accumulated in
//! f64 so long inputs do not lose precision.

use crate::config::Pooling;

/// Pool `hidden[len, h]` into one `h`-vector.
pub fn pool(hidden: &[f32], h: usize, mode: Pooling) -> Vec<f32> {
    let len = hidden.len() / h.max(1);
    if len == 0 {
        return vec![0.0; h];
    }
    match mode {
        Pooling::Cls => hidden[..h].to_vec(),
        Pooling::LastToken => hidden[(len - 1) * h..len * h].to_vec(),
        Pooling::Mean => {
            let mut acc = vec![0f64; h];
            for row in hidden.chunks_exact(h) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a += f64::from(v);
                }
            }
            acc.iter().map(|a| (a / len as f64) as f32).collect()
        }
        Pooling::Max => {
            let mut acc = vec![f32::NEG_INFINITY; h];
            for row in hidden.chunks_exact(h) {
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = a.max(v);
                }
            }
            acc
        }
    }
}

/// Scale `v` to unit L2 norm (as `torch.nn.functional.normalize`, eps 1e-12).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    let inv = 1.0 / norm.max(1e-12);
    for x in v.iter_mut() {
        *x = (f64::from(*x) * inv) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_on_a_small_matrix() {
        let hid = [1.0, -2.0, 3.0, 4.0, 5.0, -6.0];
        assert_eq!(pool(&hid, 2, Pooling::Cls), vec![1.0, -2.0]);
        assert_eq!(pool(&hid, 2, Pooling::LastToken), vec![5.0, -6.0]);
        assert_eq!(pool(&hid, 2, Pooling::Mean), vec![3.0, -4.0 / 3.0]);
        assert_eq!(pool(&hid, 2, Pooling::Max), vec![5.0, 4.0]);
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
    }
}
