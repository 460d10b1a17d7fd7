//! MX (MXFP4 / MXFP8) GEMV row kernels: decode 32-element blocks in registers and dot
//! them against up to 4 prepared x rows.
//!
//! Key design choices:
//! - x is prepared once per call ([`MxPrep`]): zero-padded to whole blocks; for FP4 each
//!   block is reordered to [even elements | odd elements] so the low and high nibbles of
//!   the 16 packed bytes line up with contiguous x without any byte interleaving.
//! - FP4 codes decode with a 16-entry table held in one register (`vpermps`).
//! - FP8 E4M3 codes decode by bit moves into an f16 (sign kept, exponent+mantissa
//!   shifted) and a hardware f16→f32 convert; that value is 2^-8 of the true one, so x is
//!   pre-scaled by 2^8 (exact). NaN codes (0x7F/0xFF) then read as ±480 instead of NaN;
//!   `pack` never produces them from finite inputs. E5M2 is the top byte of an f16.
//! - Per block: partial = Σ w·x (unscaled), acc += partial · 2^(s-127).

use super::super::simd::Isa;
use favlo_mx::{ElementFormat, FP4_E2M1_VALUES, MxView};
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

const BLOCK: usize = 32;

/// E8M0 byte -> scale (0xFF -> NaN).
pub(crate) fn scale_table() -> &'static [f32; 256] {
    static T: OnceLock<[f32; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0f32; 256];
        for (b, v) in t.iter_mut().enumerate() {
            *v = favlo_mx::decode_e8m0(b as u8).unwrap_or(f32::NAN);
        }
        t
    })
}

/// FP8 code -> value, for the format (E4M3 from favlo-mx's table, E5M2 via f16).
fn fp8_table(format: ElementFormat) -> &'static [f32; 256] {
    static E5M2: OnceLock<[f32; 256]> = OnceLock::new();
    match format {
        ElementFormat::Fp8E5M2 => E5M2.get_or_init(|| {
            let mut t = [0f32; 256];
            for (c, v) in t.iter_mut().enumerate() {
                *v = half::f16::from_bits((c as u16) << 8).to_f32();
            }
            t
        }),
        _ => favlo_mx::fp8_e4m3_table(),
    }
}

/// x rows laid out for the MX kernels of one ISA.
pub(crate) struct MxPrep {
    data: Vec<f32>,
    stride: usize,
}

impl MxPrep {
    pub(crate) fn new(x: &[f32], m: usize, v: &MxView<'_>, isa: Isa) -> MxPrep {
        let k = v.layout.cols;
        let nb = k.div_ceil(BLOCK);
        let stride = nb * BLOCK;
        let mut data = vec![0f32; m * stride];
        let factor = match (v.layout.format, isa) {
            (ElementFormat::Fp8E4M3, Isa::Avx2 | Isa::Avx512) => 256.0,
            _ => 1.0,
        };
        for (src, dst) in x.chunks_exact(k).zip(data.chunks_exact_mut(stride)) {
            if v.layout.format == ElementFormat::Fp4E2M1 {
                for (i, xv) in src.iter().enumerate() {
                    let (b, e) = (i / BLOCK, i % BLOCK);
                    dst[b * BLOCK + (e & 1) * 16 + e / 2] = *xv;
                }
            } else {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = *s * factor;
                }
            }
        }
        MxPrep { data, stride }
    }

    pub(crate) fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.stride)
    }
}

/// Dot products of MX rows `r0..r1` with M prepared x rows: `out[(r - r0) * M + j]`.
pub(super) fn rows_dots<const M: usize>(
    isa: Isa,
    v: &MxView<'_>,
    r0: usize,
    r1: usize,
    xs: [&[f32]; M],
    out: &mut [f32],
) {
    let l = v.layout;
    let nb = l.cols.div_ceil(BLOCK);
    let fmt = l.format;
    let (drb, srb) = (l.data_row_bytes(), l.scale_row_bytes());
    let need_data = if fmt == ElementFormat::Fp4E2M1 {
        nb * 16
    } else {
        nb * 32
    };
    let ok = r0 <= r1
        && r1 <= l.rows
        && drb >= need_data
        && srb >= nb
        && v.bytes.len() >= l.total_bytes()
        && out.len() >= (r1 - r0) * M
        && xs.iter().all(|x| x.len() >= nb * BLOCK);
    if !ok {
        debug_assert!(false, "mx rows_dots: inconsistent layout");
        return;
    }
    let st = scale_table();
    let rows = r1 - r0;
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        let xp = xs.map(|x| x.as_ptr());
        let d = v.bytes[r0 * drb..].as_ptr();
        let s = v.bytes[l.scale_offset() + r0 * srb..].as_ptr();
        let o = out.as_mut_ptr();
        let g = Geometry { drb, srb, rows, nb };
        // SAFETY: ISA detected at run time; rows r0..r1 lie inside the checked view (each
        // with nb blocks of codes and nb scale bytes), every x row has nb*32 floats and
        // out has rows*M slots.
        unsafe {
            match (isa, fmt) {
                (Isa::Avx512, ElementFormat::Fp4E2M1) => loop_avx512::<M, 0>(d, s, g, st, xp, o),
                (Isa::Avx512, ElementFormat::Fp8E4M3) => loop_avx512::<M, 1>(d, s, g, st, xp, o),
                (Isa::Avx512, ElementFormat::Fp8E5M2) => loop_avx512::<M, 2>(d, s, g, st, xp, o),
                (_, ElementFormat::Fp4E2M1) => loop_avx2::<M, 0>(d, s, g, st, xp, o),
                (_, ElementFormat::Fp8E4M3) => loop_avx2::<M, 1>(d, s, g, st, xp, o),
                (_, ElementFormat::Fp8E5M2) => loop_avx2::<M, 2>(d, s, g, st, xp, o),
            }
        }
        return;
    }
    for (i, r) in (r0..r1).enumerate() {
        let (data, scales) = (v.row_data(r), v.row_scales(r));
        let res = match fmt {
            ElementFormat::Fp4E2M1 => fp4_scalar(data, scales, st, nb, xs),
            f => fp8_scalar(data, scales, st, nb, xs, fp8_table(f)),
        };
        out[i * M..(i + 1) * M].copy_from_slice(&res);
    }
}

/// Strides and sizes of a run of rows.
#[derive(Clone, Copy)]
struct Geometry {
    drb: usize,
    srb: usize,
    rows: usize,
    nb: usize,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn loop_avx512<const M: usize, const F: u8>(
    d: *const u8,
    s: *const u8,
    g: Geometry,
    st: &[f32; 256],
    xs: [*const f32; M],
    out: *mut f32,
) {
    // SAFETY: the caller guarantees g.rows rows of codes/scales and rows*M output slots.
    unsafe {
        for i in 0..g.rows {
            let (di, si) = (d.add(i * g.drb), s.add(i * g.srb));
            let r = match F {
                0 => fp4_avx512::<M>(di, si, st, g.nb, xs),
                1 => fp8_avx512::<M, false>(di, si, st, g.nb, xs),
                _ => fp8_avx512::<M, true>(di, si, st, g.nb, xs),
            };
            for (j, v) in r.iter().enumerate() {
                *out.add(i * M + j) = *v;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn loop_avx2<const M: usize, const F: u8>(
    d: *const u8,
    s: *const u8,
    g: Geometry,
    st: &[f32; 256],
    xs: [*const f32; M],
    out: *mut f32,
) {
    // SAFETY: the caller guarantees g.rows rows of codes/scales and rows*M output slots.
    unsafe {
        for i in 0..g.rows {
            let (di, si) = (d.add(i * g.drb), s.add(i * g.srb));
            let r = match F {
                0 => fp4_avx2::<M>(di, si, st, g.nb, xs),
                1 => fp8_avx2::<M, false>(di, si, st, g.nb, xs),
                _ => fp8_avx2::<M, true>(di, si, st, g.nb, xs),
            };
            for (j, v) in r.iter().enumerate() {
                *out.add(i * M + j) = *v;
            }
        }
    }
}

fn fp4_scalar<const M: usize>(
    data: &[u8],
    scales: &[u8],
    st: &[f32; 256],
    nb: usize,
    xs: [&[f32]; M],
) -> [f32; M] {
    let mut out = [0f32; M];
    for b in 0..nb {
        let bytes = &data[b * 16..b * 16 + 16];
        let s = st[scales[b] as usize];
        for j in 0..M {
            let x = &xs[j][b * BLOCK..b * BLOCK + BLOCK];
            let mut p = [0f32; 4];
            for (i, byte) in bytes.iter().enumerate() {
                let lo = FP4_E2M1_VALUES[(byte & 15) as usize];
                let hi = FP4_E2M1_VALUES[(byte >> 4) as usize];
                p[i & 3] = lo.mul_add(x[i], p[i & 3]);
                p[i & 3] = hi.mul_add(x[16 + i], p[i & 3]);
            }
            out[j] = (p[0] + p[1] + p[2] + p[3]).mul_add(s, out[j]);
        }
    }
    out
}

fn fp8_scalar<const M: usize>(
    data: &[u8],
    scales: &[u8],
    st: &[f32; 256],
    nb: usize,
    xs: [&[f32]; M],
    table: &[f32; 256],
) -> [f32; M] {
    let mut out = [0f32; M];
    for b in 0..nb {
        let codes = &data[b * BLOCK..b * BLOCK + BLOCK];
        let s = st[scales[b] as usize];
        for j in 0..M {
            let x = &xs[j][b * BLOCK..b * BLOCK + BLOCK];
            let mut p = [0f32; 4];
            for (i, c) in codes.iter().enumerate() {
                p[i & 3] = table[*c as usize].mul_add(x[i], p[i & 3]);
            }
            out[j] = (p[0] + p[1] + p[2] + p[3]).mul_add(s, out[j]);
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn fp4_avx512<const M: usize>(
    d: *const u8,
    scales: *const u8,
    st: &[f32; 256],
    nb: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    // SAFETY (all loads): the caller guarantees nb blocks of data and x.
    unsafe {
        let lut = _mm512_loadu_ps(FP4_E2M1_VALUES.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        // One block: decode 32 codes, dot with each x row, add (dot · scale) into acc[j][u].
        // `vpermps` reads only bits 3:0 of each index lane, so the low nibble needs no mask.
        macro_rules! block {
            ($b:expr, $u:literal) => {{
                let b = $b;
                let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(d.add(b * 16) as *const __m128i));
                let wl = _mm512_permutexvar_ps(v, lut);
                let wh = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(v), lut);
                let s = _mm512_set1_ps(*st.get_unchecked(*scales.add(b) as usize));
                for j in 0..M {
                    let xp = xs[j].add(b * BLOCK);
                    let t = _mm512_mul_ps(wl, _mm512_loadu_ps(xp));
                    let t = _mm512_fmadd_ps(wh, _mm512_loadu_ps(xp.add(16)), t);
                    acc[j][$u] = _mm512_fmadd_ps(t, s, acc[j][$u]);
                }
            }};
        }
        let mut b = 0;
        while b + 4 <= nb {
            prefetch(d.wrapping_add(b * 16 + PREFETCH_BYTES));
            block!(b, 0);
            block!(b + 1, 1);
            block!(b + 2, 0);
            block!(b + 3, 1);
            b += 4;
        }
        while b < nb {
            block!(b, 0);
            b += 1;
        }
        let mut out = [0f32; M];
        for j in 0..M {
            out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]));
        }
        out
    }
}

/// How far ahead of the block being decoded the row kernels prefetch packed codes.
/// One row's codes are one sequential stream; a thread walks its rows in order, so near
/// a row's end this reaches into the next row (a prefetch never faults). The decode is
/// too slow for the hardware prefetcher alone to keep enough lines in flight: on a
/// 2-vCPU Sapphire Rapids a 2 KiB lead took one thread from ≈ 5 to ≈ 8–10 GB/s of MXFP4
/// codes on a matrix larger than L2.
const PREFETCH_BYTES: usize = 2048;

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
fn prefetch(p: *const u8) {
    // A prefetch is a hint: it never faults, whatever the address.
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn fp8_avx512<const M: usize, const E5M2: bool>(
    d: *const u8,
    scales: *const u8,
    st: &[f32; 256],
    nb: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    // SAFETY (all loads): the caller guarantees nb blocks of data and x.
    unsafe {
        let keep = _mm512_set1_epi16(0xBF80u16 as i16);
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        macro_rules! block {
            ($b:expr, $u:literal) => {{
                let b = $b;
                let raw = _mm256_loadu_si256(d.add(b * BLOCK) as *const __m256i);
                let h = if E5M2 {
                    _mm512_slli_epi16::<8>(_mm512_cvtepu8_epi16(raw))
                } else {
                    _mm512_and_si512(_mm512_slli_epi16::<7>(_mm512_cvtepi8_epi16(raw)), keep)
                };
                let w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
                let w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(h));
                let s = _mm512_set1_ps(*st.get_unchecked(*scales.add(b) as usize));
                for j in 0..M {
                    let xp = xs[j].add(b * BLOCK);
                    let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                    let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                    acc[j][$u] = _mm512_fmadd_ps(t, s, acc[j][$u]);
                }
            }};
        }
        let mut b = 0;
        while b + 2 <= nb {
            prefetch(d.wrapping_add(b * BLOCK + PREFETCH_BYTES));
            block!(b, 0);
            block!(b + 1, 1);
            b += 2;
        }
        if b < nb {
            block!(b, 0);
        }
        let mut out = [0f32; M];
        for j in 0..M {
            out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]));
        }
        out
    }
}

/// 8 FP4 codes (zero-extended to 32 bits, one per lane) -> 8 f32 via magnitude table + sign bit.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fp4_decode8(idx: __m256i, lut8: __m256) -> __m256 {
    let mag = _mm256_permutevar8x32_ps(lut8, idx);
    let sign = _mm256_and_si256(_mm256_slli_epi32::<28>(idx), _mm256_set1_epi32(i32::MIN));
    _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(mag), sign))
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fp4_avx2<const M: usize>(
    d: *const u8,
    scales: *const u8,
    st: &[f32; 256],
    nb: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    // SAFETY (all loads): the caller guarantees nb blocks of data and x.
    unsafe {
        let lut8 = _mm256_loadu_ps(FP4_E2M1_VALUES.as_ptr());
        let low = _mm256_set1_epi32(15);
        let mut acc = [_mm256_setzero_ps(); M];
        for b in 0..nb {
            let p = d.add(b * 16);
            if b % 4 == 0 {
                prefetch(p.wrapping_add(PREFETCH_BYTES));
            }
            let v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
            let v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8) as *const __m128i));
            let l0 = fp4_decode8(_mm256_and_si256(v0, low), lut8);
            let h0 = fp4_decode8(_mm256_srli_epi32::<4>(v0), lut8);
            let l1 = fp4_decode8(_mm256_and_si256(v1, low), lut8);
            let h1 = fp4_decode8(_mm256_srli_epi32::<4>(v1), lut8);
            let s = _mm256_set1_ps(*st.get_unchecked(*scales.add(b) as usize));
            for j in 0..M {
                let xp = xs[j].add(b * BLOCK);
                let t = _mm256_mul_ps(l0, _mm256_loadu_ps(xp));
                let t = _mm256_fmadd_ps(l1, _mm256_loadu_ps(xp.add(8)), t);
                let t = _mm256_fmadd_ps(h0, _mm256_loadu_ps(xp.add(16)), t);
                let t = _mm256_fmadd_ps(h1, _mm256_loadu_ps(xp.add(24)), t);
                acc[j] = _mm256_fmadd_ps(t, s, acc[j]);
            }
        }
        let mut out = [0f32; M];
        for j in 0..M {
            out[j] = crate::cpu::simd::hsum256(acc[j]);
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fp8_avx2<const M: usize, const E5M2: bool>(
    d: *const u8,
    scales: *const u8,
    st: &[f32; 256],
    nb: usize,
    xs: [*const f32; M],
) -> [f32; M] {
    // SAFETY (all loads): the caller guarantees nb blocks of data and x.
    unsafe {
        let keep = _mm256_set1_epi16(0xBF80u16 as i16);
        let mut acc = [_mm256_setzero_ps(); M];
        for b in 0..nb {
            let p = d.add(b * BLOCK);
            if b % 2 == 0 {
                prefetch(p.wrapping_add(PREFETCH_BYTES));
            }
            let mut w = [_mm256_setzero_ps(); 4];
            for half in 0..2 {
                let raw = _mm_loadu_si128(p.add(16 * half) as *const __m128i);
                let h = if E5M2 {
                    _mm256_slli_epi16::<8>(_mm256_cvtepu8_epi16(raw))
                } else {
                    _mm256_and_si256(_mm256_slli_epi16::<7>(_mm256_cvtepi8_epi16(raw)), keep)
                };
                w[2 * half] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
                w[2 * half + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h));
            }
            let s = _mm256_set1_ps(*st.get_unchecked(*scales.add(b) as usize));
            for j in 0..M {
                let xp = xs[j].add(b * BLOCK);
                let t = _mm256_mul_ps(w[0], _mm256_loadu_ps(xp));
                let t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xp.add(8)), t);
                let t = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xp.add(16)), t);
                let t = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xp.add(24)), t);
                acc[j] = _mm256_fmadd_ps(t, s, acc[j]);
            }
        }
        let mut out = [0f32; M];
        for j in 0..M {
            out[j] = crate::cpu::simd::hsum256(acc[j]);
        }
        out
    }
}

/// Dequantize MX row `r` into `out` (`out.len() == cols`), with the same values as
/// `MxView::dequantize_row` (0xFF scales give NaN).
pub(crate) fn mx_row_to_f32(v: &MxView<'_>, r: usize, out: &mut [f32]) {
    let cols = v.layout.cols.min(out.len());
    let data = v.row_data(r);
    let scales = v.row_scales(r);
    let st = scale_table();
    let fmt = v.layout.format;
    let full = cols / BLOCK;
    let need = if fmt == ElementFormat::Fp4E2M1 {
        full * 16
    } else {
        full * BLOCK
    };
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::super::simd::isa() == Isa::Avx512 && data.len() >= need && scales.len() >= full {
        // SAFETY: ISA detected; `full` whole blocks of codes, scales and output exist.
        unsafe {
            dequant_avx512(
                fmt,
                data.as_ptr(),
                scales.as_ptr(),
                st,
                full,
                out.as_mut_ptr(),
            )
        };
        done = full * BLOCK;
    }
    match fmt {
        ElementFormat::Fp4E2M1 => {
            for (c, o) in out[..cols].iter_mut().enumerate().skip(done) {
                let code = (data[c / 2] >> ((c & 1) * 4)) & 15;
                *o = FP4_E2M1_VALUES[code as usize] * st[scales[c / BLOCK] as usize];
            }
        }
        f => {
            let t = fp8_table(f);
            for (c, o) in out[..cols].iter_mut().enumerate().skip(done) {
                *o = t[data[c] as usize] * st[scales[c / BLOCK] as usize];
            }
        }
    }
}

/// Whole-block dequantization into natural element order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn dequant_avx512(
    fmt: ElementFormat,
    d: *const u8,
    s: *const u8,
    st: &[f32; 256],
    nb: usize,
    out: *mut f32,
) {
    // SAFETY (all accesses): the caller guarantees nb blocks of codes/scales and nb*32 outputs.
    unsafe {
        let lut = _mm512_loadu_ps(FP4_E2M1_VALUES.as_ptr());
        let e8 = fp8_table(fmt);
        let low = _mm_set1_epi8(15);
        for b in 0..nb {
            let sc = *st.get_unchecked(*s.add(b) as usize);
            let o = out.add(b * BLOCK);
            match fmt {
                ElementFormat::Fp4E2M1 => {
                    let bytes = _mm_loadu_si128(d.add(b * 16) as *const __m128i);
                    let lo = _mm_and_si128(bytes, low);
                    let hi = _mm_and_si128(_mm_srli_epi16::<4>(bytes), low);
                    let e0 = _mm_unpacklo_epi8(lo, hi);
                    let e1 = _mm_unpackhi_epi8(lo, hi);
                    let scv = _mm512_set1_ps(sc);
                    let w0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e0), lut);
                    let w1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e1), lut);
                    _mm512_storeu_ps(o, _mm512_mul_ps(w0, scv));
                    _mm512_storeu_ps(o.add(16), _mm512_mul_ps(w1, scv));
                }
                _ => {
                    for i in 0..BLOCK {
                        *o.add(i) = *e8.get_unchecked(*d.add(b * BLOCK + i) as usize) * sc;
                    }
                }
            }
        }
    }
}
