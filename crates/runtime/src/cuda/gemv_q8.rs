//! The MXFP4 GEMV with x as E4M3 terms on Hopper's FP8 tensor cores
//! (`kernels/gemv_q8.cu`): its weight layout ([`tile_mx_q8`], [`MxQ8`]), its x
//! preparation ([`XPrep8`]) and its launch ([`GemvMma::gemv_q8`]).
//!
//! Key design choice: a different numerical contract from [`GemvMma::gemv`], taken on
//! purpose and opted into. The weights' FP4 codes become E4M3 operands in five integer
//! operations per 8 codes (the f16 route needs eleven) and one `wgmma` m64n8k32 covers
//! what two `mma.sync` m16n8k16 did; but the FP8 tensor cores need FP8 on both sides,
//! so x is carried as 2 or 4 E4M3 terms per value (~8 or ~16 bits) and the products are
//! summed in the tensor core's 13-bit-mantissa accumulator. The f16 route stays exact to
//! ~2^-22 and remains the default everywhere.

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use favlo_mx::{ElementFormat, MxLayout, MxView};

use super::context::{CudaContext, DeviceBuffer};
use super::gemv::{GemvMma, int, shape};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

/// Rows per tile (one warpgroup's wgmma M).
pub const Q8_ROWS: usize = 64;
/// Bytes of a data row per chunk (16 FP4 blocks).
pub const Q8_CHUNK: usize = 256;
/// Most warpgroups per block (the kernel's partial sums hold 4; 512 threads).
const MAX_WG: usize = 4;

/// Where each FP4 code of a favlo-mx word goes in the stored word, as (sign, e1, e0, m)
/// bit positions: elements 0..3 as E4M3 bits 7, 4, 3, 2 of byte e (the kernel masks
/// them out in place), elements 4..7 at bits 5, 6, 1, 0 of byte e − 4 (a shift left by
/// two carries s, e0, m to 7, 3, 2 and a shift right by two e1 to 4).
fn q8_place(e: usize) -> [u32; 4] {
    let b = 8 * (e as u32 % 4);
    if e < 4 {
        [b + 7, b + 4, b + 3, b + 2]
    } else {
        [b + 5, b + 6, b + 1, b]
    }
}

/// Re-encodes one little-endian word of 8 FP4 codes for the E4M3 route.
pub(crate) fn fp4_q8_word(w: u32) -> u32 {
    let mut out = 0u32;
    for e in 0..8 {
        let code = (w >> (4 * e)) & 0xf;
        // code bits: 3 = sign, 2 = e1, 1 = e0, 0 = m.
        for (bit, &pos) in [3u32, 2, 1, 0].iter().zip(q8_place(e).iter()) {
            out |= ((code >> bit) & 1) << pos;
        }
    }
    out
}

/// An MXFP4 matrix tiled for [`GemvMma::gemv_q8`], on the host.
#[derive(Clone, Debug)]
pub struct MxQ8Host {
    pub layout: MxLayout,
    pub data: Vec<u8>,
    pub scales: Vec<u8>,
}

/// Tiles an MXFP4 matrix for the E4M3 route: per 64-row tile T and 256-byte chunk c of
/// the data rows (the last chunk zero-padded), warp q's 4 KB ordered
/// [i 2][j 4][lane 32][16 B], lane 4g + t holding row 64T + 16q + g + 8i, bytes
/// 256c + 64j + 16t (words re-encoded by [`fp4_q8_word`]); and per (T, c, q) 8 scale
/// bytes [i 2][j 4] per lane, of block 16c + 4j + t.
pub fn tile_mx_q8(view: MxView<'_>) -> Result<MxQ8Host, CudaError> {
    use rayon::prelude::*;
    let l = view.layout;
    if l.format != ElementFormat::Fp4E2M1 {
        return Err(shape(
            "tile_mx_q8",
            format!("{:?}: the E4M3 route takes MXFP4 weights", l.format),
        ));
    }
    let src = view.bytes;
    let drb = l.data_row_bytes();
    let srb = l.scale_row_bytes();
    let chunks = drb.div_ceil(Q8_CHUNK);
    let tiles = l.rows.div_ceil(Q8_ROWS);
    let lut: Vec<[u32; 256]> = (0..4)
        .map(|k| {
            let mut t = [0u32; 256];
            for (b, e) in t.iter_mut().enumerate() {
                *e = fp4_q8_word((b as u32) << (8 * k));
            }
            t
        })
        .collect();
    let mut data = vec![0u8; tiles * chunks * 4 * 4096];
    let mut scales = vec![0u8; tiles * chunks * 4 * 256];
    data.par_chunks_mut(chunks * 4 * 4096)
        .zip(scales.par_chunks_mut(chunks * 4 * 256))
        .enumerate()
        .for_each(|(tile, (d_out, s_out))| {
            for c in 0..chunks {
                for q in 0..4 {
                    let wbase = (c * 4 + q) * 4096;
                    let sbase = (c * 4 + q) * 256;
                    for i in 0..2 {
                        for j in 0..4 {
                            for lane in 0..32 {
                                let (g, t) = (lane / 4, lane % 4);
                                let row = tile * Q8_ROWS + 16 * q + g + 8 * i;
                                if row >= l.rows {
                                    continue;
                                }
                                let col = Q8_CHUNK * c + 64 * j + 16 * t;
                                let blk = 16 * c + 4 * j + t;
                                if blk < srb {
                                    s_out[sbase + lane * 8 + i * 4 + j] =
                                        src[l.scale_offset() + row * srb + blk];
                                }
                                if col >= drb {
                                    continue;
                                }
                                let d = wbase + (i * 4 + j) * 512 + lane * 16;
                                let s = row * drb + col;
                                let n = (drb - col).min(16);
                                for (k, word) in src[s..s + n].chunks(4).enumerate() {
                                    let mut b = [0u8; 4];
                                    b[..word.len()].copy_from_slice(word);
                                    let w = lut[0][usize::from(b[0])]
                                        | lut[1][usize::from(b[1])]
                                        | lut[2][usize::from(b[2])]
                                        | lut[3][usize::from(b[3])];
                                    d_out[d + 4 * k..d + 4 * k + 4]
                                        .copy_from_slice(&w.to_le_bytes());
                                }
                            }
                        }
                    }
                }
            }
        });
    Ok(MxQ8Host {
        layout: l,
        data,
        scales,
    })
}

/// An MXFP4 matrix in device memory, tiled for [`GemvMma::gemv_q8`].
pub struct MxQ8 {
    pub layout: MxLayout,
    data: DeviceBuffer<u8>,
    scales: DeviceBuffer<u8>,
}

impl MxQ8 {
    /// Uploads a matrix tiled by [`tile_mx_q8`].
    pub fn upload(ctx: &CudaContext, owner: &Owner, host: &MxQ8Host) -> Result<MxQ8, CudaError> {
        Ok(MxQ8 {
            layout: host.layout,
            data: ctx.upload(owner, SpanKind::Resident, &host.data)?,
            scales: ctx.upload(owner, SpanKind::Resident, &host.scales)?,
        })
    }

    /// 256-byte chunks per row.
    fn chunks(&self) -> usize {
        self.layout.data_row_bytes().div_ceil(Q8_CHUNK)
    }
}

/// x prepared for [`GemvMma::gemv_q8`]: per 32-value block 4 E4M3 terms of 32 bytes and
/// one f32 factor, over whole 256-byte chunks of FP4 rows (512 values).
pub struct XPrep8 {
    terms: DeviceBuffer<u8>,
    xs: DeviceBuffer<f32>,
    cols: usize,
}

impl XPrep8 {
    /// Scratch for vectors of up to `cols` values (rounded up to 512; the padding stays
    /// zero).
    pub fn new(ctx: &CudaContext, owner: &Owner, cols: usize) -> Result<XPrep8, CudaError> {
        let cols = cols.div_ceil(512) * 512;
        Ok(XPrep8 {
            terms: ctx.alloc(owner, SpanKind::Scratch, cols * 4)?,
            xs: ctx.alloc(owner, SpanKind::Scratch, cols / 32)?,
            cols,
        })
    }

    /// The first `n` prepared values reconstructed on the host with `terms` terms
    /// (t0 + t1/16 + ...)·2^-e: what the GEMV multiplies with.
    pub fn values(&self, ctx: &CudaContext, n: usize, terms: usize) -> Result<Vec<f64>, CudaError> {
        let b = ctx.download(&self.terms)?;
        let xs = ctx.download(&self.xs)?;
        Ok((0..n.min(self.cols))
            .map(|i| {
                let (blk, k) = (i / 32, i % 32);
                let v: f64 = (0..terms.min(4))
                    .map(|t| {
                        let code = b[blk * 128 + 32 * t + k];
                        f64::from(favlo_mx::decode_fp8_e4m3(code)) / 16f64.powi(t as i32)
                    })
                    .sum();
                v * f64::from(xs[blk])
            })
            .collect())
    }
}

impl GemvMma {
    /// Prepares the first `cols` values of `x` (which must hold them rounded up to 32,
    /// zero past the real columns) as E4M3 terms into `out`.
    pub fn prep_x8(
        &self,
        x: &DeviceBuffer<f32>,
        cols: usize,
        out: &mut XPrep8,
    ) -> Result<(), CudaError> {
        let op = "gemv_prep_x8";
        self.q8_supported(op)?;
        let n = cols.div_ceil(32) * 32;
        if x.len() < n || out.cols < n {
            return Err(shape(
                op,
                format!("x {} / prep {} for {n} values", x.len(), out.cols),
            ));
        }
        let blocks = n / 32;
        if blocks == 0 {
            return Ok(());
        }
        let nb = int(blocks, op)?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx().stream();
        let mut b = s.launch_builder(&self.q8.prep);
        b.arg(&x.slice)
            .arg(&mut out.terms.slice)
            .arg(&mut out.xs.slice)
            .arg(&nb);
        // SAFETY: types match the kernel; n ≤ x.len(), 4n ≤ terms, n/32 ≤ xs.
        unsafe { b.launch(cfg) }.map_err(driver_err("cuLaunchKernel(gemv_prep_x8)"))?;
        Ok(())
    }

    fn q8_supported(&self, op: &'static str) -> Result<(), CudaError> {
        if self.ctx().arch() != "sm_90a" {
            return Err(shape(
                op,
                format!(
                    "the E4M3 GEMV needs Hopper's wgmma (sm_90a); device is {}",
                    self.ctx().arch()
                ),
            ));
        }
        Ok(())
    }

    /// y = W·x (`accumulate`: y += W·x) for an MXFP4 weight tiled by [`tile_mx_q8`], x
    /// prepared by [`Self::prep_x8`], with `terms` (2 or 4) E4M3 terms of x.
    pub fn gemv_q8(
        &self,
        w: &MxQ8,
        x: &XPrep8,
        y: &mut DeviceBuffer<f32>,
        accumulate: bool,
        terms: usize,
    ) -> Result<(), CudaError> {
        let op = "gemv_q8";
        self.q8_supported(op)?;
        let l = w.layout;
        let chunks = w.chunks();
        let tiles = l.rows.div_ceil(Q8_ROWS);
        if w.data.len() != tiles * chunks * 4 * 4096
            || w.scales.len() != tiles * chunks * 4 * 256
            || x.cols < chunks * 512
            || y.len() < l.rows
        {
            return Err(shape(
                op,
                format!(
                    "W {}+{} bytes for {tiles}x{chunks} tiles, x prep {} (need {}), y {} (need {})",
                    w.data.len(),
                    w.scales.len(),
                    x.cols,
                    chunks * 512,
                    y.len(),
                    l.rows
                ),
            ));
        }
        let (f, sets) = match terms {
            2 => (&self.q8.t2, 1usize),
            4 => (&self.q8.t4, 2usize),
            _ => return Err(shape(op, format!("{terms} terms (2 or 4)"))),
        };
        if l.rows == 0 || chunks == 0 {
            return Ok(());
        }
        // About one wave of 16 warps per multiprocessor: up to 4 warpgroups per block
        // share a tile's chunks, and more blocks per tile take parts of them (adding
        // their sums with atomics) when the tiles are too few.
        let target = self.sms * 4;
        let wg = (target / tiles).clamp(1, MAX_WG).min(chunks);
        let split = (target / (tiles * wg)).clamp(1, chunks.div_ceil(wg));
        let smem = wg * 2 * (sets * 4096 + 64);
        let rows = int(l.rows, op)?;
        let nch = int(chunks, op)?;
        let acc = i32::from(accumulate);
        let s = self.ctx().stream();
        if split > 1 && !accumulate {
            s.memset_zeros(&mut y.slice)
                .map_err(driver_err("cuMemsetD8Async(gemv_q8)"))?;
        }
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(tiles).map_err(|_| shape(op, format!("{tiles} tiles")))?,
                split as u32,
                1,
            ),
            block_dim: ((wg * 128) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let (wd, _g0) = w.data.slice.device_ptr(s);
        let (wsc, _g1) = w.scales.slice.device_ptr(s);
        let (xt, _g2) = x.terms.slice.device_ptr(s);
        let (xf, _g3) = x.xs.slice.device_ptr(s);
        let (yp, _g4) = y.slice.device_ptr_mut(s);
        let mut args = [
            arg_ptr(&wd),
            arg_ptr(&wsc),
            arg_ptr(&xt),
            arg_ptr(&xf),
            arg_ptr(&yp),
            arg_ptr(&rows),
            arg_ptr(&nch),
            arg_ptr(&acc),
        ];
        // SAFETY: the arguments are in the kernel's order and types and outlive the
        // call; the planes hold tiles·chunks·4 warp chunks, x covers chunks·512 values,
        // y ≥ rows (checked above); the kernel waits (PDL) before reading x or y.
        unsafe { launch_raw(s, f, cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(gemv_q8)"))
    }
}

#[cfg(test)]
mod tests {
    use super::{fp4_q8_word, q8_place};

    /// The kernel's A registers (`q8_lo` / `q8_hi` in gemv_q8.cu, restated here) hold
    /// every code of a word as the E4M3 byte of its value × 2^-6, whatever its
    /// neighbours, with nothing else set.
    #[test]
    fn q8_fragments_are_the_values() {
        let lo = |w: u32| w & 0x9C9C_9C9C;
        let hi = |w: u32| ((w << 2) & 0x8C8C_8C8C) | ((w >> 2) & 0x1010_1010);
        // Every position is used once.
        let mut used = 0u32;
        for e in 0..8 {
            for p in q8_place(e) {
                assert_eq!(used & (1 << p), 0, "bit {p} twice");
                used |= 1 << p;
            }
        }
        assert_eq!(used, u32::MAX);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for e in 0..8 {
            for code in 0..16u32 {
                for _ in 0..16 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let w = ((state as u32) & !(0xf << (4 * e))) | (code << (4 * e));
                    let g = fp4_q8_word(w);
                    let reg = if e < 4 { lo(g) } else { hi(g) };
                    let byte = (reg >> (8 * (e % 4))) as u8;
                    let got = favlo_mx::decode_fp8_e4m3(byte) * 64.0;
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
