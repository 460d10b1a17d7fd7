//! The packed MX matrix layout (`MxLayout`) and a borrowed, length-checked view of it (`MxView`).
//!
//! Design: every stride is a multiple of 128 bytes. Each row's codes are padded along K (FP4 to a
//! multiple of 256 values, FP8 to 128) with zero codes; the scale plane (one E8M0 byte per 32
//! values, rows padded to 128 bytes) starts right after the data plane, which already ends on a
//! 128-byte boundary. Accessors never panic: out-of-range rows give empty slices.

use crate::{BLOCK, ElementFormat, MxError, decode_e8m0, decode_fp4_e2m1};

/// Alignment of every stride and of the scale plane, in bytes.
pub const ALIGN: usize = 128;

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Shape + layout of one packed matrix: `rows` output rows (N), `cols` logical K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MxLayout {
    pub format: ElementFormat,
    pub rows: usize,
    pub cols: usize,
}

impl MxLayout {
    /// A layout for `rows` x `cols` values of `format`.
    pub fn new(format: ElementFormat, rows: usize, cols: usize) -> Self {
        MxLayout { format, rows, cols }
    }

    /// K padded so that a row's codes fill a multiple of 128 bytes: FP4 to 256, FP8 to 128.
    pub fn padded_cols(&self) -> usize {
        round_up(self.cols, ALIGN * 8 / self.format.bits())
    }

    /// Bytes per row of the data plane (a multiple of 128).
    pub fn data_row_bytes(&self) -> usize {
        self.padded_cols() * self.format.bits() / 8
    }

    /// Number of 32-value scale blocks per row (`padded_cols / 32`; only the first
    /// `cols.div_ceil(32)` cover real values, the rest are padding with byte 0).
    pub fn blocks_per_row(&self) -> usize {
        self.padded_cols() / BLOCK
    }

    /// Bytes per row of the scale plane (`padded_cols / 32` rounded up to 128).
    pub fn scale_row_bytes(&self) -> usize {
        round_up(self.blocks_per_row(), ALIGN)
    }

    /// Byte offset of the scale plane: `rows * data_row_bytes` (already 128-aligned).
    pub fn scale_offset(&self) -> usize {
        self.rows * self.data_row_bytes()
    }

    /// Total packed size: data plane + scale plane.
    pub fn total_bytes(&self) -> usize {
        self.scale_offset() + self.rows * self.scale_row_bytes()
    }

    /// `total_bytes` with overflow checking (`None` if the layout does not fit in `usize`).
    pub fn checked_total_bytes(&self) -> Option<usize> {
        let padded = self
            .cols
            .checked_next_multiple_of(ALIGN * 8 / self.format.bits())?;
        let data_row = padded.checked_mul(self.format.bits())? / 8;
        let scale_row = (padded / BLOCK).checked_next_multiple_of(ALIGN)?;
        self.rows
            .checked_mul(data_row)?
            .checked_add(self.rows.checked_mul(scale_row)?)
    }
}

/// Borrowed view of packed bytes; the kernels take this.
#[derive(Clone, Copy, Debug)]
pub struct MxView<'a> {
    pub layout: MxLayout,
    pub bytes: &'a [u8],
}

impl<'a> MxView<'a> {
    /// Wraps `bytes`, which must be exactly `layout.total_bytes()` long.
    pub fn new(layout: MxLayout, bytes: &'a [u8]) -> Result<Self, MxError> {
        let expected = layout.checked_total_bytes().ok_or(MxError::TooLarge {
            rows: layout.rows,
            cols: layout.cols,
        })?;
        if bytes.len() != expected {
            return Err(MxError::BufferLength {
                expected,
                actual: bytes.len(),
            });
        }
        Ok(MxView { layout, bytes })
    }

    /// Codes of row `r` (`data_row_bytes` long); empty if `r >= rows`.
    pub fn row_data(&self, r: usize) -> &'a [u8] {
        let n = self.layout.data_row_bytes();
        if r >= self.layout.rows {
            return &[];
        }
        self.bytes.get(r * n..(r + 1) * n).unwrap_or(&[])
    }

    /// Scale bytes of row `r` (`scale_row_bytes` long, the first `padded_cols / 32` are real);
    /// empty if `r >= rows`.
    pub fn row_scales(&self, r: usize) -> &'a [u8] {
        let n = self.layout.scale_row_bytes();
        if r >= self.layout.rows {
            return &[];
        }
        let start = self.layout.scale_offset() + r * n;
        self.bytes.get(start..start + n).unwrap_or(&[])
    }

    /// Decodes row `r` into `out` (`out.len() == cols`). Writes `min(out.len(), cols)` values;
    /// an out-of-range row writes nothing. A 0xFF scale byte (never written by `pack`) gives NaN.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let data = self.row_data(r);
        let scales = self.row_scales(r);
        let format = self.layout.format;
        let n = out.len().min(self.layout.cols);
        for (b, chunk) in out[..n].chunks_mut(BLOCK).enumerate() {
            let scale = scales
                .get(b)
                .map_or(f32::NAN, |&s| decode_e8m0(s).unwrap_or(f32::NAN));
            let base = b * BLOCK;
            match format {
                ElementFormat::Fp4E2M1 => {
                    let bytes = data.get(base / 2..base / 2 + BLOCK / 2).unwrap_or(&[]);
                    for (pair, &byte) in chunk.chunks_mut(2).zip(bytes) {
                        pair[0] = decode_fp4_e2m1(byte) * scale;
                        if let Some(hi) = pair.get_mut(1) {
                            *hi = decode_fp4_e2m1(byte >> 4) * scale;
                        }
                    }
                }
                _ => {
                    let codes = data.get(base..base + chunk.len()).unwrap_or(&[]);
                    for (o, &c) in chunk.iter_mut().zip(codes) {
                        *o = format.decode(c) * scale;
                    }
                }
            }
        }
    }

    /// Decodes the whole matrix, row-major `[rows, cols]`.
    pub fn dequantize(&self) -> Vec<f32> {
        let cols = self.layout.cols;
        let mut out = vec![0.0f32; self.layout.rows * cols];
        if cols == 0 {
            return out;
        }
        for (r, row) in out.chunks_mut(cols).enumerate() {
            self.dequantize_row(r, row);
        }
        out
    }
}
