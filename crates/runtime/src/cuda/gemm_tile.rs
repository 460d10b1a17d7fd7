//! MX weights laid out for the prefill GEMM (`kernels/gemm_common.cuh` and the files
//! after it in its module): the host re-tiling ([`tile_gemm`], [`tile_gemm_swiglu`])
//! and its upload ([`GemmWeights`]).
//!
//! Key design choice: the weights are stored in the exact shared-memory order the
//! tensor cores read (per 128-row tile and 128-value k block, 16 KB of codes in the
//! wgmma core-matrix order, then the block's scales), so one bulk copy per operand fills
//! a pipeline stage and the kernel never rearranges bytes. MXFP4 is folded exactly into
//! E4M3 codes on the way ([`super::gemm_fold`]).

use favlo_mx::{ElementFormat, MxView};

use super::context::{CudaContext, DeviceBuffer};
use super::gemm_fold::fold_fp4;
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

/// Tokens per block tile and weight rows per block tile (`GM_TILE`).
pub const GEMM_TILE: usize = 128;
/// K values per pipeline stage (`GM_KB`).
pub const GEMM_KB: usize = 128;
/// Bytes of one 128 × 128 code tile.
pub(super) const TILE_BYTES: usize = GEMM_TILE * GEMM_KB;
/// Scale bytes per (row tile, k block): 128 rows × 4 blocks.
pub(super) const SCALE_TILE_BYTES: usize = GEMM_TILE * 4;

/// Offset of code (row `r`, k `k`) inside one 128 × 128 tile: the wgmma core-matrix
/// order [r/8][k/16][r%8][k%16] (8 × 16-byte core matrices, no swizzle).
pub fn tile_offset(r: usize, k: usize) -> usize {
    ((r / 8) * 8 + k / 16) * 128 + (r % 8) * 16 + k % 16
}

/// An MX weight re-tiled for [`GemmMx`](super::GemmMx) on the host (MXFP4 as exact E4M3 codes).
#[derive(Clone, Debug)]
pub struct GemmWeightsHost {
    /// The codes' format (E4M3 for MXFP4 weights, folded by [`super::gemm_fold`]).
    pub format: ElementFormat,
    /// One scale per (row, 128 k), repeated in the four slots: the grouped kernel may
    /// promote once per stage.
    pub grouped: bool,
    pub rows: usize,
    pub cols: usize,
    /// 128-value k blocks (the layout's padded columns / 128).
    pub kblocks: usize,
    /// `[row tile][k block][16 KB]` codes in [`tile_offset`] order, zero past the rows.
    pub data: Vec<u8>,
    /// `[row tile][k block][row 128][block 4]` E8M0 bytes.
    pub scales: Vec<u8>,
    /// Gate | up rows re-paired for [`GemmMx::gemm_swiglu`](super::GemmMx::gemm_swiglu) ([`tile_gemm_swiglu`]).
    pub swiglu: bool,
}

impl GemmWeightsHost {
    /// Device bytes of a `rows × cols` matrix tiled by [`tile_gemm`] (either MX format:
    /// one byte per code in whole 128 × 128 tiles, plus the scale tiles).
    pub fn bytes_for(rows: usize, cols: usize) -> u64 {
        let tiles = rows.div_ceil(GEMM_TILE) * cols.div_ceil(GEMM_KB).max(1);
        (tiles * (TILE_BYTES + SCALE_TILE_BYTES)) as u64
    }
}

/// Re-tiles an MX matrix for the GEMM: MXFP8 (E4M3 or E5M2) as it is, MXFP4 re-encoded
/// as E4M3 codes with no rounding ([`super::gemm_fold`]; grouped scales where the
/// matrix allows).
pub fn tile_gemm(view: MxView<'_>) -> Result<GemmWeightsHost, CudaError> {
    tile_gemm_rows(view, |r| r, false)
}

/// [`tile_gemm`] of a gate | up matrix (`2·ff` rows: gate then up, `ff` a multiple of
/// 64) for [`GemmMx::gemm_swiglu`](super::GemmMx::gemm_swiglu): row tile j holds gate rows 64j .. 64j + 63, then up
/// rows 64j .. 64j + 63, so the two consumer warpgroups of one block finish the gate
/// and up halves of the same 64 outputs.
pub fn tile_gemm_swiglu(view: MxView<'_>) -> Result<GemmWeightsHost, CudaError> {
    let rows = view.layout.rows;
    let ff = rows / 2;
    if rows == 0 || !rows.is_multiple_of(128) {
        return Err(CudaError::Shape {
            op: "tile_gemm_swiglu",
            detail: format!("{rows} rows: gate | up halves must be multiples of 64"),
        });
    }
    let half = GEMM_TILE / 2;
    let source = move |r: usize| {
        let (tile, i) = (r / GEMM_TILE, r % GEMM_TILE);
        if i < half {
            tile * half + i
        } else {
            ff + tile * half + i - half
        }
    };
    tile_gemm_rows(view, source, true)
}

/// [`tile_gemm`] with tiled row r taken from row `source(r)` of the matrix.
fn tile_gemm_rows(
    view: MxView<'_>,
    source: impl Fn(usize) -> usize + Sync,
    swiglu: bool,
) -> Result<GemmWeightsHost, CudaError> {
    let l = view.layout;
    // 128-value k blocks over the real columns (FP4 rows are padded further, to 256).
    let kblocks = l.cols.div_ceil(GEMM_KB).max(1);
    // Per source row: its codes (`cs` bytes at `codes[r · cs]`) and its scales (`ss`
    // bytes at `scales[r · ss]`), from the folded planes (MXFP4) or the matrix itself.
    let folded;
    let (format, grouped, (codes, cs), (scales, ss)) = if l.format == ElementFormat::Fp4E2M1 {
        folded = fold_fp4(view, kblocks);
        (
            ElementFormat::Fp8E4M3,
            folded.grouped,
            (&folded.codes[..], kblocks * GEMM_KB),
            (&folded.scales[..], kblocks * 4),
        )
    } else {
        (
            l.format,
            false,
            (view.bytes, l.data_row_bytes()),
            (&view.bytes[l.scale_offset()..], l.scale_row_bytes()),
        )
    };
    let (data, scales) = tile_rows(
        l.rows,
        kblocks,
        |r| &codes[source(r) * cs..][..cs],
        |r| &scales[source(r) * ss..][..ss],
    );
    Ok(GemmWeightsHost {
        format,
        grouped,
        rows: l.rows,
        cols: l.cols,
        kblocks,
        data,
        scales,
        swiglu,
    })
}

/// Rows of 1-byte codes (`kblocks · 128` each) and their scales (4 per k block) into
/// the tiled planes, row tiles in parallel.
fn tile_rows<'a>(
    rows: usize,
    kblocks: usize,
    row_codes: impl Fn(usize) -> &'a [u8] + Sync,
    row_scales: impl Fn(usize) -> &'a [u8] + Sync,
) -> (Vec<u8>, Vec<u8>) {
    use rayon::prelude::*;
    let tiles = rows.div_ceil(GEMM_TILE);
    let mut data = vec![0u8; tiles * kblocks * TILE_BYTES];
    let mut scales = vec![0u8; tiles * kblocks * SCALE_TILE_BYTES];
    data.par_chunks_mut(kblocks * TILE_BYTES)
        .zip(scales.par_chunks_mut(kblocks * SCALE_TILE_BYTES))
        .enumerate()
        .for_each(|(tile, (data, scales))| {
            for r in 0..GEMM_TILE.min(rows - tile * GEMM_TILE) {
                let row = tile * GEMM_TILE + r;
                let (rd, rs) = (row_codes(row), row_scales(row));
                for kb in 0..kblocks {
                    let base = kb * TILE_BYTES;
                    for c in 0..GEMM_KB / 16 {
                        let d = base + tile_offset(r, 16 * c);
                        data[d..d + 16].copy_from_slice(&rd[kb * GEMM_KB + 16 * c..][..16]);
                    }
                    let sb = kb * SCALE_TILE_BYTES + r * 4;
                    scales[sb..sb + 4].copy_from_slice(&rs[kb * 4..kb * 4 + 4]);
                }
            }
        });
    (data, scales)
}

/// A re-tiled MXFP8 weight in device memory.
pub struct GemmWeights {
    pub format: ElementFormat,
    /// See [`GemmWeightsHost::grouped`].
    pub grouped: bool,
    pub rows: usize,
    pub cols: usize,
    pub kblocks: usize,
    /// See [`GemmWeightsHost::swiglu`].
    pub swiglu: bool,
    pub(super) data: DeviceBuffer<u8>,
    pub(super) scales: DeviceBuffer<u8>,
}

impl GemmWeights {
    /// Uploads a matrix tiled by [`tile_gemm`].
    pub fn upload(
        ctx: &CudaContext,
        owner: &Owner,
        host: &GemmWeightsHost,
    ) -> Result<GemmWeights, CudaError> {
        Ok(GemmWeights {
            format: host.format,
            grouped: host.grouped,
            rows: host.rows,
            cols: host.cols,
            kblocks: host.kblocks,
            swiglu: host.swiglu,
            data: ctx.upload(owner, SpanKind::Resident, &host.data)?,
            scales: ctx.upload(owner, SpanKind::Resident, &host.scales)?,
        })
    }

    /// A device-side copy at other addresses (benchmarks: distinct weights per layer).
    pub fn duplicate(&self, ctx: &CudaContext, owner: &Owner) -> Result<GemmWeights, CudaError> {
        let mut data = ctx.alloc::<u8>(owner, SpanKind::Resident, self.data.len())?;
        let mut scales = ctx.alloc::<u8>(owner, SpanKind::Resident, self.scales.len())?;
        let s = ctx.stream();
        s.memcpy_dtod(&self.data.slice, &mut data.slice)
            .map_err(driver_err("cuMemcpyDtoD"))?;
        s.memcpy_dtod(&self.scales.slice, &mut scales.slice)
            .map_err(driver_err("cuMemcpyDtoD"))?;
        Ok(GemmWeights {
            format: self.format,
            grouped: self.grouped,
            rows: self.rows,
            cols: self.cols,
            kblocks: self.kblocks,
            swiglu: self.swiglu,
            data,
            scales,
        })
    }

    /// Bytes held on the device.
    pub fn device_bytes(&self) -> u64 {
        self.data.bytes() + self.scales.bytes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use favlo_mx::MxLayout;

    /// The SwiGLU tiling is the plain tiling with row tile j = gate rows 64j.. then up
    /// rows 64j.., codes and scales alike (MXFP8 as is, MXFP4 folded); a gate|up
    /// matrix whose halves are not multiples of 64 is refused.
    #[test]
    fn swiglu_tiling_pairs_gate_and_up_rows() {
        for format in [ElementFormat::Fp8E4M3, ElementFormat::Fp4E2M1] {
            let (ff, cols) = (192, 300);
            let l = MxLayout::new(format, 2 * ff, cols);
            let mut bytes = vec![0u8; l.total_bytes()];
            for (i, b) in bytes[..l.scale_offset()].iter_mut().enumerate() {
                *b = ((i * 37) % 251) as u8 & 0x77; // no E4M3 NaN codes
            }
            for (i, b) in bytes[l.scale_offset()..].iter_mut().enumerate() {
                *b = 118 + (i % 7) as u8;
            }
            let view = MxView::new(l, &bytes).unwrap();
            let (plain, paired) = (tile_gemm(view).unwrap(), tile_gemm_swiglu(view).unwrap());
            assert!(paired.swiglu && !plain.swiglu);
            let kb = plain.kblocks;
            let row_of = |h: &GemmWeightsHost, r: usize| -> (Vec<u8>, Vec<u8>) {
                let (t, rr) = (r / GEMM_TILE, r % GEMM_TILE);
                let codes = (0..kb * GEMM_KB)
                    .map(|k| {
                        h.data[(t * kb + k / GEMM_KB) * TILE_BYTES + tile_offset(rr, k % GEMM_KB)]
                    })
                    .collect();
                let scales = (0..kb)
                    .flat_map(|b| {
                        let o = (t * kb + b) * SCALE_TILE_BYTES + rr * 4;
                        h.scales[o..o + 4].to_vec()
                    })
                    .collect();
                (codes, scales)
            };
            for r in 0..2 * ff {
                let (t, i) = (r / GEMM_TILE, r % GEMM_TILE);
                let src = if i < 64 {
                    64 * t + i
                } else {
                    ff + 64 * t + i - 64
                };
                assert_eq!(
                    row_of(&paired, r),
                    row_of(&plain, src),
                    "{format:?} row {r}"
                );
            }
            let odd = MxLayout::new(format, 2 * 96, cols);
            let b = vec![0u8; odd.total_bytes()];
            assert!(tile_gemm_swiglu(MxView::new(odd, &b).unwrap()).is_err());
        }
    }

    #[test]
    fn tiling_places_every_code_and_scale() {
        // 200 × 300 E4M3 with distinct-ish bytes: every (row, k) lands at the tile
        // offset the kernel reads, padding stays zero.
        let l = MxLayout::new(ElementFormat::Fp8E4M3, 200, 300);
        let mut bytes = vec![0u8; l.total_bytes()];
        for r in 0..l.rows {
            for k in 0..l.cols {
                bytes[r * l.data_row_bytes() + k] = ((r * 7 + k * 13) % 251 + 1) as u8;
            }
            for b in 0..l.cols.div_ceil(32) {
                bytes[l.scale_offset() + r * l.scale_row_bytes() + b] = (r + 3 * b) as u8;
            }
        }
        let h = tile_gemm(MxView::new(l, &bytes).unwrap()).unwrap();
        assert_eq!(h.kblocks, 3);
        let mut seen = 0usize;
        for r in 0..256 {
            for k in 0..h.kblocks * GEMM_KB {
                let (t, rr, kb) = (r / 128, r % 128, k / 128);
                let got = h.data[(t * h.kblocks + kb) * TILE_BYTES + tile_offset(rr, k % 128)];
                let want = if r < l.rows && k < l.cols {
                    ((r * 7 + k * 13) % 251 + 1) as u8
                } else {
                    0
                };
                assert_eq!(got, want, "row {r} k {k}");
                seen += usize::from(got != 0);
                if k % 32 == 0 {
                    let s =
                        h.scales[(t * h.kblocks + kb) * SCALE_TILE_BYTES + rr * 4 + (k % 128) / 32];
                    let want = if r < l.rows && k < l.cols {
                        (r + 3 * (k / 32)) as u8
                    } else {
                        0
                    };
                    assert_eq!(s, want, "scale row {r} block {}", k / 32);
                }
            }
        }
        assert_eq!(seen, l.rows * l.cols);
        // The offsets of one tile are a permutation.
        let mut hit = vec![false; TILE_BYTES];
        for r in 0..128 {
            for k in 0..128 {
                assert!(!std::mem::replace(&mut hit[tile_offset(r, k)], true));
            }
        }
    }
}
