//! Native GGUF block GEMV/GEMM: `y[m,n] = x[m,k] · W[n,k]^T` with `W` kept in its
//! GGUF blocks (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K) and the x rows quantized to
//! 8-bit blocks the way ggml does before its dot products.
//!
//! Key design choices:
//! - ggml's published numerics: x is quantized per row to Q8_1 (Q4_1/Q5_1), Q8_0
//!   (Q4_0/Q5_0/Q8_0) or Q8_K (K-quants) ([`act`]); each block's dot product is an
//!   exact integer sum, scaled per block in f32 ([`scalar`] reference, [`avx2`] fast
//!   path with identical integer parts; with AVX-512 VNNI the u8·i8 pair sums use
//!   `vpdpbusd`, bit-identical). Decode then streams 0.6–1.1 bytes/weight
//!   instead of 2 (f16) and agrees with llama.cpp's rounding of near-ties.
//! - One path for every m: x is quantized once per call, then weight rows are split
//!   over rayon tasks in small tiles; each row (a few hundred bytes, in L1) is dotted
//!   with every x row before the next row is read, so prefill reads the matrix once.
//! - Output goes to a column window (`ld`, `col0`) so matrices with different block
//!   types can fill one fused output (e.g. Q/K/V of mixed types).

mod act;
mod avx2;
mod blocks;
mod scalar;
mod tile;

pub use blocks::{ActType, GgufType, dequantize_row};

use super::linear::SyncPtr;
use super::simd::{Isa, isa};
use act::QuantAct;
use rayon::prelude::*;

/// A borrowed `[n, k]` matrix of GGUF blocks (row r = `row_bytes(k)` bytes).
#[derive(Clone, Copy, Debug)]
pub struct GgufMatrix<'a> {
    /// Block type.
    pub ty: GgufType,
    /// `n * ty.row_bytes(k)` bytes.
    pub data: &'a [u8],
    /// Rows (outputs).
    pub n: usize,
    /// Columns (inputs), a multiple of `ty.block_size()`.
    pub k: usize,
}

impl GgufMatrix<'_> {
    /// Whether `k` is whole blocks and `data` holds `n` rows.
    pub fn is_consistent(&self) -> bool {
        self.k.is_multiple_of(self.ty.block_size())
            && self.data.len() >= self.n * self.ty.row_bytes(self.k)
    }

    /// The raw blocks of row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.ty.row_bytes(self.k);
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantize row `r` into `out` (`k` values).
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        dequantize_row(self.ty, self.row(r), out);
    }
}

/// Rows from which ggml (llama.cpp's CPU backend) takes its tiled K-quant matmul
/// instead of `vec_dot` (`ggml_tiled_min_batch`); Q6_K's f32 order follows it (Q4_K
/// is repacked on AVX2 and takes ggml's 4-row gemm for whole groups of 4 rows).
pub const TILED_MIN_ROWS: usize = 8;

/// Of `m` activation rows in one call, how many (the first ones) take ggml's batched
/// f32 order for `ty`: Q6_K's tiled matmul (all rows from [`TILED_MIN_ROWS`] on),
/// Q4_K's q4_K_8x8 gemm (whole groups of 4 rows, from 4 rows on). Other rows, and all
/// rows of other types, equal [`gguf_row_dot`] bit for bit.
pub fn batched_rows(ty: GgufType, m: usize) -> usize {
    match ty {
        GgufType::Q6_K if m >= TILED_MIN_ROWS => m,
        GgufType::Q4_K if m > 3 => m - m % 4,
        _ => 0,
    }
}

/// Weight rows per task tile.
const TILE_ROWS: usize = 16;

/// `y[m,n] = x[m,k] · W^T (+ bias)`, `out.len() == m * n`.
pub fn gguf_linear(x: &[f32], w: GgufMatrix<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    gguf_linear_into(x, w, out, w.n, 0);
    if let Some(b) = bias {
        for row in out.chunks_exact_mut(w.n) {
            for (o, bi) in row.iter_mut().zip(b) {
                *o += *bi;
            }
        }
    }
}

/// `out[i*ld + col0 + j] = Σ_k x[i,k] · W[j,k]` for `j < n` (columns outside the
/// window are untouched). `m = x.len() / k`; `out` must hold `m` rows of `ld`.
pub fn gguf_linear_into(x: &[f32], w: GgufMatrix<'_>, out: &mut [f32], ld: usize, col0: usize) {
    let (n, k) = (w.n, w.k);
    debug_assert!(w.is_consistent(), "gguf_linear: inconsistent matrix");
    if n == 0 || k == 0 || !w.is_consistent() || col0 + n > ld {
        return;
    }
    let m = (x.len() / k).min(out.len() / ld);
    debug_assert_eq!(x.len(), m * k, "gguf_linear: x.len() not m*k");
    if m == 0 {
        return;
    }
    let mut act = QuantAct::new(w.ty.act_type(), &x[..m * k], k);
    act.batch_rows = batched_rows(w.ty, m);
    let isa = isa();
    let use_vnni = isa == Isa::Avx512 && vnni();
    let tiled = cfg!(target_arch = "x86_64") && use_vnni && tile::has_tile(w.ty);
    if tiled && tile::code_offset(w.ty) != 0 {
        act.offset_corrections(tile::code_offset(w.ty));
    }
    let threads = rayon::current_num_threads().max(1);
    let work = n * k * m;
    let chunk = if work < (1 << 16) || threads == 1 {
        n
    } else {
        n.div_ceil(threads * 4).max(TILE_ROWS)
    };
    let optr = SyncPtr(out.as_mut_ptr());
    let rows: Vec<act::ActRow<'_>> = (0..m).map(|i| act.row(i)).collect();
    let multi = cfg!(target_arch = "x86_64") && isa >= Isa::Avx2 && avx2::has_multi(w.ty);
    let run = |r0: usize| {
        let r1 = (r0 + chunk).min(n);
        let mut t0 = r0;
        while t0 < r1 {
            let t1 = (t0 + TILE_ROWS).min(r1);
            let mut i0 = 0;
            if tiled && m == 1 {
                let (a, c) = ([rows[0]], [act.corr_row(0)]);
                let ahead = tile::DECODE_ROWS * w.ty.row_bytes(k);
                let mut r = t0;
                while r < t1 {
                    let mut v = [[0f32; 1]; tile::DECODE_ROWS];
                    if r + tile::DECODE_ROWS <= t1 {
                        let ws = std::array::from_fn(|j| w.row(r + j));
                        // SAFETY: `tiled` implies AVX2+FMA+F16C+AVX512-VNNI/VL and a tile
                        // type; rows are whole rows; `corr` was filled for signed types.
                        unsafe { tile::tile_dots(w.ty, ws, a, c, &mut v, ahead) };
                    } else {
                        for (j, vj) in v.iter_mut().enumerate().take(t1 - r) {
                            let mut one = [[0f32; 1]; 1];
                            // SAFETY: as above.
                            unsafe { tile::tile_dots(w.ty, [w.row(r + j)], a, c, &mut one, 0) };
                            *vj = one[0];
                        }
                    }
                    for (j, vj) in v.iter().enumerate().take(t1 - r) {
                        // SAFETY: as below.
                        unsafe { *optr.ptr().add(col0 + r + j) = vj[0] };
                    }
                    r += tile::DECODE_ROWS;
                }
                i0 = 1;
            } else if tiled {
                while i0 + tile::ROWS <= m {
                    let group = [rows[i0], rows[i0 + 1], rows[i0 + 2], rows[i0 + 3]];
                    let cg: [&[i32]; tile::ROWS] = std::array::from_fn(|j| act.corr_row(i0 + j));
                    let put = |r: usize, v: &[f32; tile::ROWS]| {
                        for (j, vj) in v.iter().enumerate() {
                            // SAFETY: as below.
                            unsafe { *optr.ptr().add((i0 + j) * ld + col0 + r) = *vj };
                        }
                    };
                    let mut r = t0;
                    while r + 2 <= t1 {
                        let mut v = [[0f32; tile::ROWS]; 2];
                        // SAFETY: `tiled` implies AVX2+FMA+F16C+AVX512-VNNI/VL and a tile
                        // type; rows are whole rows; `corr` was filled for signed types.
                        unsafe {
                            tile::tile_dots(w.ty, [w.row(r), w.row(r + 1)], group, cg, &mut v, 0)
                        };
                        put(r, &v[0]);
                        put(r + 1, &v[1]);
                        r += 2;
                    }
                    if r < t1 {
                        let mut v = [[0f32; tile::ROWS]; 1];
                        // SAFETY: as above.
                        unsafe { tile::tile_dots(w.ty, [w.row(r)], group, cg, &mut v, 0) };
                        put(r, &v[0]);
                    }
                    i0 += tile::ROWS;
                }
            } else if multi {
                while i0 + avx2::MULTI <= m {
                    let group = [rows[i0], rows[i0 + 1], rows[i0 + 2], rows[i0 + 3]];
                    for r in t0..t1 {
                        let mut v = [0f32; avx2::MULTI];
                        // SAFETY: `multi` implies AVX2+FMA+F16C and a multi-row type;
                        // `use_vnni` that AVX512-VNNI/VL were detected.
                        unsafe {
                            if use_vnni {
                                avx2::row_dots_vnni(w.ty, w.row(r), group, &mut v)
                            } else {
                                avx2::row_dots(w.ty, w.row(r), group, &mut v)
                            }
                        };
                        for (j, vj) in v.iter().enumerate() {
                            // SAFETY: as below.
                            unsafe { *optr.ptr().add((i0 + j) * ld + col0 + r) = *vj };
                        }
                    }
                    i0 += avx2::MULTI;
                }
            }
            for (i, a) in rows.iter().enumerate().skip(i0) {
                for r in t0..t1 {
                    let v = row_dot(isa, w.ty, w.row(r), *a);
                    // SAFETY: i < m rows of ld, col0 + r < ld; column r belongs to this task.
                    unsafe { *optr.ptr().add(i * ld + col0 + r) = v };
                }
            }
            t0 = t1;
        }
    };
    if chunk >= n {
        run(0);
    } else {
        (0..n.div_ceil(chunk))
            .into_par_iter()
            .for_each(|c| run(c * chunk));
    }
}

/// Whether AVX512-VNNI (+VL) is there for `vpdpbusd` (used when the ISA is Avx512).
fn vnni() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

#[inline]
fn row_dot(isa: Isa, ty: GgufType, w: &[u8], a: act::ActRow<'_>) -> f32 {
    match isa {
        // SAFETY: Avx512 + vnni() means AVX512-VNNI/VL were detected on top of AVX2.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if vnni() => unsafe { avx2::row_dot_vnni(ty, w, a) },
        // SAFETY: Avx2/Avx512 imply AVX2+FMA+F16C were detected; `w` is one whole row.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => unsafe { avx2::row_dot(ty, w, a) },
        _ => scalar::row_dot(ty, w, a),
    }
}

/// What a kernel sees of an activation row (for tests and error analysis).
#[derive(Clone, Debug)]
pub struct QuantizedRow {
    /// The dequantized codes `d·q` (`k` values).
    pub values: Vec<f32>,
    /// Per 32-block `f16(d·Σq)` for Q8_1 (the term the weight's min multiplies); else empty.
    pub block_sums: Vec<f32>,
}

/// Quantize one activation row as the kernels for `ty` do.
pub fn quantize_activation(ty: GgufType, x: &[f32]) -> QuantizedRow {
    let a = QuantAct::new(ty.act_type(), x, x.len());
    QuantizedRow {
        values: a.dequantized(),
        block_sums: a.s.clone(),
    }
}

/// One row dot (`w` = one row's blocks for `x.len()` elements) on a chosen ISA;
/// an ISA the CPU lacks falls back to the scalar body.
pub fn gguf_row_dot(ty: GgufType, isa_req: Isa, w: &[u8], x: &[f32]) -> f32 {
    let a = QuantAct::new(ty.act_type(), x, x.len());
    let eff = if isa_req <= super::simd::detected_isa() {
        isa_req
    } else {
        Isa::Scalar
    };
    row_dot(eff, ty, w, a.row(0))
}
