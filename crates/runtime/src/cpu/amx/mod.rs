//! AMX bf16 GEMM: `C[m, n] (+)= A[m, k] · B[k, n] (+ bias[n])` with A row-major f32 (any
//! leading dimension) and B a weight matrix packed once, at load, into the tile layout.
//!
//! Key design choices:
//! - **Precision is the caller's choice** ([`Precision`]): `Bf16` rounds A (on the fly) and
//!   B (at packing) to bf16 — relative error ~2⁻⁹ per product, accumulation in f32;
//!   `Bf16x3` splits both into `hi + lo` bf16 pairs and sums `hi·hi + lo·hi + hi·lo` — about
//!   f32 accuracy (~2⁻¹⁶ relative per product) for 3× the tile work. Both beat the AVX-512
//!   f32 `sgemm` many times over on Sapphire Rapids (1024 vs 64 FLOP/cycle/core).
//! - **Detection once** ([`available`]): CPUID (AMX-TILE, AMX-BF16, AVX-512 BF16), XCR0 and
//!   Linux's `arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`; without them (other CPUs, CI)
//!   the same call runs a fallback — B widened back to f32 per 32-column block and the
//!   runtime's AVX-512/AVX2 [`super::sgemm_nn`] — so callers need no second code path.
//!   The fallback keeps A in f32; only B carries the packing's rounding.
//! - **Layout** ([`pack`]): B is stored as consecutive 1 KiB tiles, in micro-kernel load
//!   order (per 32 columns, per 32-deep step); `n` and `k` are zero-padded to whole tiles.
//!   A is converted per call into a per-thread bf16 panel (≤ 128 rows), reused over all of
//!   B's column blocks. Ragged `m`, `n`, `k` are handled by padding, never by partial tiles.
//! - **Threads** (rayon, when `parallel` and the product is large): many rows are split
//!   into row ranges (even 32-row block counts per task); few rows (a batch of one) are split
//!   over column blocks, so each weight is read once. Each task configures the tiles,
//!   works, and releases them.
//!
//! Use from a linear layer: pack `W[n, k]` with [`BLayout::Nk`], then
//! `gemm(m, x, k, &packed, y, n, &GemmOpts { bias: Some(b), ..Default::default() })`.
//! Use from a convolution (im2col style): with the input's columns as the rows of A
//! (`A[t, ci·K + tap]`, any leading dimension) and `W[cout, ci·K + tap]` packed as
//! [`BLayout::Nk`], C is the output time-major, `C[t, cout]`, bias per output channel.

mod detect;
mod pack;
mod tile;

use std::cell::RefCell;

pub use detect::{available, detected_amx, set_amx_disabled};
pub use pack::{BLayout, pack_b_into, packed_len};

use pack::{KB, MB, NB, k_pad, parts};

/// How A and B are rounded for the tile products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// One bf16 product per term (8-bit mantissas), f32 accumulation.
    Bf16,
    /// `hi·hi + lo·hi + hi·lo` with `x = hi + lo` bf16 splits: ≈ f32 accuracy.
    Bf16x3,
}

/// Which code path runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// AMX when [`available`], else the fallback.
    #[default]
    Auto,
    /// The AVX-512/AVX2 fallback (B widened to f32) even on an AMX CPU.
    Fallback,
}

/// A packed B (from [`pack_b`] / [`pack_b_into`]) with its shape.
#[derive(Clone, Copy, Debug)]
pub struct PackedB<'a> {
    data: &'a [u16],
    n: usize,
    k: usize,
    precision: Precision,
}

impl<'a> PackedB<'a> {
    /// A view of `data`; `None` when its length is not [`packed_len`]`(n, k, precision)`.
    pub fn new(data: &'a [u16], n: usize, k: usize, precision: Precision) -> Option<Self> {
        (data.len() == packed_len(n, k, precision)).then_some(PackedB {
            data,
            n,
            k,
            precision,
        })
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }
}

/// Pack `w` (stored as `layout`, `n·k` floats) into a new vector; empty when `w` is short.
pub fn pack_b(w: &[f32], layout: BLayout, n: usize, k: usize, precision: Precision) -> Vec<u16> {
    let mut out = vec![0u16; packed_len(n, k, precision)];
    if !pack_b_into(w, layout, n, k, precision, &mut out) {
        out.clear();
    }
    out
}

/// A function applied to each finished piece of a row of C while it is still in L1
/// (`row` is `C[i, j0..j0 + row.len()]`, bias and accumulation already in).
pub type RowPost<'a> = &'a (dyn Fn(&mut [f32], usize) + Sync);

/// Options of one [`gemm`] call.
#[derive(Clone, Copy)]
pub struct GemmOpts<'a> {
    /// Added to every row of C (`n` floats).
    pub bias: Option<&'a [f32]>,
    /// Add the product to C instead of overwriting it.
    pub accumulate: bool,
    /// Split the work over rayon's current pool when it is large enough.
    pub parallel: bool,
    pub backend: Backend,
    /// Applied to C's rows, one 32-column piece at a time, right after each block is
    /// computed (an activation: saves a pass over C from memory).
    pub post: Option<RowPost<'a>>,
}

impl Default for GemmOpts<'_> {
    fn default() -> Self {
        GemmOpts {
            bias: None,
            accumulate: false,
            parallel: true,
            backend: Backend::Auto,
            post: None,
        }
    }
}

/// `c[i·ldc + j] (+)= Σ_p a[i·lda + p] · B[p, j] (+ bias[j])` for `i < m`, `j < b.n()`.
/// Shapes are the caller's contract: a short operand trips a debug assertion and returns
/// without writing.
pub fn gemm(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB<'_>,
    c: &mut [f32],
    ldc: usize,
    opts: &GemmOpts<'_>,
) {
    let (n, k) = (b.n, b.k);
    if m == 0 || n == 0 {
        return;
    }
    let need = |ld: usize, cols: usize| (m - 1) * ld + cols;
    let ok = lda >= k
        && ldc >= n
        && (k == 0 || a.len() >= need(lda, k))
        && c.len() >= need(ldc, n)
        && opts.bias.is_none_or(|bi| bi.len() >= n);
    debug_assert!(ok, "amx::gemm: short operand");
    if !ok {
        return;
    }
    let use_amx = opts.backend == Backend::Auto && available();
    let job = Job {
        a,
        lda,
        b: *b,
        c: Ptr(c.as_mut_ptr()),
        ldc,
        bias: opts.bias,
        accumulate: opts.accumulate,
        post: opts.post,
        use_amx,
    };
    let threads = if opts.parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    let mblocks = m.div_ceil(MB);
    let nblocks = n.div_ceil(NB);
    let work = m * n * k.max(1);
    if threads <= 1 || (work < (1 << 21) && n * k < (1 << 16)) {
        job.run(0..m, 0..nblocks);
        return;
    }
    use rayon::prelude::*;
    if mblocks >= 2 * threads {
        // Row ranges: an even share of 32-row blocks per task, ≤ 4 blocks per task.
        let tasks = (threads * mblocks.div_ceil(TASK_BLOCKS * threads)).min(mblocks);
        (0..tasks).into_par_iter().for_each(|t| {
            let (b0, b1) = (t * mblocks / tasks, (t + 1) * mblocks / tasks);
            job.run(b0 * MB..(b1 * MB).min(m), 0..nblocks);
        });
    } else {
        let tasks = nblocks.min(2 * threads);
        (0..tasks).into_par_iter().for_each(|t| {
            job.run(0..m, t * nblocks / tasks..(t + 1) * nblocks / tasks);
        });
    }
}

/// A raw pointer to C that tasks share (they write disjoint blocks).
#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: tasks write disjoint rows/columns of C (see `gemm`).
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

/// One call's operands.
struct Job<'a> {
    a: &'a [f32],
    lda: usize,
    b: PackedB<'a>,
    c: Ptr,
    ldc: usize,
    bias: Option<&'a [f32]>,
    accumulate: bool,
    post: Option<RowPost<'a>>,
    use_amx: bool,
}

/// Rows of A converted per panel (a multiple of [`MB`]): the panel (≤ 128 × k bf16, twice
/// for bf16x3) stays in L2 while every column block of B passes over it.
const PANEL_ROWS: usize = 4 * MB;
/// Most 32-row blocks per row task.
const TASK_BLOCKS: usize = 4;

thread_local! {
    /// Per-thread bf16 A panels (hi, lo), grown on demand and kept.
    static PANEL: RefCell<(Vec<u16>, Vec<u16>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// Per-thread f32 scratch of the fallback (widened B block, product block).
    static WIDE: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl Job<'_> {
    /// Rows `rows` × column blocks `nbs` of C.
    fn run(&self, rows: std::ops::Range<usize>, nbs: std::ops::Range<usize>) {
        if rows.is_empty() || nbs.is_empty() {
            return;
        }
        if self.use_amx {
            self.run_amx(rows, nbs);
        } else {
            self.run_fallback(rows, nbs);
        }
    }

    /// `C[i, j] = (C[i, j] if accumulating) + t[i, j] + bias[j]` for a block of
    /// `rows × cols` from `t` (row stride `ldt`), at C's row `i0`, column `j0`.
    fn combine(&self, i0: usize, j0: usize, rows: usize, cols: usize, t: &[f32], ldt: usize) {
        for r in 0..rows {
            let tr = &t[r * ldt..r * ldt + cols];
            // SAFETY: (i0 + r, j0..j0 + cols) is inside C (checked in `gemm`) and owned by
            // this task.
            let cr = unsafe {
                std::slice::from_raw_parts_mut(self.c.0.add((i0 + r) * self.ldc + j0), cols)
            };
            for (j, (cv, &tv)) in cr.iter_mut().zip(tr).enumerate() {
                let base = if self.accumulate { *cv } else { 0.0 };
                *cv = base + tv + self.bias.map_or(0.0, |bi| bi[j0 + j]);
            }
            if let Some(post) = self.post {
                post(cr, j0);
            }
        }
    }

    fn run_amx(&self, rows: std::ops::Range<usize>, nbs: std::ops::Range<usize>) {
        let (k, prec) = (self.b.k, self.b.precision);
        let kp = k_pad(k);
        let x3 = prec == Precision::Bf16x3;
        PANEL.with_borrow_mut(|(hi, lo)| {
            let cap = PANEL_ROWS.min(rows.len().div_ceil(MB) * MB) * kp;
            if hi.len() < cap {
                hi.resize(cap, 0);
            }
            if x3 && lo.len() < cap {
                lo.resize(cap, 0);
            }
            // SAFETY: AMX is available (use_amx); released below on this thread.
            unsafe { tile::configure() };
            let mut r0 = rows.start;
            while r0 < rows.end {
                let nr = PANEL_ROWS.min(rows.end - r0);
                let nr_pad = nr.div_ceil(MB) * MB;
                pack::convert_a(
                    &self.a[r0 * self.lda..],
                    self.lda,
                    nr,
                    k,
                    nr_pad,
                    hi,
                    x3.then_some(&mut lo[..]),
                );
                // Column block outer: its B strip (≤ 96 KiB) is reused by every 32-row block
                // of the panel while it is in L1/L2.
                for nb in nbs.clone() {
                    for mb in 0..nr_pad / MB {
                        let a_hi = &hi[mb * MB * kp..];
                        let a_lo = if x3 { &lo[mb * MB * kp..] } else { a_hi };
                        self.amx_block(r0 + mb * MB, r0 + nr, nb, a_hi, a_lo);
                    }
                }
                r0 += nr;
            }
            // SAFETY: configured above on this thread.
            unsafe { tile::release() };
        });
    }

    /// The 32 × 32 block of C at row `i0` (rows end at `row_end`), column block `nb`, from
    /// the converted panels (32 rows at `a_hi` / `a_lo`). Tiles must be configured.
    fn amx_block(&self, i0: usize, row_end: usize, nb: usize, a_hi: &[u16], a_lo: &[u16]) {
        let (n, k, prec) = (self.b.n, self.b.k, self.b.precision);
        let kp = k_pad(k);
        let steps = kp / KB;
        let b = &self.b.data[nb * steps * parts(prec) * pack::TILE..];
        let j0 = nb * NB;
        let cols = NB.min(n - j0);
        let rws = MB.min(row_end - i0);
        let (ah, al, bp) = (a_hi.as_ptr(), a_lo.as_ptr(), b.as_ptr());
        // SAFETY: the panels hold 32 rows of kp from a_hi / a_lo, B the block's steps, C
        // (when full) the 32 × 32 block, the bias (when full) 32 floats from j0; tiles are
        // configured (caller).
        unsafe {
            if rws == MB && cols == NB {
                let cp = self.c.0.add(i0 * self.ldc + j0);
                let start = match (self.accumulate, self.bias) {
                    (true, _) => tile::Start::Load {
                        p: cp,
                        stride: self.ldc * 4,
                        off: pack::TM * self.ldc,
                    },
                    (false, Some(bi)) => tile::Start::Load {
                        p: bi[j0..].as_ptr(),
                        stride: 0,
                        off: 0,
                    },
                    (false, None) => tile::Start::Zero,
                };
                tile::block(prec, ah, al, kp * 2, bp, steps, start, cp, self.ldc * 4);
                let extra_bias = if self.accumulate { self.bias } else { None };
                if extra_bias.is_some() || self.post.is_some() {
                    for r in 0..MB {
                        let row = std::slice::from_raw_parts_mut(cp.add(r * self.ldc), NB);
                        if let Some(bi) = extra_bias {
                            for (v, &bv) in row.iter_mut().zip(&bi[j0..j0 + NB]) {
                                *v += bv;
                            }
                        }
                        if let Some(post) = self.post {
                            post(row, j0);
                        }
                    }
                }
            } else {
                // Edge block: the same arithmetic as a full one (same start values, same
                // products), through a local 32 × 32 buffer, so a row's result never depends
                // on where the batch's block edges fall.
                let mut edge = [0f32; MB * NB];
                for r in 0..rws {
                    let e = &mut edge[r * NB..r * NB + cols];
                    if self.accumulate {
                        let c = std::slice::from_raw_parts(
                            self.c.0.add((i0 + r) * self.ldc + j0),
                            cols,
                        );
                        e.copy_from_slice(c);
                    } else if let Some(bi) = self.bias {
                        e.copy_from_slice(&bi[j0..j0 + cols]);
                    }
                }
                let start = if self.accumulate || self.bias.is_some() {
                    tile::Start::Load {
                        p: edge.as_ptr(),
                        stride: NB * 4,
                        off: pack::TM * NB,
                    }
                } else {
                    tile::Start::Zero
                };
                let ep = edge.as_mut_ptr();
                tile::block(prec, ah, al, kp * 2, bp, steps, start, ep, NB * 4);
                for r in 0..rws {
                    let e = &edge[r * NB..r * NB + cols];
                    let row = std::slice::from_raw_parts_mut(
                        self.c.0.add((i0 + r) * self.ldc + j0),
                        cols,
                    );
                    row.copy_from_slice(e);
                    if let (true, Some(bi)) = (self.accumulate, self.bias) {
                        for (v, &bv) in row.iter_mut().zip(&bi[j0..j0 + cols]) {
                            *v += bv;
                        }
                    }
                    if let Some(post) = self.post {
                        post(row, j0);
                    }
                }
            }
        }
    }

    fn run_fallback(&self, rows: std::ops::Range<usize>, nbs: std::ops::Range<usize>) {
        let (n, k, prec) = (self.b.n, self.b.k, self.b.precision);
        let steps = k_pad(k) / KB;
        let step_len = parts(prec) * pack::TILE;
        WIDE.with_borrow_mut(|(wide, prod)| {
            wide.resize(k.max(1) * NB, 0.0);
            prod.resize(rows.len() * NB, 0.0);
            for nb in nbs {
                let j0 = nb * NB;
                let cols = NB.min(n - j0);
                let b = &self.b.data[nb * steps * step_len..(nb + 1) * steps * step_len];
                pack::widen_block(b, k, prec, wide);
                let a = &self.a[rows.start * self.lda..];
                super::sgemm_nn(rows.len(), NB, k, a, self.lda, wide, NB, prod, NB);
                self.combine(rows.start, j0, rows.len(), cols, prod, NB);
            }
        });
    }
}
