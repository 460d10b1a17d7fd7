//! Causal attention with llama.cpp's default (non-flash) CPU numerics, for native GGUF
//! weights: K/V cached at f16 precision, q rounded to f16 before `q·k`, softmax in f32
//! with 8-lane group sums added in f64, probabilities rounded to f16 before they weight V.
//!
//! Key design choice: the cache is f16, as ggml's is (half the bytes of f32 to stream
//! per token), widened to f32 as it is read (`vcvtph2ps`), and the other roundings
//! happen where ggml converts to f16 (`mul_mat` with an f16 `src0` converts `src1`);
//! this reproduces llama.cpp's near-tie behaviour bit for bit. Work is split over
//! (query token, head) pairs with rayon when there is enough of it.

use favlo_runtime::cpu::AttnShape;
use half::f16;
use rayon::prelude::*;

/// Store `src` as f16 (round to nearest even, as ggml's cache store).
pub(crate) fn store_f16(src: &[f32], dst: &mut [f16]) {
    for (d, v) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(*v);
    }
}

/// Round every value to the nearest f16 (kept as f32).
pub(crate) fn round_f16(x: &mut [f32]) {
    for v in x {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// ggml's `rms_norm` then `mul`: Σx² in f64 of f32 products, `scale = 1/sqrtf(mean+eps)`
/// in f32, `y = (x·scale)·w`. `x`, `out`: `[t, w.len()]`.
pub(crate) fn rms_norm_ggml(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    for (xr, yr) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let sum: f64 = xr.iter().map(|v| f64::from(v * v)).sum();
        let mean = (sum / n as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for ((y, v), g) in yr.iter_mut().zip(xr).zip(w) {
            *y = (v * scale) * g;
        }
    }
}

/// ggml's AVX2 `expf` (a restatement of its published algorithm: range reduction by
/// `n = round(x·log2 e)` with the 1.5·2^23 shifter, two-part ln 2, a degree-5
/// polynomial, `k·j + k` with `k = 2^n`); outside |n| ≤ 126 it defers to libm.
#[inline(always)]
pub(crate) fn ggml_expf(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    let z = x.mul_add(f32::from_bits(0x3FB8_AA3B), SHIFT);
    let n = z - SHIFT;
    if n.abs() > 126.0 {
        return x.exp();
    }
    let b = (-n).mul_add(f32::from_bits(0x3F31_7200), x);
    let b = (-n).mul_add(f32::from_bits(0x35BF_BE8E), b);
    let k = f32::from_bits((z.to_bits() << 23).wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let p43 = f32::from_bits(0x3C07_2010).mul_add(b, f32::from_bits(0x3D2B_9F17));
    let p21 = f32::from_bits(0x3E2A_AF33).mul_add(b, f32::from_bits(0x3EFF_FEDB));
    let j = p43
        .mul_add(u, p21)
        .mul_add(u, f32::from_bits(0x3F7F_FFF6) * b);
    j.mul_add(k, k)
}

#[inline(always)]
fn swiglu_body(g: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &x), &u) in out.iter_mut().zip(g).zip(up) {
        *o = x / (1.0 + ggml_expf(0.0 - x)) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn swiglu_fma(g: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_body(g, up, out);
}

/// ggml's `swiglu`: `silu(g)·up` with `silu(x) = x / (1 + expf(−x))` on its AVX2 `expf`.
pub(crate) fn swiglu_ggml(g: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected at run time.
        unsafe { swiglu_fma(g, up, out) };
        return;
    }
    swiglu_body(g, up, out);
}

/// Output dimensions one p·V pass keeps in registers (8 AVX2 accumulators).
const PV_DIMS: usize = 64;

/// Lanes of one AVX2 register (tinyBLAS keeps one accumulator: element j → lane j % 8).
const LANES: usize = 8;
/// Slots of `ggml_vec_dot_f16` on AVX2: four 8-lane accumulators, element j → slot j % 32.
const SLOTS: usize = 32;

/// tinyBLAS's `hsum` of 8 lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#[inline]
fn hsum8(a: &[f32; LANES]) -> f32 {
    let s = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (s[0] + s[2]) + (s[1] + s[3])
}

/// `GGML_F32x8_REDUCE` of 4 accumulators: (r0+r2)+(r1+r3) lane-wise, halves added,
/// then two `hadd`s: ((t0+t1)+(t2+t3)).
#[inline]
fn reduce32(a: &[f32; SLOTS]) -> f32 {
    let mut c = [0f32; LANES];
    for (l, cl) in c.iter_mut().enumerate() {
        *cl = (a[l] + a[16 + l]) + (a[8 + l] + a[24 + l]);
    }
    let t = [c[0] + c[4], c[1] + c[5], c[2] + c[6], c[3] + c[7]];
    (t[0] + t[1]) + (t[2] + t[3])
}

/// Which of ggml's two f16 dot products a `mul_mat` uses: tinyBLAS when the batch has
/// ≥ 2 query rows (`llamafile_sgemm` declines n < 2), else `ggml_vec_dot_f16`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dot {
    Tiny,
    Vec,
}

/// `q·k` for one key row in `dot`'s accumulation order (hd % 8 == 0).
#[inline(always)]
fn qk(qh: &[f32], kr: &[f16], dot: Dot) -> f32 {
    if dot == Dot::Tiny {
        let mut acc = [0f32; LANES];
        for (qc, kc) in qh.chunks_exact(LANES).zip(kr.chunks_exact(LANES)) {
            for l in 0..LANES {
                acc[l] = qc[l].mul_add(kc[l].to_f32(), acc[l]);
            }
        }
        return hsum8(&acc);
    }
    let np = qh.len() / SLOTS * SLOTS;
    let mut acc = [0f32; SLOTS];
    for (qc, kc) in qh[..np].chunks_exact(SLOTS).zip(kr.chunks_exact(SLOTS)) {
        for l in 0..SLOTS {
            acc[l] = qc[l].mul_add(kc[l].to_f32(), acc[l]);
        }
    }
    // Leftovers past the last full 32 are added in f64, one f32 product each.
    let mut sum = f64::from(reduce32(&acc));
    for (a, b) in qh[np..].iter().zip(&kr[np..]) {
        sum += f64::from(a * b.to_f32());
    }
    sum as f32
}

/// [`qk`] with explicit AVX2 FMAs (LLVM turned the 32-slot loop into 4-wide pieces
/// with lane inserts): slot `l` is lane `l % 8` of accumulator `l / 8`, so every
/// slot sees the same FMAs in the same order and the result is bit-identical.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `qh.len() == kr.len()`, a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn qk_avx2(qh: &[f32], kr: &[f16], dot: Dot) -> f32 {
    use std::arch::x86_64::*;
    let hd = qh.len().min(kr.len());
    let (q, k) = (qh.as_ptr(), kr.as_ptr());
    // SAFETY: every load reads 8 values at an offset + 8 ≤ hd of both rows.
    unsafe {
        let kv = |o: usize| _mm256_cvtph_ps(_mm_loadu_si128(k.add(o) as *const __m128i));
        if dot == Dot::Tiny {
            let mut acc = _mm256_setzero_ps();
            for c in (0..hd / LANES * LANES).step_by(LANES) {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(c)), kv(c), acc);
            }
            let mut a = [0f32; LANES];
            _mm256_storeu_ps(a.as_mut_ptr(), acc);
            return hsum8(&a);
        }
        let np = hd / SLOTS * SLOTS;
        let mut acc = [_mm256_setzero_ps(); 4];
        for c in (0..np).step_by(SLOTS) {
            for (r, a) in acc.iter_mut().enumerate() {
                let o = c + r * LANES;
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(o)), kv(o), *a);
            }
        }
        let mut a = [0f32; SLOTS];
        for (r, v) in acc.iter().enumerate() {
            _mm256_storeu_ps(a.as_mut_ptr().add(r * LANES), *v);
        }
        let mut sum = f64::from(reduce32(&a));
        for (x, y) in qh[np..hd].iter().zip(&kr[np..hd]) {
            sum += f64::from(x * y.to_f32());
        }
        sum as f32
    }
}

/// One slot's p·V over 64 dimensions starting at `base` of each key row: keys
/// `l, l + width, …` below `len`, each `acc = fma(p_j, v_j, acc)` in that order (the
/// portable loop's arithmetic, with the accumulators in 8 registers).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `v[j * stride + base..][..64]` must exist for
/// every such key.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pv_slot64_avx2(
    p: &[f32],
    v: &[f16],
    stride: usize,
    base: usize,
    l: usize,
    width: usize,
    len: usize,
) -> [f32; PV_DIMS] {
    use std::arch::x86_64::*;
    let mut out = [0f32; PV_DIMS];
    // SAFETY: the caller guarantees the features and the row extents.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); PV_DIMS / 8];
        let mut j = l;
        while j < len {
            let w = _mm256_set1_ps(*p.get_unchecked(j));
            let vp = v.as_ptr().add(j * stride + base);
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(8 * r) as *const __m128i));
                *a = _mm256_fmadd_ps(w, x, *a);
            }
            j += width;
        }
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * r), *a);
        }
    }
    out
}

/// One query head: scores over `len` keys, softmax, weighted V, in ggml's order for `dot`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn head_body<const AVX2: bool>(
    qh: &[f32],
    k_cache: &[f16],
    v_cache: &[f16],
    stride: usize,
    off: usize,
    len: usize,
    scale: f32,
    dot: Dot,
    p: &mut Vec<f32>,
    lanes: &mut Vec<f32>,
    o: &mut [f32],
) {
    let hd = qh.len();
    p.clear();
    for j in 0..len {
        let kr = &k_cache[j * stride + off..j * stride + off + hd];
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: AVX2 callers are `head_fma` (features detected); rows have hd values.
            p.push(unsafe { qk_avx2(qh, kr, dot) } * scale);
            continue;
        }
        p.push(qk(qh, kr, dot) * scale);
    }
    let max = p.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    // ggml_vec_soft_max_f32 (AVX2): each aligned group of 8 exps is reduced in f32 by
    // the 8-lane hsum, and the group sums are added in f64 (masked keys past `len`
    // are exact zeros in ggml's padded row, so a short last group sums the same).
    let mut sum = 0f64;
    for g in p.chunks_mut(LANES) {
        let mut e = [0f32; LANES];
        for (ei, v) in e.iter_mut().zip(g.iter_mut()) {
            *v = ggml_expf(*v - max);
            *ei = *v;
        }
        sum += f64::from(hsum8(&e));
    }
    let inv = (1.0 / sum) as f32;
    // p·V over ggml's key axis (padded to a multiple of 256 with zero weights, so both
    // dots run without leftovers): slot j % 8 (tinyBLAS) or j % 32 (vec_dot); `lanes`
    // holds `width` slots per output dimension.
    // Stored slot-major (`lanes[l * hd + d]`) and computed slot by slot, 64 dimensions
    // at a time, so a slot's accumulators stay in registers while its keys
    // (j ≡ l mod width, in increasing j) stream past; every (d, l) accumulator sees
    // the same FMAs in the same order as a key-by-key sweep.
    let width = if dot == Dot::Tiny { LANES } else { SLOTS };
    lanes.clear();
    lanes.resize(hd * width, 0.0);
    for v in p.iter_mut() {
        *v = f16::from_f32(*v * inv).to_f32();
    }
    for l in 0..width.min(len) {
        let mut d0 = 0;
        while d0 < hd {
            let dn = (hd - d0).min(PV_DIMS);
            let mut acc = [0f32; PV_DIMS];
            #[cfg(target_arch = "x86_64")]
            if AVX2 && dn == PV_DIMS {
                // SAFETY: AVX2 callers are `head_fma` (features detected); every key
                // row j < len holds hd ≥ d0 + 64 values at j·stride + off.
                acc = unsafe { pv_slot64_avx2(p, v_cache, stride, off + d0, l, width, len) };
                lanes[l * hd + d0..l * hd + d0 + dn].copy_from_slice(&acc);
                d0 += dn;
                continue;
            }
            let mut j = l;
            while j < len {
                let w = p[j];
                let vr = &v_cache[j * stride + off + d0..j * stride + off + d0 + dn];
                for (a, x) in acc[..dn].iter_mut().zip(vr) {
                    *a = w.mul_add(x.to_f32(), *a);
                }
                j += width;
            }
            lanes[l * hd + d0..l * hd + d0 + dn].copy_from_slice(&acc[..dn]);
            d0 += dn;
        }
    }
    for (d, y) in o.iter_mut().enumerate() {
        *y = if dot == Dot::Tiny {
            let mut a8 = [0f32; LANES];
            for (l, a) in a8.iter_mut().enumerate() {
                *a = lanes[l * hd + d];
            }
            hsum8(&a8)
        } else {
            let mut a32 = [0f32; SLOTS];
            for (l, a) in a32.iter_mut().enumerate() {
                *a = lanes[l * hd + d];
            }
            reduce32(&a32)
        };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn head_fma(
    qh: &[f32],
    k_cache: &[f16],
    v_cache: &[f16],
    stride: usize,
    off: usize,
    len: usize,
    scale: f32,
    dot: Dot,
    p: &mut Vec<f32>,
    lanes: &mut Vec<f32>,
    o: &mut [f32],
) {
    head_body::<true>(
        qh, k_cache, v_cache, stride, off, len, scale, dot, p, lanes, o,
    );
}

/// q, out: `[t, n_heads*hd]`; f16 caches `[capacity, n_kv_heads*hd]`;
/// token i sits at position `n_past + i` and sees positions `0..=n_past+i`.
/// `hd` must be a multiple of 8 (ggml's f16 dot lanes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_ggml(
    q: &[f32],
    k_cache: &[f16],
    v_cache: &[f16],
    out: &mut [f32],
    shape: AttnShape,
    n_past: usize,
    t: usize,
    scale: f32,
) {
    let (nh, hd) = (shape.n_heads, shape.head_dim);
    let kvd = shape.n_kv_heads * hd;
    let group = (nh / shape.n_kv_heads.max(1)).max(1);
    let dot = if t >= 2 { Dot::Tiny } else { Dot::Vec };
    #[cfg(target_arch = "x86_64")]
    let fma = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let one = |(idx, o): (usize, &mut [f32])| {
        let (i, h) = (idx / nh, idx % nh);
        let g = h / group;
        let len = n_past + i + 1;
        let mut qh: Vec<f32> = q[idx * hd..(idx + 1) * hd].to_vec();
        round_f16(&mut qh);
        let (mut p, mut lanes) = (Vec::with_capacity(len), Vec::new());
        let args = (&qh[..], k_cache, v_cache, kvd, g * hd, len, scale, dot);
        #[cfg(target_arch = "x86_64")]
        if fma {
            // SAFETY: AVX2, FMA and F16C were detected at run time.
            unsafe {
                head_fma(
                    args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7, &mut p,
                    &mut lanes, o,
                )
            };
            return;
        }
        head_body::<false>(
            args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7, &mut p, &mut lanes, o,
        );
    };
    let out = &mut out[..t * nh * hd];
    if t * nh * (n_past + t) * hd < (1 << 16) {
        out.chunks_exact_mut(hd).enumerate().for_each(one);
    } else {
        out.par_chunks_exact_mut(hd).enumerate().for_each(one);
    }
}

#[cfg(test)]
mod tests {
    use super::{Dot, attention_ggml, ggml_expf, qk, round_f16};
    use half::f16;

    /// The AVX2 q·k equals the portable one bit for bit, in both slot orders, with
    /// and without leftovers past the last 32.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn qk_avx2_is_bit_identical() {
        if !(is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"))
        {
            return;
        }
        let mut s = 7u64;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        for hd in [64usize, 72, 128] {
            for _ in 0..50 {
                let mut q: Vec<f32> = (0..hd).map(|_| rnd() * 3.0).collect();
                let k: Vec<f16> = (0..hd).map(|_| f16::from_f32(rnd() * 3.0)).collect();
                round_f16(&mut q);
                for dot in [Dot::Tiny, Dot::Vec] {
                    // SAFETY: AVX2/FMA/F16C were detected; equal lengths, multiples of 8.
                    let fast = unsafe { super::qk_avx2(&q, &k, dot) };
                    assert_eq!(fast.to_bits(), qk(&q, &k, dot).to_bits(), "hd {hd}");
                }
            }
        }
    }
    use favlo_runtime::cpu::AttnShape;

    /// Both dot orders (tinyBLAS for ≥ 2 query tokens, vec_dot_f16 for one) against an
    /// f64 causal softmax attention of the same f16-rounded q/k/v: the only further
    /// roundings are f32 sums and f16 probabilities (≤ 2^-11 relative), so
    /// |out − ref| ≤ 2e-3 · max|v|. Odd lengths and GQA exercise the 8/32-slot tails.
    #[test]
    fn ggml_attention_close_to_f64_reference() {
        let shape = AttnShape {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
        };
        let (nh, hd, kvd) = (4, 64, 128);
        let val = |i: usize, s: usize| (((i * s) % 997) as f32 / 498.5 - 1.0) * 0.8;
        let cap = 50;
        let mut kc: Vec<f32> = (0..cap * kvd).map(|i| val(i, 31)).collect();
        let mut vc: Vec<f32> = (0..cap * kvd).map(|i| val(i, 57)).collect();
        round_f16(&mut kc);
        round_f16(&mut vc);
        let k16: Vec<f16> = kc.iter().map(|&x| f16::from_f32(x)).collect();
        let v16: Vec<f16> = vc.iter().map(|&x| f16::from_f32(x)).collect();
        for (n_past, t) in [(0usize, 3usize), (36, 1), (40, 7), (45, 1)] {
            let q: Vec<f32> = (0..t * nh * hd)
                .map(|i| val(i + n_past, 13) * 3.0)
                .collect();
            let mut out = vec![0f32; t * nh * hd];
            let scale = 0.125;
            attention_ggml(&q, &k16, &v16, &mut out, shape, n_past, t, scale);
            for i in 0..t {
                for h in 0..nh {
                    let g = h / 2;
                    let qh: Vec<f64> = q[(i * nh + h) * hd..(i * nh + h + 1) * hd]
                        .iter()
                        .map(|&x| f64::from(half::f16::from_f32(x).to_f32()))
                        .collect();
                    let len = n_past + i + 1;
                    let s: Vec<f64> = (0..len)
                        .map(|j| {
                            let kr = &kc[j * kvd + g * hd..j * kvd + (g + 1) * hd];
                            qh.iter()
                                .zip(kr)
                                .map(|(a, &b)| a * f64::from(b))
                                .sum::<f64>()
                                * f64::from(scale)
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..hd {
                        let want: f64 = (0..len)
                            .map(|j| e[j] / z * f64::from(vc[j * kvd + g * hd + d]))
                            .sum();
                        let got = f64::from(out[(i * nh + h) * hd + d]);
                        assert!(
                            (got - want).abs() <= 2e-3 * 0.8,
                            "n_past {n_past} t {t} ({i},{h},{d}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ggml_expf_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (ggml_expf(x), x.exp());
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            assert!(ulps <= 2, "{x}: {a} vs {b} ({ulps} ulp)");
            x += 0.0137;
        }
    }
}
