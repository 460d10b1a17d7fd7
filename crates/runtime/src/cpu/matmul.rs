//! Dense f32 matrix products through the `gemm` crate.
//!
//! Key design choice: one wrapper per operand layout; gemm's own rayon parallelism is
//! used when the product is big enough.

/// out[m,n] = a[m,k] · b[k,n] (all row-major).
pub fn matmul(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    debug_assert!(a.len() >= m * k && b.len() >= m.min(1) * k * n && out.len() >= m * n);
    if a.len() < m * k || b.len() < k * n || out.len() < m * n || m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out[..m * n].fill(0.0);
        return;
    }
    // SAFETY: the lengths were checked above; strides describe row-major a, b and out.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism(m * n * k),
        );
    }
}

/// out[m,n] = a[m,k] · w[n,k]^T (the `nn.Linear` layout).
pub(crate) fn gemm_nt(a: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    if a.len() < m * k || w.len() < n * k || out.len() < m * n {
        debug_assert!(false, "gemm_nt: short operand");
        return;
    }
    // SAFETY: the lengths were checked above; rhs(kk, j) = w[j*k + kk].
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism(m * n * k),
        );
    }
}

fn parallelism(flops: usize) -> gemm::Parallelism {
    let t = rayon::current_num_threads();
    if flops < (1 << 18) || t <= 1 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(t)
    }
}
