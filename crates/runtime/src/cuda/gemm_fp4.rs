//! The host side of the GEMM's FP4 ring (`kernels/gemm_fp4.cuh`): MXFP4 weights folded
//! into E4M3 tiles ([`super::tile_gemm`]) packed back to 4-bit codes plus one shift per
//! 32-value block, in the order the producer warpgroup converts them in shared memory.
//!
//! Key design choice: the packing starts from the E4M3 tile the tensor cores read, not
//! from the MX matrix, and the kernel's conversion rebuilds that tile byte for byte; so
//! the FP4 ring computes exactly what the E4M3 ring computes (the same wgmma operands),
//! and a test here replays the kernel's conversion (its `prmt` steps) on the host
//! against the tile.

use super::gemm_tile::{GEMM_KB, GEMM_TILE, GemmWeightsHost, SCALE_TILE_BYTES, TILE_BYTES};
use favlo_mx::ElementFormat;

/// FP4 bytes per (row tile, k block): `GM_F4_BYTES`.
pub(super) const F4_TILE_BYTES: usize = TILE_BYTES / 2;

/// Block shifts the kernel's table covers: u = shift + 5 in 0..=11 (`GM_F4_L0`).
const SHIFTS: u32 = 12;

/// The E4M3 codes of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 at shift 0.
const MAG: [u8; 8] = [0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C];

/// The E4M3 code (sign clear) of magnitude code `m` (0..8) at shift `u − 5`.
fn mag_code(u: u32, m: usize) -> u8 {
    if m == 0 { 0 } else { MAG[m] + 8 * u as u8 - 40 }
}

/// Per E4M3 magnitude (code & 0x7F): the shifts u (bit u) under which it is an E2M1
/// magnitude, and that magnitude's 3-bit code at each (built once: packing an 8B model
/// looks up billions of codes).
struct Inverse {
    shifts: [u16; 128],
    code: [[u8; 128]; SHIFTS as usize],
}

fn inverse() -> &'static Inverse {
    static INV: std::sync::OnceLock<Inverse> = std::sync::OnceLock::new();
    INV.get_or_init(|| {
        let mut inv = Inverse {
            shifts: [0; 128],
            code: [[0; 128]; SHIFTS as usize],
        };
        for u in 0..SHIFTS {
            for m in 0..8 {
                let mag = usize::from(mag_code(u, m));
                inv.shifts[mag] |= 1 << u;
                inv.code[u as usize][mag] = m as u8;
            }
        }
        inv
    })
}

/// Byte offset (and nibble: 0 low, 1 high) of code (row `r`, k `k`) in one FP4 tile:
/// the 16 bytes of (row r, MX block k / 32) at 16 · (128 · (r / 32) + 32 · (k / 32) +
/// r % 32) (a converting warp reads 32 rows' units of one block as 512 contiguous
/// bytes); within them, the 8-byte half of core-matrix row k16 = k / 16, the word of
/// bytes (k % 16) / 8, nibble k % 8.
pub(super) fn f4_offset(r: usize, k: usize) -> (usize, usize) {
    let unit = 128 * (r / 32) + 32 * (k / 32) + r % 32;
    let i = k % 8;
    (
        16 * unit + 8 * ((k % 32) / 16) + 4 * ((k % 16) / 8) + i / 2,
        i % 2,
    )
}

/// The FP4 ring's form of `h` (MXFP4 folded by [`super::tile_gemm`] or
/// [`super::tile_gemm_swiglu`] with grouped scales): per tile and k block 8 KB of
/// codes ([`f4_offset`]) and, in each row's scale word, byte 0 the group scale as
/// before and bytes 2..3 the four blocks' shifts u (nibble j: block j). `None` when `h`
/// is not such a matrix or one of its blocks spans more binades than the kernel's
/// table (shifts −5..6 of the block's largest E2M1 value: real and random MXFP4 weights
/// stay well inside).
pub fn pack_fp4(h: &GemmWeightsHost) -> Option<GemmWeightsHost> {
    use rayon::prelude::*;
    if h.format != ElementFormat::Fp8E4M3 || !h.grouped || h.fp4 {
        return None;
    }
    let inv = inverse();
    let tiles = h.rows.div_ceil(GEMM_TILE) * h.kblocks;
    let mut data = vec![0u8; tiles * F4_TILE_BYTES];
    let mut scales = h.scales.clone();
    // Tiles in parallel, as the tiling itself; `None` stops at a block out of range.
    data.par_chunks_mut(F4_TILE_BYTES)
        .zip(scales.par_chunks_mut(SCALE_TILE_BYTES))
        .zip(h.data.par_chunks(TILE_BYTES))
        .try_for_each(|((out, sc), codes)| {
            for r in 0..GEMM_TILE {
                let mut shifts = 0u16;
                for j in 0..GEMM_KB / 32 {
                    let block = |k: usize| codes[super::tile_offset(r, 32 * j + k)];
                    // The lowest shift under which every code of the block is E2M1.
                    let ok = (0..32).fold(u16::MAX, |m, k| {
                        m & inv.shifts[usize::from(block(k) & 0x7F)]
                    });
                    let u = ok.trailing_zeros();
                    if u >= SHIFTS {
                        return None;
                    }
                    shifts |= (u as u16) << (4 * j);
                    for k in 0..32 {
                        let c = block(k);
                        let n = ((c >> 7) << 3) | inv.code[u as usize][usize::from(c & 0x7F)];
                        let (o, hi) = f4_offset(r, 32 * j + k);
                        out[o] |= n << (4 * hi);
                    }
                }
                sc[4 * r + 2..4 * r + 4].copy_from_slice(&shifts.to_le_bytes());
            }
            Some(())
        })?;
    Some(GemmWeightsHost {
        format: h.format,
        grouped: h.grouped,
        rows: h.rows,
        cols: h.cols,
        kblocks: h.kblocks,
        data,
        scales,
        swiglu: h.swiglu,
        fp4: true,
    })
}

/// The tiling the GEMM runs for `h`: with `FAVLO_CUDA_FP4_RING=1` the FP4 ring's
/// ([`pack_fp4`]) where `h` packs, else `h` as it is (the E4M3 ring, the default: the
/// FP4 ring has not yet measured faster, docs/CUDA.md "The FP4 ring").
pub fn ring_tiles(h: GemmWeightsHost) -> GemmWeightsHost {
    // Read once per process: a model's open tiles hundreds of matrices.
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var("FAVLO_CUDA_FP4_RING").is_ok_and(|v| v == "1")) {
        return pack_fp4(&h).unwrap_or(h);
    }
    h
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cuda::{tile_gemm, tile_gemm_swiglu, tile_offset};
    use favlo_mx::{MxLayout, MxView};

    /// PTX `prmt.b32` (default mode): byte i of the result is byte (sel nibble i & 7)
    /// of b:a, or that byte's top bit replicated when the nibble's bit 3 is set.
    fn prmt(a: u32, b: u32, sel: u32) -> u32 {
        let src = u64::from(a) | (u64::from(b) << 32);
        (0..4).fold(0, |acc, i| {
            let s = (sel >> (4 * i)) & 0xF;
            let mut byte = ((src >> (8 * (s & 7))) & 0xFF) as u32;
            if s & 8 != 0 {
                byte = if byte & 0x80 != 0 { 0xFF } else { 0 };
            }
            acc | (byte << (8 * i))
        })
    }

    /// `gm_f4_word` of the kernel, step for step.
    fn word(r: u32, hi: bool, l0: u32, l1: u32) -> u32 {
        let r4 = r << 4;
        let sel = (if hi { r >> 16 } else { r }) & 0x7777;
        let mag = prmt(l0, l1, sel);
        let sgn = prmt(r, r4, if hi { 0xBFAE } else { 0x9D8C });
        mag | (sgn & 0x8080_8080)
    }

    /// `gm_f4_convert` of the kernel over one tile, thread by thread: converting warp w
    /// (0..3) takes groups w, w + 3, ... of the 16 (g = 4 · (r / 32) + j), one unit per
    /// lane, at the kernel's load and store offsets; every 16-byte piece of the E4M3 tile
    /// must be written exactly once. (FP4 tile, its scale tile) → E4M3.
    fn convert(f4: &[u8], scales: &[u8]) -> Vec<u8> {
        let w32 = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let mut out = vec![0u8; TILE_BYTES];
        let mut written = vec![0u8; TILE_BYTES / 16];
        for w in 0..3 {
            for lane in 0..32 {
                let dst = 64 * (lane >> 3) + (lane & 7);
                for g in (w..16).step_by(3) {
                    let (src, j) = (16 * (32 * g + lane), g & 3);
                    let sw = w32(scales, 4 * (32 * (g >> 2) + lane));
                    let u = (sw >> (16 + 4 * j)) & 0xF;
                    let l0 = (0x3C38_3000u32 - 5 * 0x0808_0800).wrapping_add(u * 0x0808_0800);
                    let l1 = (0x4C48_4440u32 - 5 * 0x0808_0808).wrapping_add(u * 0x0808_0808);
                    for h in 0..2 {
                        let (r0, r1) = (w32(f4, src + 8 * h), w32(f4, src + 8 * h + 4));
                        let words = [
                            word(r0, false, l0, l1),
                            word(r0, true, l0, l1),
                            word(r1, false, l0, l1),
                            word(r1, true, l0, l1),
                        ];
                        let piece = dst + 256 * (g >> 2) + 16 * j + 8 * h;
                        written[piece] += 1;
                        for (i, w) in words.iter().enumerate() {
                            out[16 * piece + 4 * i..][..4].copy_from_slice(&w.to_le_bytes());
                        }
                    }
                }
            }
        }
        let wrong = written.iter().filter(|&&n| n != 1).count();
        assert_eq!(wrong, 0, "16-byte pieces not written exactly once");
        out
    }

    fn random_fp4(rows: usize, cols: usize, seed: u64) -> (MxLayout, Vec<u8>) {
        let l = MxLayout::new(ElementFormat::Fp4E2M1, rows, cols);
        let mut bytes = vec![0u8; l.total_bytes()];
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        for b in &mut bytes[..l.scale_offset()] {
            *b = next() as u8; // every code, negative zeros included
        }
        let so = l.scale_offset();
        for b in &mut bytes[so..] {
            *b = 118 + (next() % 7) as u8; // scales over 7 binades
        }
        // Some all-zero blocks (signs kept).
        for i in (0..bytes.len() - so).step_by(13) {
            let (r, c) = (i / l.scale_row_bytes(), i % l.scale_row_bytes());
            for k in 32 * c..(32 * c + 32).min(l.cols) {
                let o = r * l.data_row_bytes() + k / 2;
                bytes[o] &= if k % 2 == 0 { 0xF8 } else { 0x8F };
            }
        }
        (l, bytes)
    }

    /// The kernel's conversion, replayed on the host, rebuilds every E4M3 tile from the
    /// packed codes and shifts, for plain and SwiGLU tilings of ragged shapes.
    #[test]
    fn conversion_rebuilds_the_e4m3_tiles() {
        for (rows, cols, seed) in [(200, 300, 1), (256, 512, 2), (384, 130, 3)] {
            let (l, bytes) = random_fp4(rows, cols, seed);
            let view = MxView::new(l, &bytes).unwrap();
            let mut hosts = vec![tile_gemm(view).unwrap()];
            if rows % 128 == 0 {
                hosts.push(tile_gemm_swiglu(view).unwrap());
            }
            for h in hosts {
                assert!(h.grouped);
                let p = pack_fp4(&h).unwrap();
                assert!(p.fp4 && p.swiglu == h.swiglu);
                assert_eq!(p.data.len() * 2, h.data.len());
                for t in 0..h.data.len() / TILE_BYTES {
                    let sc = &p.scales[t * SCALE_TILE_BYTES..][..SCALE_TILE_BYTES];
                    let got = convert(&p.data[t * F4_TILE_BYTES..][..F4_TILE_BYTES], sc);
                    assert_eq!(got, h.data[t * TILE_BYTES..][..TILE_BYTES], "tile {t}");
                    for r in 0..GEMM_TILE {
                        // Byte 0, the group scale the consumers read, is unchanged.
                        let o = t * SCALE_TILE_BYTES + 4 * r;
                        assert_eq!(p.scales[o], h.scales[o]);
                    }
                }
                assert!(pack_fp4(&p).is_none(), "packed twice");
            }
        }
    }

    /// Every code lands once: the offsets of one tile cover its 8 KB, two nibbles each.
    #[test]
    fn offsets_are_a_permutation() {
        let mut hit = vec![0u8; F4_TILE_BYTES];
        for r in 0..GEMM_TILE {
            for k in 0..GEMM_KB {
                let (o, hi) = f4_offset(r, k);
                assert_eq!(hit[o] & (1 << hi), 0);
                hit[o] |= 1 << hi;
            }
        }
        assert!(hit.iter().all(|&b| b == 3));
        assert_eq!(tile_offset(0, 0), 0);
    }

    /// Matrices the ring cannot take: MXFP8, per-block scales, and a block whose values
    /// span more binades than the table.
    #[test]
    fn refuses_what_it_cannot_rebuild() {
        let l = MxLayout::new(ElementFormat::Fp8E4M3, 128, 128);
        let b = vec![0x38u8; l.total_bytes()];
        assert!(pack_fp4(&tile_gemm(MxView::new(l, &b).unwrap()).unwrap()).is_none());
        let (l, mut bytes) = random_fp4(128, 128, 4);
        // Row 0: block 1 at scale 127, block 2 at 110 (17 binades lower, more than the
        // fold's 14; both hold non-zero codes): the matrix falls back to per-block
        // scales.
        let so = l.scale_offset();
        bytes[so + 1] = 127;
        bytes[so + 2] = 110;
        bytes[32 / 2] = 0x22;
        bytes[64 / 2] = 0x22;
        let h = tile_gemm(MxView::new(l, &bytes).unwrap()).unwrap();
        assert!(!h.grouped && pack_fp4(&h).is_none());
        // A grouped tile with a code 9 binades below its group's top: in range for the
        // fold (E4M3 subnormal), not for the table.
        let (l, bytes) = random_fp4(128, 128, 5);
        let mut h = tile_gemm(MxView::new(l, &bytes).unwrap()).unwrap();
        h.data[tile_offset(0, 0)] = 0x01; // 2^-9
        assert!(pack_fp4(&h).is_none());
    }
}
