//! The AMX micro-kernel: one 32 × 32 block of C from a 32-row bf16 panel of A and one packed
//! column block of B, in `core::arch::asm!` (stable Rust has no AMX intrinsics).
//!
//! Key design choice: a fixed tile configuration — all eight tiles 16 rows × 64 bytes —
//! loaded once per task. `tmm0..tmm3` hold the 2 × 2 accumulator tiles of C, `tmm4/tmm5` the
//! two 16-row tiles of A, `tmm6/tmm7` the two 16-column tiles of B; each 32-deep k step is
//! 4 loads and 4 `tdpbf16ps` (bf16) or 10 loads and 12 `tdpbf16ps` (hi·hi + lo·hi + hi·lo).
//! Ragged edges never reach this file: the caller zero-pads A and B and stores edge blocks
//! into a local buffer.

use std::arch::asm;

use super::Precision;
use super::pack::{KB, TILE, TM};

/// The 64-byte tile configuration (palette 1, eight 16 × 64-byte tiles).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    TileConfig(c)
};

/// Load the tile configuration on this thread.
///
/// # Safety
/// AMX must be detected and permitted ([`super::detect`]).
pub(super) unsafe fn configure() {
    let cfg = &CONFIG;
    // SAFETY: a valid palette-1 configuration; the caller checked AMX.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
}

/// Release the tile state on this thread (keeps context switches cheap).
///
/// # Safety
/// As for [`configure`].
pub(super) unsafe fn release() {
    // SAFETY: the caller checked AMX.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Where the accumulators start from.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// Zero.
    Zero,
    /// Four 16 × 16 f32 tiles at `p`, `p + 16`, `p + off`, `p + off + 16` floats, rows
    /// `stride` bytes apart (C itself, or a bias row with stride 0 and `off` 0).
    Load {
        p: *const f32,
        stride: usize,
        off: usize,
    },
}

/// `C[32, 32] = start + A[32, k] · B[k, 32]` for one block.
///
/// `a_hi` (and `a_lo` for bf16x3) are bf16 panels with rows `lda` bytes apart (k zero-padded
/// to `steps · 32`); `b` is the block's first packed step ([`super::pack`] layout); `c`
/// receives the four tiles with rows `ldc` bytes apart.
///
/// # Safety
/// [`configure`] ran on this thread; every pointer covers its 32 rows × `steps` tile steps
/// (or the 32 × 32 block of `c`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block(
    precision: Precision,
    a_hi: *const u16,
    a_lo: *const u16,
    lda: usize,
    b: *const u16,
    steps: usize,
    start: Start,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY (whole body): the caller's contract; tiles are only touched by this thread.
    unsafe {
        match start {
            Start::Zero => asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            ),
            Start::Load { p, stride, off } => asm!(
                "tileloadd tmm0, [{p0} + {s}*1]",
                "tileloadd tmm1, [{p1} + {s}*1]",
                "tileloadd tmm2, [{p2} + {s}*1]",
                "tileloadd tmm3, [{p3} + {s}*1]",
                p0 = in(reg) p,
                p1 = in(reg) p.add(16),
                p2 = in(reg) p.add(off),
                p3 = in(reg) p.add(off + 16),
                s = in(reg) stride,
                options(nostack, readonly)
            ),
        }
        // Bring C's 32 rows × 128 bytes towards L1 for writing while the tiles compute (the
        // stores otherwise stall on read-for-ownership misses when C exceeds L2).
        for r in 0..2 * TM {
            let row = c.byte_add(r * ldc);
            asm!("prefetchw [{0}]", "prefetchw [{0} + 64]", in(reg) row, options(nostack, readonly));
        }
        let a1 = TM * lda;
        match precision {
            Precision::Bf16 => {
                for s in 0..steps {
                    let ah = a_hi.byte_add(s * 2 * KB);
                    let bs = b.add(s * 2 * TILE);
                    asm!(
                        "tileloadd tmm4, [{a0} + {sa}*1]",
                        "tileloadd tmm6, [{b0} + {sb}*1]",
                        "tileloadd tmm7, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{a1} + {sa}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) ah,
                        a1 = in(reg) ah.byte_add(a1),
                        b0 = in(reg) bs,
                        b1 = in(reg) bs.add(TILE),
                        sa = in(reg) lda,
                        sb = in(reg) 64usize,
                        options(nostack, readonly)
                    );
                }
            }
            Precision::Bf16x3 => {
                for s in 0..steps {
                    let ah = a_hi.byte_add(s * 2 * KB);
                    let al = a_lo.byte_add(s * 2 * KB);
                    let bs = b.add(s * 4 * TILE);
                    asm!(
                        // hi · hi
                        "tileloadd tmm4, [{ah0} + {sa}*1]",
                        "tileloadd tmm6, [{bh0} + {sb}*1]",
                        "tileloadd tmm7, [{bh1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{ah1} + {sa}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        // lo · hi
                        "tileloadd tmm4, [{al0} + {sa}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{al1} + {sa}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        // hi · lo
                        "tileloadd tmm4, [{ah0} + {sa}*1]",
                        "tileloadd tmm6, [{bl0} + {sb}*1]",
                        "tileloadd tmm7, [{bl1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{ah1} + {sa}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        ah0 = in(reg) ah,
                        ah1 = in(reg) ah.byte_add(a1),
                        al0 = in(reg) al,
                        al1 = in(reg) al.byte_add(a1),
                        bh0 = in(reg) bs,
                        bh1 = in(reg) bs.add(TILE),
                        bl0 = in(reg) bs.add(2 * TILE),
                        bl1 = in(reg) bs.add(3 * TILE),
                        sa = in(reg) lda,
                        sb = in(reg) 64usize,
                        options(nostack, readonly)
                    );
                }
            }
        }
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c,
            c1 = in(reg) c.add(16),
            c2 = in(reg) c.byte_add(TM * ldc),
            c3 = in(reg) c.byte_add(TM * ldc).add(16),
            s = in(reg) ldc,
            options(nostack)
        );
    }
}
