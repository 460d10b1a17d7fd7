//! MX weights laid out for the tensor-core GEMV (`kernels/gemv_*.cu`): the host
//! re-tiling ([`tile_mx`]) and its upload ([`MxTiled`]).
//!
//! Key design choice: the layout serves the kernel's loads, not the host. Per row tile
//! (32 rows) and 128-byte chunk of a row, 4 KB are ordered so that every 16-byte load
//! instruction of a warp reads 512 contiguous bytes, and the chunk's scales follow as
//! 8 bytes per lane; FP4 words are re-encoded on the way ([`fp4_gemv_word`]) so the
//! kernel turns each pair of codes into an f16x2 fragment with one or two shifts and
//! masks, no conversion instruction.

use favlo_mx::{ElementFormat, MxLayout, MxView};

use super::CudaError;
use super::context::{CudaContext, DeviceBuffer};
use crate::ledger::{Owner, SpanKind};

/// Rows per block (`TILE_ROWS` in gemv_common.cuh).
pub(super) const TILE_ROWS: usize = 32;

/// An MX matrix re-tiled for [`GemvMma`](super::GemvMma) on the host (see [`tile_mx`]).
#[derive(Clone, Debug)]
pub struct MxTiledHost {
    pub layout: MxLayout,
    /// Data tiles, then scale tiles at `scale_offset`.
    pub bytes: Vec<u8>,
    pub scale_offset: usize,
}

/// Scale bytes per (tile, chunk): 8 per lane (FP4) or per lane pair (FP8).
pub(super) fn scale_tile_bytes(format: ElementFormat) -> usize {
    if format == ElementFormat::Fp4E2M1 {
        256
    } else {
        128
    }
}

/// Where each element's code of an FP4 word goes in the GEMV's stored word: (low bit of
/// the 3-bit exponent-mantissa field, sign bit), for elements 0..8 of the favlo-mx word
/// (element e at bits 4e..4e+3). The kernel (`a_frag<4>` in gemv_common.cuh) turns each pair
/// of elements into an f16x2 fragment with one or two shifts and masks: the field lands
/// on f16 bits 9..11 and the sign on bit 15 (or 25..27 and 31), which is the E2M1 value
/// times 2^-14 exactly.
const FP4_PLACE: [(u32, u32); 8] = [
    (9, 15),
    (0, 14),
    (25, 31),
    (16, 30),
    (6, 12),
    (3, 13),
    (22, 28),
    (19, 29),
];

/// Re-encodes one little-endian word of 8 FP4 codes for the tensor-core GEMV.
pub(crate) fn fp4_gemv_word(w: u32) -> u32 {
    let mut out = 0u32;
    for (e, &(field, sign)) in FP4_PLACE.iter().enumerate() {
        let code = (w >> (4 * e)) & 0xf;
        out |= (code & 7) << field;
        out |= (code >> 3) << sign;
    }
    out
}

/// The favlo-mx word back from a GEMV word (the inverse of [`fp4_gemv_word`]; the tests'
/// reference).
#[cfg(test)]
pub(crate) fn fp4_favlo_word(w: u32) -> u32 {
    let mut out = 0u32;
    for (e, &(field, sign)) in FP4_PLACE.iter().enumerate() {
        let code = ((w >> field) & 7) | (((w >> sign) & 1) << 3);
        out |= code << (4 * e);
    }
    out
}

/// Re-tiles a favlo-mx matrix for the tensor-core GEMV (FP4 words re-encoded by
/// [`fp4_gemv_word`]). For row tile T (32 rows, zero rows past the end) and 128-byte
/// chunk c of the data row: 4096 bytes ordered
/// [i 4][j 2][lane 32][16 B], lane = 4g + t holding row 32T + g + 8i, bytes
/// 128c + 64j + 16t; then per (T, c) the scales, 8 bytes [i 4][j 2] per lane (FP4,
/// block 8c + 4j + t) or per lane pair p = lane/2 (FP8, block 4c + 2j + p%2).
pub fn tile_mx(view: MxView<'_>) -> MxTiledHost {
    use rayon::prelude::*;
    let l = view.layout;
    let src = view.bytes;
    let drb = l.data_row_bytes();
    let srb = l.scale_row_bytes();
    let chunks = drb / 128;
    let tiles = l.rows.div_ceil(TILE_ROWS);
    let sb = scale_tile_bytes(l.format);
    let scale_offset = tiles * chunks * 4096;
    let mut out = vec![0u8; scale_offset + tiles * chunks * sb];
    let fp4 = l.format == ElementFormat::Fp4E2M1;
    // FP4 words re-encode byte by byte: each byte holds two elements whose bits land
    // in fixed places, so a word is four table lookups.
    let lut = fp4.then(fp4_byte_tables);
    let scale = |row: usize, blk: usize| -> u8 {
        if row < l.rows && blk < srb {
            src[l.scale_offset() + row * srb + blk]
        } else {
            0
        }
    };
    if chunks > 0 {
        let (data, scales) = out.split_at_mut(scale_offset);
        // One row tile per task: its data and its scales are contiguous in `out`.
        data.par_chunks_mut(chunks * 4096)
            .zip(scales.par_chunks_mut(chunks * sb))
            .enumerate()
            .for_each(|(tile, (d_out, s_out))| {
                for c in 0..chunks {
                    for i in 0..4 {
                        for j in 0..2 {
                            for lane in 0..32 {
                                let (g, t) = (lane / 4, lane % 4);
                                let row = tile * TILE_ROWS + g + 8 * i;
                                if row >= l.rows {
                                    continue;
                                }
                                let s = row * drb + 128 * c + 64 * j + 16 * t;
                                let d = (c * 8 + i * 2 + j) * 512 + lane * 16;
                                let piece = &mut d_out[d..d + 16];
                                piece.copy_from_slice(&src[s..s + 16]);
                                if let Some(lut) = &lut {
                                    for word in piece.chunks_exact_mut(4) {
                                        let w = lut[0][usize::from(word[0])]
                                            | lut[1][usize::from(word[1])]
                                            | lut[2][usize::from(word[2])]
                                            | lut[3][usize::from(word[3])];
                                        word.copy_from_slice(&w.to_le_bytes());
                                    }
                                }
                            }
                        }
                    }
                    let base = c * sb;
                    for i in 0..4 {
                        for j in 0..2 {
                            if fp4 {
                                for lane in 0..32 {
                                    let (g, t) = (lane / 4, lane % 4);
                                    let row = tile * TILE_ROWS + g + 8 * i;
                                    s_out[base + lane * 8 + i * 2 + j] =
                                        scale(row, 8 * c + 4 * j + t);
                                }
                            } else {
                                for p in 0..16 {
                                    let row = tile * TILE_ROWS + p / 2 + 8 * i;
                                    s_out[base + p * 8 + i * 2 + j] =
                                        scale(row, 4 * c + 2 * j + p % 2);
                                }
                            }
                        }
                    }
                }
            });
    }
    MxTiledHost {
        layout: l,
        bytes: out,
        scale_offset,
    }
}

/// `fp4_gemv_word` as four byte tables: entry `b` of table `k` is the re-encoded bits of
/// byte `k` of a favlo-mx word (its elements 2k and 2k + 1) equal to `b`.
fn fp4_byte_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    for (k, table) in t.iter_mut().enumerate() {
        for (b, e) in table.iter_mut().enumerate() {
            *e = fp4_gemv_word((b as u32) << (8 * k));
        }
    }
    t
}

/// A re-tiled MX matrix in device memory.
pub struct MxTiled {
    pub layout: MxLayout,
    pub(crate) data: DeviceBuffer<u8>,
    pub(crate) scales: DeviceBuffer<u8>,
}

impl MxTiled {
    /// Uploads a matrix tiled by [`tile_mx`].
    pub fn upload(
        ctx: &CudaContext,
        owner: &Owner,
        host: &MxTiledHost,
    ) -> Result<MxTiled, CudaError> {
        let (d, s) = host.bytes.split_at(host.scale_offset);
        Ok(MxTiled {
            layout: host.layout,
            data: ctx.upload(owner, SpanKind::Resident, d)?,
            scales: ctx.upload(owner, SpanKind::Resident, s)?,
        })
    }

    /// Bytes held on the device (data + scale tiles).
    pub fn device_bytes(&self) -> u64 {
        self.data.bytes() + self.scales.bytes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{fp4_favlo_word, fp4_gemv_word, tile_mx};
    use favlo_mx::{ElementFormat, MxLayout, MxView};

    /// Every code byte and scale byte lands where the kernel reads it (independent
    /// re-derivation of the kernel's addressing, element by element).
    #[test]
    fn tiling_places_every_byte() {
        for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
            let l = MxLayout {
                format,
                rows: 45,
                cols: 300,
            };
            let src: Vec<u8> = (0..l.total_bytes()).map(|i| (i * 7 + 3) as u8).collect();
            let t = tile_mx(MxView::new(l, &src).unwrap());
            let chunks = l.data_row_bytes() / 128;
            let fp4 = format == ElementFormat::Fp4E2M1;
            for row in 0..64 {
                for byte in 0..l.data_row_bytes() {
                    let (tile, g, i) = (row / 32, row % 8, (row % 32) / 8);
                    let (c, j, t4, b) =
                        (byte / 128, (byte % 128) / 64, (byte % 64) / 16, byte % 16);
                    let lane = g * 4 + t4;
                    let off = ((tile * chunks + c) * 8 + i * 2 + j) * 512 + lane * 16;
                    let got = if fp4 {
                        let w0 = off + b / 4 * 4;
                        let b4 = &t.bytes[w0..w0 + 4];
                        let w = u32::from_le_bytes([b4[0], b4[1], b4[2], b4[3]]);
                        fp4_favlo_word(w).to_le_bytes()[b % 4]
                    } else {
                        t.bytes[off + b]
                    };
                    let want = if row < l.rows {
                        src[row * l.data_row_bytes() + byte]
                    } else {
                        0
                    };
                    assert_eq!(got, want, "{format:?} row {row} byte {byte}");
                    // The scale of this byte's block, as the lane reads it.
                    let blk = byte * if fp4 { 2 } else { 1 } / 32;
                    let sb = if fp4 { 256 } else { 128 };
                    let slot = if fp4 { lane * 8 } else { (lane / 2) * 8 };
                    let got_s =
                        t.bytes[t.scale_offset + (tile * chunks + c) * sb + slot + i * 2 + j];
                    let want_s = if row < l.rows && blk < l.scale_row_bytes() {
                        src[l.scale_offset() + row * l.scale_row_bytes() + blk]
                    } else {
                        0
                    };
                    assert_eq!(got_s, want_s, "{format:?} scale row {row} byte {byte}");
                }
            }
        }
    }

    /// The kernel's FP4 fragments (`a_frag<4>`, restated here) are the E2M1 values
    /// times 2^-14 for every code at every element position, whatever the other codes of
    /// the word, and the re-encoding round-trips.
    #[test]
    fn fp4_fragments_are_the_values() {
        let frags = |v: u32| -> [u32; 4] {
            [
                v & 0x8E00_8E00,
                (v << 3) & 0x8E00_8E00,
                ((v << 9) & 0x0E00_0E00) | ((v << 1) & 0x8000_8000),
                ((v << 6) & 0x0E00_0E00) | ((v << 2) & 0x8000_8000),
            ]
        };
        // (fragment, half) holding element e: even elements in fragments 0 and 1, odd
        // ones in 2 and 3, first of each pair in the low half.
        let slot = |e: usize| -> (usize, usize) { ((e % 2) * 2 + e / 4, (e / 2) % 2) };
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for e in 0..8 {
            for code in 0..16u32 {
                for _ in 0..16 {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    let others = (state >> 32) as u32 & !(0xf << (4 * e));
                    let w = others | (code << (4 * e));
                    let g = fp4_gemv_word(w);
                    assert_eq!(fp4_favlo_word(g), w);
                    let (f, h) = slot(e);
                    let bits = (frags(g)[f] >> (16 * h)) as u16;
                    let got = half::f16::from_bits(bits).to_f32() * 16384.0;
                    let want = favlo_mx::decode_fp4_e2m1(code as u8);
                    assert!(
                        got == want && got.is_sign_negative() == want.is_sign_negative(),
                        "element {e} code {code:#x}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
