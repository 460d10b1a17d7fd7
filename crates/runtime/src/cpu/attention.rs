//! Scaled dot-product attention: causal over a KV cache (prefill and decode, GQA) and
//! bidirectional with a key mask (encoders).
//!
//! Key design choices:
//! - Work is split over (kv head, block of query tokens) tasks; all query heads that
//!   share a kv head are handled together so every K/V row is read once per task and
//!   reused from L1 across the group.
//! - Exact two-pass softmax per query row (scores, max, exp, normalize), then a
//!   weighted sum of V rows with SIMD axpy.

use super::linear::SyncPtr;
use super::simd;
use rayon::prelude::*;

/// Head geometry of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
}

/// Query tokens per task.
const TOKEN_BLOCK: usize = 16;

/// Causal attention of `t` new tokens (positions n_past..n_past+t) over a KV cache that
/// holds n_past+t positions. q, out: [t, n_heads, hd]; caches: [capacity, n_kv_heads, hd].
#[allow(clippy::too_many_arguments)]
pub fn attention_causal(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    n_past: usize,
    t: usize,
    scale: f32,
) {
    attend(
        q,
        k_cache,
        v_cache,
        out,
        shape,
        t,
        n_past + t,
        |i| n_past + i + 1,
        None,
        scale,
    );
}

/// Bidirectional attention over one sequence of `s` tokens; `key_mask[j] == false`
/// hides key j. q, out: [s, n_heads, hd]; k, v: [s, n_kv_heads, hd].
#[allow(clippy::too_many_arguments)]
pub fn attention_full(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    s: usize,
    key_mask: Option<&[bool]>,
    scale: f32,
) {
    attend(q, k, v, out, shape, s, s, |_| s, key_mask, scale);
}

#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    shape: AttnShape,
    t: usize,
    ctx: usize,
    visible: impl Fn(usize) -> usize + Sync,
    mask: Option<&[bool]>,
    scale: f32,
) {
    let AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
    } = shape;
    let ok = nkv > 0
        && nh % nkv == 0
        && hd > 0
        && q.len() >= t * nh * hd
        && out.len() >= t * nh * hd
        && k.len() >= ctx * nkv * hd
        && v.len() >= ctx * nkv * hd
        && mask.is_none_or(|m| m.len() >= ctx);
    debug_assert!(
        ok,
        "attention: inconsistent shapes {shape:?} t={t} ctx={ctx}"
    );
    if !ok || t == 0 {
        return;
    }
    let group = nh / nkv;
    let blocks = t.div_ceil(TOKEN_BLOCK);
    let optr = SyncPtr(out.as_mut_ptr());
    let isa = simd::isa();
    let kv_stride = nkv * hd;
    let task = |id: usize| {
        let (g, b) = (id / blocks, id % blocks);
        let i0 = b * TOKEN_BLOCK;
        let i1 = (i0 + TOKEN_BLOCK).min(t);
        // One "row" per (query token, query head of this kv group).
        let mut qs = Vec::with_capacity((i1 - i0) * group);
        let mut os = Vec::with_capacity((i1 - i0) * group);
        let mut lens = Vec::with_capacity((i1 - i0) * group);
        for i in i0..i1 {
            for r in 0..group {
                let at = (i * nh + g * group + r) * hd;
                qs.push(q[at..at + hd].as_ptr());
                // SAFETY: at + hd <= out.len() (checked above); this task alone writes it.
                os.push(unsafe { optr.ptr().add(at) });
                lens.push(visible(i).min(ctx));
            }
        }
        let rows = Rows {
            qs: &qs,
            os: &os,
            lens: &lens,
            hd,
            ctx,
        };
        let mut scores = vec![0f32; qs.len() * ctx];
        let kb = k[g * hd..].as_ptr();
        let vb = v[g * hd..].as_ptr();
        // SAFETY: every key/value row j < ctx lies at kb + j*kv_stride .. + hd, inside k/v
        // (checked above); q/out rows hold hd floats.
        unsafe { kernels::scores(isa, &rows, kb, kv_stride, scale, &mut scores) };
        for (a, &len) in lens.iter().enumerate() {
            let row = &mut scores[a * ctx..a * ctx + len];
            if let Some(m) = mask {
                for (sj, keep) in row.iter_mut().zip(m) {
                    if !keep {
                        *sj = f32::NEG_INFINITY;
                    }
                }
            }
            normalize(row);
        }
        // SAFETY: as above.
        unsafe { kernels::weighted_sum(isa, &rows, vb, kv_stride, &scores) };
    };
    let n_tasks = nkv * blocks;
    let work = t * ctx * nh * hd;
    if work < (1 << 15) || n_tasks == 1 {
        (0..n_tasks).for_each(task);
    } else {
        (0..n_tasks).into_par_iter().for_each(task);
    }
}

/// Softmax of one score row in place; an all-masked row becomes all zeros.
fn normalize(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0f32;
    for s in row.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|s| *s *= inv);
}

/// The query/output rows one task handles, each seeing keys 0..lens[a].
struct Rows<'a> {
    qs: &'a [*const f32],
    os: &'a [*mut f32],
    lens: &'a [usize],
    hd: usize,
    ctx: usize,
}

/// The two inner loops, per ISA: scores (K rows read once, dotted with every query row)
/// and the probability-weighted sum of V rows (each V row read once, added to every output row).
mod kernels {
    use super::Rows;
    use crate::cpu::simd::Isa;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// scores[a*ctx + j] = scale · q_a · k_j for j < lens[a].
    ///
    /// # Safety
    /// Every pointer in `rows` addresses `hd` floats; k rows j < ctx lie at `k + j*stride`.
    pub(super) unsafe fn scores(
        isa: Isa,
        rows: &Rows<'_>,
        k: *const f32,
        stride: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let maxlen = rows.lens.iter().copied().max().unwrap_or(0);
        match isa {
            // SAFETY: ISA detected at run time; the caller's guarantee.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { scores_avx512(rows, k, stride, scale, out, maxlen) },
            _ => {
                for j in 0..maxlen {
                    // SAFETY: the caller's guarantee.
                    let kr = unsafe { std::slice::from_raw_parts(k.add(j * stride), rows.hd) };
                    for (a, (&qp, &len)) in rows.qs.iter().zip(rows.lens).enumerate() {
                        if j < len {
                            // SAFETY: the caller's guarantee.
                            let qv = unsafe { std::slice::from_raw_parts(qp, rows.hd) };
                            out[a * rows.ctx + j] = scale * crate::cpu::simd::dot(qv, kr);
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn scores_avx512(
        rows: &Rows<'_>,
        k: *const f32,
        stride: usize,
        scale: f32,
        out: &mut [f32],
        maxlen: usize,
    ) {
        let hd = rows.hd;
        let full = hd / 16;
        let tail: __mmask16 = ((1u32 << (hd % 16)) - 1) as __mmask16;
        // SAFETY (all loads): the caller's guarantee; tails are masked.
        unsafe {
            for j in 0..maxlen {
                let kr = k.add(j * stride);
                prefetch_row(k.wrapping_add((j + PREFETCH_ROWS) * stride), hd);
                for (a, (&qp, &len)) in rows.qs.iter().zip(rows.lens).enumerate() {
                    if j >= len {
                        continue;
                    }
                    let mut acc0 = _mm512_setzero_ps();
                    let mut acc1 = _mm512_setzero_ps();
                    let mut c = 0;
                    while c + 2 <= full {
                        acc0 = _mm512_fmadd_ps(
                            _mm512_loadu_ps(qp.add(16 * c)),
                            _mm512_loadu_ps(kr.add(16 * c)),
                            acc0,
                        );
                        acc1 = _mm512_fmadd_ps(
                            _mm512_loadu_ps(qp.add(16 * c + 16)),
                            _mm512_loadu_ps(kr.add(16 * c + 16)),
                            acc1,
                        );
                        c += 2;
                    }
                    if c < full {
                        acc0 = _mm512_fmadd_ps(
                            _mm512_loadu_ps(qp.add(16 * c)),
                            _mm512_loadu_ps(kr.add(16 * c)),
                            acc0,
                        );
                    }
                    if tail != 0 {
                        let o = 16 * full;
                        acc1 = _mm512_fmadd_ps(
                            _mm512_maskz_loadu_ps(tail, qp.add(o)),
                            _mm512_maskz_loadu_ps(tail, kr.add(o)),
                            acc1,
                        );
                    }
                    *out.get_unchecked_mut(a * rows.ctx + j) =
                        scale * _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
                }
            }
        }
    }

    /// How many K/V rows ahead the AVX-512 loops prefetch. Rows of one kv head sit a
    /// whole cache-position stride apart (n_kv_heads · head_dim floats, often 4 KiB), so
    /// every row starts a new page and the hardware prefetcher, which stops at page
    /// boundaries, leaves each row's first miss exposed.
    #[cfg(target_arch = "x86_64")]
    const PREFETCH_ROWS: usize = 8;

    /// Prefetch the cache lines of `floats` floats from `p` (a hint: never faults).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "sse")]
    fn prefetch_row(p: *const f32, floats: usize) {
        let mut off = 0;
        while off < floats {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8);
            off += 16;
        }
    }

    /// o_a = Σ_{j < lens[a]} p[a*ctx + j] · v_j.
    ///
    /// # Safety
    /// As for [`scores`]; output rows are disjoint and written by this caller only.
    pub(super) unsafe fn weighted_sum(
        isa: Isa,
        rows: &Rows<'_>,
        v: *const f32,
        stride: usize,
        p: &[f32],
    ) {
        let hd = rows.hd;
        for &o in rows.os {
            // SAFETY: the caller's guarantee.
            unsafe { std::slice::from_raw_parts_mut(o, hd) }.fill(0.0);
        }
        let maxlen = rows.lens.iter().copied().max().unwrap_or(0);
        match isa {
            // SAFETY: ISA detected at run time; the caller's guarantee.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { weighted_sum_avx512(rows, v, stride, p, maxlen) },
            _ => {
                for j in 0..maxlen {
                    // SAFETY: the caller's guarantee.
                    let vr = unsafe { std::slice::from_raw_parts(v.add(j * stride), hd) };
                    for (a, (&op, &len)) in rows.os.iter().zip(rows.lens).enumerate() {
                        let w = p[a * rows.ctx + j];
                        if j < len && w != 0.0 {
                            // SAFETY: the caller's guarantee.
                            let o = unsafe { std::slice::from_raw_parts_mut(op, hd) };
                            crate::cpu::simd::axpy(o, w, vr);
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn weighted_sum_avx512(
        rows: &Rows<'_>,
        v: *const f32,
        stride: usize,
        p: &[f32],
        maxlen: usize,
    ) {
        let hd = rows.hd;
        if hd.is_multiple_of(64) {
            // Register-blocked: 4 output rows × 64 columns live in 16 registers while every
            // V row segment streams past once.
            let n = rows.os.len();
            let mut a0 = 0;
            while a0 < n {
                let a1 = (a0 + 4).min(n);
                let mut c0 = 0;
                while c0 < hd {
                    // SAFETY: the caller's guarantee.
                    unsafe { wsum_block64(rows, v, stride, p, a0, a1, c0) };
                    c0 += 64;
                }
                a0 = a1;
            }
            let _ = maxlen;
            return;
        }
        // SAFETY (all accesses): the caller's guarantee; tails are masked.
        unsafe {
            for j in 0..maxlen {
                let vr = v.add(j * stride);
                for (a, (&op, &len)) in rows.os.iter().zip(rows.lens).enumerate() {
                    let w = *p.get_unchecked(a * rows.ctx + j);
                    if j >= len || w == 0.0 {
                        continue;
                    }
                    let wv = _mm512_set1_ps(w);
                    let mut c = 0;
                    while c + 16 <= hd {
                        let o = _mm512_fmadd_ps(
                            wv,
                            _mm512_loadu_ps(vr.add(c)),
                            _mm512_loadu_ps(op.add(c)),
                        );
                        _mm512_storeu_ps(op.add(c), o);
                        c += 16;
                    }
                    if c < hd {
                        let m: __mmask16 = ((1u32 << (hd - c)) - 1) as __mmask16;
                        let o = _mm512_fmadd_ps(
                            wv,
                            _mm512_maskz_loadu_ps(m, vr.add(c)),
                            _mm512_maskz_loadu_ps(m, op.add(c)),
                        );
                        _mm512_mask_storeu_ps(op.add(c), m, o);
                    }
                }
            }
        }
    }

    /// Output rows a0..a1 (≤ 4), columns c0..c0+64, accumulated in registers.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn wsum_block64(
        rows: &Rows<'_>,
        v: *const f32,
        stride: usize,
        p: &[f32],
        a0: usize,
        a1: usize,
        c0: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        let na = a1 - a0;
        let mut len = [0usize; 4];
        for (i, l) in len.iter_mut().enumerate().take(na) {
            *l = rows.lens[a0 + i];
        }
        let maxlen = len.iter().copied().max().unwrap_or(0);
        // SAFETY (all accesses): the caller's guarantee (rows, columns c0..c0+64 < hd).
        unsafe {
            for j in 0..maxlen {
                let vr = v.add(j * stride + c0);
                prefetch_row(v.wrapping_add((j + PREFETCH_ROWS) * stride + c0), 64);
                let vv = [
                    _mm512_loadu_ps(vr),
                    _mm512_loadu_ps(vr.add(16)),
                    _mm512_loadu_ps(vr.add(32)),
                    _mm512_loadu_ps(vr.add(48)),
                ];
                for i in 0..4 {
                    if i < na && j < len[i] {
                        let w = _mm512_set1_ps(*p.get_unchecked((a0 + i) * rows.ctx + j));
                        for c in 0..4 {
                            acc[i][c] = _mm512_fmadd_ps(w, vv[c], acc[i][c]);
                        }
                    }
                }
            }
            for (i, row) in acc.iter().enumerate().take(na) {
                let op = rows.os[a0 + i].add(c0);
                for (c, r) in row.iter().enumerate() {
                    _mm512_storeu_ps(op.add(16 * c), *r);
                }
            }
        }
    }
}
