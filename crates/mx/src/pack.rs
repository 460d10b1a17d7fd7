//! Block quantization and packing of a row-major f32 matrix into the MX layout.
//!
//! Design: rows are split into contiguous chunks, one per thread (`std::thread::scope`); each
//! thread owns disjoint slices of the data plane and of the scale plane, so no synchronisation is
//! needed. Per 32-value block: peak = max of the sign-cleared f32 bit patterns (integer max, which
//! also detects NaN/inf), scale byte from the peak's exponent bits, multiply by the exact power of
//! two 2^(127 - s), encode with the branch-light saturating encoders. A partial last block is
//! zero-padded in a stack buffer; K padding and unused scale bytes are written as zeros.

use crate::element::{e2m1_finite, e4m3_finite, e5m2_finite, pow2};
use crate::{BLOCK, ElementFormat, MxError, MxLayout, ScaleRule, scale_byte};

/// Below this many input values `pack` stays on the calling thread.
const MIN_PARALLEL_VALUES: usize = 1 << 16;

/// Pack row-major f32 `[rows, cols]` into `out` (`out.len() == layout.total_bytes()`), using all
/// available cores. Every byte of `out` is written. Non-finite input is an error (an MX block has
/// no finite scale for it).
pub fn pack(
    values: &[f32],
    layout: MxLayout,
    rule: ScaleRule,
    out: &mut [u8],
) -> Result<(), MxError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    pack_with_threads(values, layout, rule, out, threads)
}

/// [`pack`] with an explicit thread count (clamped to 1..=rows; small inputs use one thread).
pub fn pack_with_threads(
    values: &[f32],
    layout: MxLayout,
    rule: ScaleRule,
    out: &mut [u8],
    threads: usize,
) -> Result<(), MxError> {
    let too_large = MxError::TooLarge {
        rows: layout.rows,
        cols: layout.cols,
    };
    let expected = layout
        .rows
        .checked_mul(layout.cols)
        .ok_or(too_large.clone())?;
    if values.len() != expected {
        return Err(MxError::InputLength {
            expected,
            actual: values.len(),
        });
    }
    let total = layout.checked_total_bytes().ok_or(too_large)?;
    if out.len() != total {
        return Err(MxError::BufferLength {
            expected: total,
            actual: out.len(),
        });
    }
    if total == 0 {
        return Ok(());
    }
    let (data, scales) = out.split_at_mut(layout.scale_offset());
    let threads = if expected < MIN_PARALLEL_VALUES {
        1
    } else {
        threads.clamp(1, layout.rows)
    };
    if threads == 1 {
        return pack_rows(values, data, scales, layout, rule, 0);
    }
    let rows_per = layout.rows.div_ceil(threads);
    let chunks = values
        .chunks(rows_per * layout.cols)
        .zip(data.chunks_mut(rows_per * layout.data_row_bytes()))
        .zip(scales.chunks_mut(rows_per * layout.scale_row_bytes()));
    let mut results: Vec<Result<(), MxError>> = vec![Ok(()); threads];
    std::thread::scope(|s| {
        for (i, (((v, d), sc), slot)) in chunks.zip(results.iter_mut()).enumerate() {
            s.spawn(move || *slot = pack_rows(v, d, sc, layout, rule, i * rows_per));
        }
    });
    results.into_iter().collect()
}

/// Quantizes one block of 32 values: writes one code per byte (FP4 codes in the low nibble) and
/// returns the E8M0 scale byte. Fails on NaN/inf (reported as row 0, column = index in block).
pub fn quantize_block(
    format: ElementFormat,
    rule: ScaleRule,
    block: &[f32; BLOCK],
    codes: &mut [u8; BLOCK],
) -> Result<u8, MxError> {
    let amax = peak_bits(block);
    if amax >= 0x7F80_0000 {
        return Err(non_finite(block, 0, 0));
    }
    let s = scale_byte(format, rule, amax);
    let inv = pow2(127 - i32::from(s));
    match format {
        ElementFormat::Fp4E2M1 => encode_into(block, inv, codes, e2m1_finite),
        ElementFormat::Fp8E4M3 => encode_into(block, inv, codes, e4m3_finite),
        ElementFormat::Fp8E5M2 => encode_into(block, inv, codes, e5m2_finite),
    }
    Ok(s)
}

#[inline(always)]
fn peak_bits(block: &[f32; BLOCK]) -> u32 {
    block
        .iter()
        .fold(0u32, |m, v| m.max(v.to_bits() & 0x7FFF_FFFF))
}

fn non_finite(block: &[f32], row: usize, col0: usize) -> MxError {
    let i = block.iter().position(|v| !v.is_finite()).unwrap_or(0);
    MxError::NonFinite { row, col: col0 + i }
}

#[inline(always)]
fn encode_into(block: &[f32; BLOCK], inv: f32, codes: &mut [u8; BLOCK], enc: fn(f32) -> u8) {
    for (c, &v) in codes.iter_mut().zip(block) {
        *c = enc(v * inv);
    }
}

/// Packs consecutive rows starting at global row `row0` into this thread's slices.
fn pack_rows(
    values: &[f32],
    data: &mut [u8],
    scales: &mut [u8],
    layout: MxLayout,
    rule: ScaleRule,
    row0: usize,
) -> Result<(), MxError> {
    match layout.format {
        ElementFormat::Fp4E2M1 => {
            pack_rows_with::<true>(values, data, scales, layout, rule, row0, e2m1_finite)
        }
        ElementFormat::Fp8E4M3 => {
            pack_rows_with::<false>(values, data, scales, layout, rule, row0, e4m3_finite)
        }
        ElementFormat::Fp8E5M2 => {
            pack_rows_with::<false>(values, data, scales, layout, rule, row0, e5m2_finite)
        }
    }
}

#[inline(always)]
fn pack_rows_with<const FP4: bool>(
    values: &[f32],
    data: &mut [u8],
    scales: &mut [u8],
    layout: MxLayout,
    rule: ScaleRule,
    row0: usize,
    enc: impl Fn(f32) -> u8 + Copy,
) -> Result<(), MxError> {
    let cols = layout.cols;
    let block_bytes = if FP4 { BLOCK / 2 } else { BLOCK };
    let rows = data
        .chunks_exact_mut(layout.data_row_bytes())
        .zip(scales.chunks_exact_mut(layout.scale_row_bytes()))
        .zip(values.chunks_exact(cols));
    for (r, ((drow, srow), src)) in rows.enumerate() {
        let real_blocks = cols.div_ceil(BLOCK);
        let (dreal, dpad) = drow.split_at_mut(real_blocks * block_bytes);
        let (sreal, spad) = srow.split_at_mut(real_blocks);
        dpad.fill(0);
        spad.fill(0);
        let mut tail = [0.0f32; BLOCK];
        let mut blocks = src.chunks_exact(BLOCK);
        let rem = blocks.remainder();
        tail[..rem.len()].copy_from_slice(rem);
        let all = (&mut blocks).chain((!rem.is_empty()).then_some(&tail[..]));
        for (b, ((blk, dst), sb)) in all
            .zip(dreal.chunks_exact_mut(block_bytes))
            .zip(sreal.iter_mut())
            .enumerate()
        {
            let Ok(blk) = <&[f32; BLOCK]>::try_from(blk) else {
                continue;
            };
            let amax = peak_bits(blk);
            if amax >= 0x7F80_0000 {
                return Err(non_finite(blk, row0 + r, b * BLOCK));
            }
            let s = scale_byte(layout.format, rule, amax);
            *sb = s;
            let inv = pow2(127 - i32::from(s));
            if FP4 {
                for (o, pair) in dst.iter_mut().zip(blk.chunks_exact(2)) {
                    *o = enc(pair[0] * inv) | (enc(pair[1] * inv) << 4);
                }
            } else {
                for (o, &v) in dst.iter_mut().zip(blk) {
                    *o = enc(v * inv);
                }
            }
        }
    }
    Ok(())
}
