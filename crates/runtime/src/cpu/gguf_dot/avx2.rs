//! AVX2 block dot products (the [`super::scalar`] contract, same integer sums).
//!
//! Key design choices:
//! - Unsigned weight codes (Q4_1, Q5_1, Q4_K, Q6_K before its −32) meet the signed
//!   activation bytes in `vpmaddubsw` directly (no saturation: |pair| ≤ 2·63·127).
//!   Signed codes (Q4_0, Q5_0, Q8_0) use `|w|` · `sign(y, w)`.
//! - 32-element types accumulate `d_w·d_y · Σ` in 8 f32 lanes with one FMA per block;
//!   K-quants keep the whole super-block's integer sum (scales folded in with
//!   `vpmaddwd`) and convert once per 256 elements.
//! - Every load is unaligned and stays inside the row: `w` holds `nb` whole blocks and
//!   `a.qs` the matching `nb · block` codes (checked by the caller).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::act::ActRow;
use super::blocks::{GgufType, k4_scales};

/// The two f16 values at `p`, `p+2` (one 32-bit load; Q6_K reads its d at 208 as the
/// high half of the word at 206: a 16-bit insert would merge
/// into, and wait for, whatever register LLVM picks — measured 3× slower on Q4_1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn h2f2(p: *const u8) -> (f32, f32) {
    // SAFETY: callers pass a pointer to 4 readable bytes inside a block.
    let bits = unsafe { std::ptr::read_unaligned(p as *const u32) };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// The lane sums of four i32 vectors, `[Σv0, Σv1, Σv2, Σv3]` (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum4_i32(v: [__m256i; 4]) -> [i32; 4] {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    let mut out = [0i32; 4];
    // SAFETY: out holds 16 bytes.
    unsafe { _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, s) };
    out
}

/// 32 nibbles of 16 bytes: low nibbles (elements 0..16) then high (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn nibbles16(p: *const u8) -> __m256i {
    // SAFETY: p points at 16 readable bytes.
    let raw = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let m4 = _mm256_set1_epi8(0x0F);
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4)
}

/// Q5 high bits (u32, bit j = element j) as bytes 0x10 / 0x00.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(v, shuf);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Σ of unsigned `w` · signed `y` into 8 i32 lanes (4 products each): AVX2
/// `vpmaddubsw`+`vpmaddwd`, or one AVX512-VNNI `vpdpbusd` when `VNNI` (same exact
/// sums: our operands never saturate the 16-bit pair sums).
///
/// # Safety
/// AVX2 (and with `VNNI`, AVX512-VNNI + VL) must be available.
#[inline(always)]
unsafe fn udot<const VNNI: bool>(w: __m256i, y: __m256i) -> __m256i {
    // SAFETY: the caller guarantees the features.
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, y)
        } else {
            _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1))
        }
    }
}

/// Σ of signed `w` · signed `y` into 8 i32 lanes (`|w|` · `sign(y, w)`).
///
/// # Safety
/// As [`udot`].
#[inline(always)]
unsafe fn sdot<const VNNI: bool>(w: __m256i, y: __m256i) -> __m256i {
    // SAFETY: as udot.
    unsafe { udot::<VNNI>(_mm256_abs_epi8(w), _mm256_sign_epi8(y, w)) }
}

/// Bytes ahead of the current block to prefetch (the stream continues into the next
/// row, which the hardware prefetcher does not always anticipate at row ends).
const PREFETCH: usize = 640;

#[inline(always)]
fn prefetch(b: *const u8) {
    // SAFETY: prefetching never faults; the address is only a hint.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH) as *const i8) };
}

/// Bytes ahead of the current K-quant super-block to prefetch in one-row dots.
const KQ_AHEAD: usize = 1024;

/// One row: raw blocks of `ty` · quantized activations.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` must hold `a.qs.len() / block` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn row_dot(ty: GgufType, w: &[u8], a: ActRow<'_>) -> f32 {
    // SAFETY: same contract.
    unsafe { row_dot_body::<false>(ty, w, a) }
}

/// [`row_dot`] with `vpdpbusd` (bit-identical results).
///
/// # Safety
/// As [`row_dot`], plus AVX512-VNNI and AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(crate) unsafe fn row_dot_vnni(ty: GgufType, w: &[u8], a: ActRow<'_>) -> f32 {
    // SAFETY: same contract.
    unsafe { row_dot_body::<true>(ty, w, a) }
}

#[inline(always)]
unsafe fn row_dot_body<const VNNI: bool>(ty: GgufType, w: &[u8], a: ActRow<'_>) -> f32 {
    let bs = ty.block_size();
    let ts = ty.type_size();
    let nb = (a.qs.len() / bs).min(w.len() / ts);
    let wp = w.as_ptr();
    let yp = a.qs.as_ptr();
    let ld = |i: usize, off: usize| {
        // SAFETY: i < nb blocks of `bs` codes; off + 32 ≤ bs.
        unsafe { _mm256_loadu_si256(yp.add(i * bs + off) as *const __m256i) }
    };
    // SAFETY: the caller guarantees AVX2.
    let mut acc = unsafe { _mm256_setzero_ps() };
    let mut tail = 0f32;
    // SAFETY (all pointer reads below): block i spans wp[i*ts .. (i+1)*ts], i < nb.
    unsafe {
        match ty {
            GgufType::Q4_0 => {
                for i in 0..nb {
                    let b = wp.add(i * ts);
                    prefetch(b);
                    let q = _mm256_sub_epi8(nibbles16(b.add(2)), _mm256_set1_epi8(8));
                    let p = sdot::<VNNI>(q, ld(i, 0));
                    let dd = _mm256_set1_ps(h2f2(b).0 * a.d[i]);
                    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
                }
            }
            GgufType::Q4_1 => {
                for i in 0..nb {
                    let b = wp.add(i * ts);
                    prefetch(b);
                    let p = udot::<VNNI>(nibbles16(b.add(4)), ld(i, 0));
                    let (dw, mw) = h2f2(b);
                    let dd = _mm256_set1_ps(dw * a.d[i]);
                    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
                    tail += mw * a.s[i];
                }
            }
            GgufType::Q5_0 => {
                for i in 0..nb {
                    let b = wp.add(i * ts);
                    prefetch(b);
                    let qh = std::ptr::read_unaligned(b.add(2) as *const u32);
                    let q = _mm256_or_si256(nibbles16(b.add(6)), q5_bits(qh));
                    let q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
                    let p = sdot::<VNNI>(q, ld(i, 0));
                    let dd = _mm256_set1_ps(h2f2(b).0 * a.d[i]);
                    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
                }
            }
            GgufType::Q5_1 => {
                for i in 0..nb {
                    let b = wp.add(i * ts);
                    prefetch(b);
                    let qh = std::ptr::read_unaligned(b.add(4) as *const u32);
                    let q = _mm256_or_si256(nibbles16(b.add(8)), q5_bits(qh));
                    let p = udot::<VNNI>(q, ld(i, 0));
                    let (dw, mw) = h2f2(b);
                    let dd = _mm256_set1_ps(dw * a.d[i]);
                    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
                    tail += mw * a.s[i];
                }
            }
            GgufType::Q8_0 => {
                for i in 0..nb {
                    let b = wp.add(i * ts);
                    prefetch(b);
                    let q = _mm256_loadu_si256(b.add(2) as *const __m256i);
                    let p = sdot::<VNNI>(q, ld(i, 0));
                    let dd = _mm256_set1_ps(h2f2(b).0 * a.d[i]);
                    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
                }
            }
            GgufType::Q4_K | GgufType::Q6_K => {
                let mut o = [0f32];
                kquant_dots::<1>(ty, w, [a], &mut o);
                tail = o[0];
            }
            GgufType::Q5_K => return super::scalar::row_dot(ty, w, a),
        }
    }
    // SAFETY: as above.
    unsafe { hsum_ps(acc) + tail }
}

/// Up to [`MULTI`] activation rows against one row of a 32-element block type, each
/// weight block unpacked once (prefill). Every output is computed with exactly the
/// operations and order of [`row_dot`], so results are bit-identical to it.
pub(crate) const MULTI: usize = 4;

/// Whether [`row_dots`] has a multi-row body for `ty`.
pub(crate) fn has_multi(ty: GgufType) -> bool {
    !matches!(ty, GgufType::Q5_K)
}

/// See [`MULTI`]; `a.len() == M` rows, `out[r]` for row r.
///
/// # Safety
/// As [`row_dot`]; `ty` must satisfy [`has_multi`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn row_dots<const M: usize>(
    ty: GgufType,
    w: &[u8],
    a: [ActRow<'_>; M],
    out: &mut [f32; M],
) {
    // SAFETY: same contract.
    unsafe { row_dots_body::<M, false>(ty, w, a, out) }
}

/// [`row_dots`] with `vpdpbusd` (bit-identical results).
///
/// # Safety
/// As [`row_dots`], plus AVX512-VNNI and AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(crate) unsafe fn row_dots_vnni<const M: usize>(
    ty: GgufType,
    w: &[u8],
    a: [ActRow<'_>; M],
    out: &mut [f32; M],
) {
    // SAFETY: same contract.
    unsafe { row_dots_body::<M, true>(ty, w, a, out) }
}

#[inline(always)]
unsafe fn row_dots_body<const M: usize, const VNNI: bool>(
    ty: GgufType,
    w: &[u8],
    a: [ActRow<'_>; M],
    out: &mut [f32; M],
) {
    if matches!(ty, GgufType::Q4_K | GgufType::Q6_K) {
        // SAFETY: same contract.
        unsafe { kquant_dots(ty, w, a, out) };
        return;
    }
    let ts = ty.type_size();
    let nb = a
        .iter()
        .map(|r| r.qs.len() / 32)
        .min()
        .unwrap_or(0)
        .min(w.len() / ts);
    let wp = w.as_ptr();
    // SAFETY: the caller guarantees AVX2.
    let mut acc = [unsafe { _mm256_setzero_ps() }; M];
    let mut tail = [0f32; M];
    let (signed, has_min, qs_off, qh_off) = match ty {
        GgufType::Q4_0 => (true, false, 2, 0),
        GgufType::Q4_1 => (false, true, 4, 0),
        GgufType::Q5_0 => (true, false, 6, 2),
        GgufType::Q5_1 => (false, true, 8, 4),
        _ => (true, false, 2, 0),
    };
    // SAFETY (all pointer reads): block i spans wp[i*ts .. (i+1)*ts] and each row's
    // codes i*32 .. i*32+32, i < nb.
    unsafe {
        for i in 0..nb {
            let b = wp.add(i * ts);
            let q = match ty {
                GgufType::Q8_0 => _mm256_loadu_si256(b.add(2) as *const __m256i),
                GgufType::Q4_0 => _mm256_sub_epi8(nibbles16(b.add(qs_off)), _mm256_set1_epi8(8)),
                GgufType::Q4_1 => nibbles16(b.add(qs_off)),
                _ => {
                    let qh = std::ptr::read_unaligned(b.add(qh_off) as *const u32);
                    let q = _mm256_or_si256(nibbles16(b.add(qs_off)), q5_bits(qh));
                    if ty == GgufType::Q5_0 {
                        _mm256_sub_epi8(q, _mm256_set1_epi8(16))
                    } else {
                        q
                    }
                }
            };
            let qa = _mm256_abs_epi8(q);
            let (dw, mw) = h2f2(b);
            for r in 0..M {
                let y = _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 32) as *const __m256i);
                let p = if signed {
                    udot::<VNNI>(qa, _mm256_sign_epi8(y, q))
                } else {
                    udot::<VNNI>(q, y)
                };
                let dd = _mm256_set1_ps(dw * a[r].d[i]);
                acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[r]);
                if has_min {
                    tail[r] += mw * a[r].s[i];
                }
            }
        }
    }
    for r in 0..M {
        // SAFETY: as above.
        out[r] = unsafe { hsum_ps(acc[r]) } + tail[r];
    }
}

/// Q4_K / Q6_K against `M` activation rows, each super-block's codes unpacked once;
/// per row the integer sums and the f32 order are those of the one-row case (which is
/// this function with `M = 1`).
///
/// # Safety
/// As [`row_dot`]; `ty` is Q4_K or Q6_K.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
pub(crate) unsafe fn kquant_dots<const M: usize>(
    ty: GgufType,
    w: &[u8],
    a: [ActRow<'_>; M],
    out: &mut [f32; M],
) {
    let ts = ty.type_size();
    let nb = a
        .iter()
        .map(|r| r.qs.len() / 256)
        .min()
        .unwrap_or(0)
        .min(w.len() / ts);
    let wp = w.as_ptr();
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x03);
    let mut tail = [0f32; M];
    let mut mins = [0f32; M];
    let mut acc = [_mm256_setzero_ps(); M];
    // SAFETY (all pointer reads): block i spans wp[i*ts .. (i+1)*ts] and each row's
    // codes i*256 .. i*256+256, i < nb.
    unsafe {
        let ld = |r: usize, i: usize, off: usize| {
            _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 256 + off) as *const __m256i)
        };
        for i in 0..nb {
            let b = wp.add(i * ts);
            if M == 1 {
                // Decode streams the matrix once: request every line of the super-block
                // KQ_AHEAD bytes on (the one-row loop has no other prefetch).
                let mut o = 0;
                while o < ts {
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(KQ_AHEAD + o) as *const i8);
                    o += 64;
                }
            }
            let mut sumi = [_mm256_setzero_si256(); M];
            if ty == GgufType::Q4_K {
                let (sc, mn) = k4_scales(std::slice::from_raw_parts(b.add(4), 12));
                // Rows of one call share the batch flag (the driver's 4-row groups are
                // ggml's gemm groups; leftover rows come one at a time).
                let batch = a[0].batch;
                let mut pv = [[_mm256_setzero_si256(); 4]; M];
                for jj in 0..4 {
                    let raw = _mm256_loadu_si256(b.add(16 + 32 * jj) as *const __m256i);
                    let lo = _mm256_and_si256(raw, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                    let s0 = _mm256_set1_epi16(i16::from(sc[2 * jj]));
                    let s1 = _mm256_set1_epi16(i16::from(sc[2 * jj + 1]));
                    for r in 0..M {
                        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld(r, i, 64 * jj)), s0);
                        let p1 =
                            _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld(r, i, 64 * jj + 32)), s1);
                        if batch {
                            pv[r][jj] = _mm256_add_epi32(p0, p1);
                        } else {
                            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
                        }
                    }
                }
                let (wd, wmin) = h2f2(b);
                for r in 0..M {
                    let sums = &a[r].sums[16 * i..16 * i + 16];
                    let d = a[r].d[i] * wd;
                    let dmin = a[r].d[i] * wmin;
                    if batch {
                        // ggml's q4_K_8x8 gemm: one FMA per pair of sub-blocks, in order.
                        let s4 = hsum4_i32(pv[r]);
                        for jj in 0..4 {
                            let m2 = i32::from(mn[2 * jj]) * (sums[4 * jj] + sums[4 * jj + 1])
                                + i32::from(mn[2 * jj + 1]) * (sums[4 * jj + 2] + sums[4 * jj + 3]);
                            tail[r] = (s4[jj] as f32).mul_add(d, tail[r]);
                            mins[r] = (m2 as f32).mul_add(dmin, mins[r]);
                        }
                        continue;
                    }
                    let mut summ = 0i32;
                    for j in 0..8 {
                        summ += i32::from(mn[j]) * (sums[2 * j] + sums[2 * j + 1]);
                    }
                    // ggml's AVX2 gemv order (llama.cpp repacks Q4_K to q4_K_8x8 on AVX2):
                    // per super-block the scaled sums and the min terms are FMA'd into two
                    // f32 accumulators, subtracted once at the end.
                    tail[r] = (hsum_i32(sumi[r]) as f32).mul_add(d, tail[r]);
                    mins[r] = (summ as f32).mul_add(dmin, mins[r]);
                }
            } else {
                let sc = std::slice::from_raw_parts(b.add(192) as *const i8, 16);
                for h in 0..2 {
                    let ql0 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
                    let ql1 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
                    let qhv = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
                    let lows = [
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    ];
                    let highs = [
                        qhv,
                        _mm256_srli_epi16(qhv, 2),
                        _mm256_srli_epi16(qhv, 4),
                        _mm256_srli_epi16(qhv, 6),
                    ];
                    for t in 0..4 {
                        let hi = _mm256_slli_epi16(_mm256_and_si256(highs[t], m3), 4);
                        let q = _mm256_or_si256(lows[t], hi);
                        let g = 8 * h + 2 * t;
                        let scv = _mm256_set_m128i(
                            _mm_set1_epi16(i16::from(sc[g + 1])),
                            _mm_set1_epi16(i16::from(sc[g])),
                        );
                        for r in 0..M {
                            let p = _mm256_maddubs_epi16(q, ld(r, i, 128 * h + 32 * t));
                            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, scv));
                        }
                    }
                }
                // ggml's `vec_dot_q6_K_q8_K` (AVX2): the −32 correction is subtracted per
                // i32 lane (lane l holds scale groups 2l, 2l+1), each lane is converted and
                // FMA'd into an 8-lane f32 accumulator, reduced once per row. Its tiled
                // batch kernel (≥ 8 rows) instead takes the block's whole integer sum:
                // acc = fma(d_w·total, d_y, acc).
                let wd = h2f2(b.add(206)).1;
                if a[0].batch {
                    // (rows of one call share the flag for Q6_K)
                    for r in 0..M {
                        let sums = &a[r].sums[16 * i..16 * i + 16];
                        let corr: i32 = sc.iter().zip(sums).map(|(&s, &q)| i32::from(s) * q).sum();
                        let total = hsum_i32(sumi[r]) - 32 * corr;
                        tail[r] = (wd * total as f32).mul_add(a[r].d[i], tail[r]);
                    }
                    continue;
                }
                // i16 scales; lane l of madd(bsums, scales) = bs[2l]·sc[2l] + bs[2l+1]·sc[2l+1].
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr() as *const __m128i));
                for r in 0..M {
                    let sp = a[r].sums.as_ptr().add(16 * i);
                    // The 16 i32 sums (each |Σ| ≤ 16·127) packed to i16 in order.
                    let bs16 = _mm256_permute4x64_epi64(
                        _mm256_packs_epi32(
                            _mm256_loadu_si256(sp as *const __m256i),
                            _mm256_loadu_si256(sp.add(8) as *const __m256i),
                        ),
                        0b11_01_10_00,
                    );
                    let pairs = _mm256_madd_epi16(bs16, sc16);
                    let lanes = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(pairs, 5));
                    let d = _mm256_set1_ps(a[r].d[i] * wd);
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r]);
                }
            }
        }
    }
    for r in 0..M {
        out[r] = (tail[r] - mins[r]) + hsum_ps(acc[r]);
    }
}
