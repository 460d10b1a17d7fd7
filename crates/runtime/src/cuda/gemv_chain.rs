//! A chain of dependent GEMVs in one launch (`kernels/gemv_chain.cu`), the experiment
//! behind the "persistent decode kernel" question: does a grid barrier between two
//! dependent GEMVs, with the next weights requested before it, cost less than a kernel
//! boundary under programmatic dependent launch?
//!
//! Key design choice: stage s+1's input is the RMSNorm-style preparation of stage s's
//! rows, done by the same producer and consumer epilogues the decode step uses
//! ([`EpiOut::Norm`], [`NormIn`]), so [`GemvMma::chain_separate`] (one ping-pong launch
//! per stage) is the reference and the chain must match it bit for bit.

use std::cell::Cell;
use std::marker::PhantomData;

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};
use favlo_mx::ElementFormat;

use super::context::DeviceBuffer;
use super::gemv::{GemvMma, XPrep, int, shape, warps_per_block};
use super::gemv_epi::{EpiOut, Epilogue, NormIn};
use super::gemv_tile::{MxTiled, TILE_ROWS};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

/// The buffers a chain passes between its stages.
pub struct ChainIo<'a> {
    /// Stage 0's prepared input ([`GemvMma::prep_x`]) and the second preparation the
    /// stages alternate with.
    pub preps: [&'a mut XPrep; 2],
    /// Partial sums of squares, one per 32 rows, for each parity of stage.
    pub ss: [&'a mut DeviceBuffer<f32>; 2],
    /// The norm weight (one per row).
    pub nw: &'a DeviceBuffer<f32>,
    pub eps: f32,
    /// The last stage's rows.
    pub y: &'a mut DeviceBuffer<f32>,
}

/// The stages' weights as the chain kernel reads them (device pointer tables) and its
/// barrier counter; borrows the weights it points at.
pub struct GemvChain<'w> {
    ptrs: DeviceBuffer<u64>,
    bar: DeviceBuffer<u32>,
    /// The counter's value when the next launch starts.
    base: Cell<u32>,
    stages: usize,
    format: ElementFormat,
    rows: usize,
    _w: PhantomData<&'w MxTiled>,
}

impl GemvMma {
    /// The plan of a chain over `ws` (all N×N, one format, N a multiple of 32).
    pub fn chain_plan<'w>(
        &self,
        owner: &Owner,
        ws: &[&'w MxTiled],
    ) -> Result<GemvChain<'w>, CudaError> {
        let op = "gemv_chain";
        let Some(first) = ws.first() else {
            return Err(shape(op, "no stage".into()));
        };
        let l = first.layout;
        if ws.iter().any(|w| w.layout != l)
            || l.rows != l.cols
            || !l.rows.is_multiple_of(TILE_ROWS)
            || l.format == ElementFormat::Fp8E5M2
        {
            return Err(shape(
                op,
                format!("stages must share one square layout; first {l:?}"),
            ));
        }
        let s = self.ctx().stream();
        let mut table = Vec::with_capacity(2 * ws.len());
        for w in ws {
            let (p, _g) = w.data.slice.device_ptr(s);
            table.push(p);
        }
        for w in ws {
            let (p, _g) = w.scales.slice.device_ptr(s);
            table.push(p);
        }
        Ok(GemvChain {
            ptrs: self.ctx().upload(owner, SpanKind::Scratch, &table)?,
            bar: self.ctx().alloc(owner, SpanKind::Scratch, 1)?,
            base: Cell::new(0),
            stages: ws.len(),
            format: l.format,
            rows: l.rows,
            _w: PhantomData,
        })
    }

    /// Blocks and warps of the chain (the ping-pong kernel's), refused unless the
    /// whole grid is resident at once (the grid barrier needs it).
    fn chain_grid(&self, rows: usize, format: ElementFormat) -> Result<(usize, usize), CudaError> {
        let tiles = rows.div_ceil(TILE_ROWS);
        let chunks =
            rows * if format == ElementFormat::Fp4E2M1 {
                1
            } else {
                2
            } / 256;
        let w = warps_per_block(tiles, chunks, self.sms_count());
        let xb = if format == ElementFormat::Fp4E2M1 {
            8
        } else {
            4
        };
        let smem = 16 * 2 * (xb * 128 + xb * 4) + 2 * 16 * TILE_ROWS * 4;
        let per_sm = (16 / w).min(self.smem_per_sm() / smem.max(1));
        if tiles > per_sm * self.sms_count() {
            return Err(shape(
                "gemv_chain",
                format!("{tiles} blocks of {w} warps do not fit one wave"),
            ));
        }
        Ok((tiles, w))
    }

    /// All stages of `plan` in one launch; `io.preps[0]` holds stage 0's input.
    pub fn gemv_chain(&self, plan: &GemvChain<'_>, io: ChainIo<'_>) -> Result<(), CudaError> {
        let op = "gemv_chain";
        let n = plan.rows;
        check_io(&io, n)?;
        let (blocks, warps) = self.chain_grid(n, plan.format)?;
        let f = if plan.format == ElementFormat::Fp4E2M1 {
            &self.chain[0]
        } else {
            &self.chain[1]
        };
        let chunks = n * if plan.format == ElementFormat::Fp4E2M1 {
            1
        } else {
            2
        } / 256;
        let s = self.ctx().stream();
        let stages = int(plan.stages, op)?;
        let (rows, nch) = (int(n, op)?, int(chunks, op)?);
        let base = plan.base.get();
        let ChainIo {
            preps: [p0, p1],
            ss: [s0, s1],
            nw,
            eps,
            y,
        } = io;
        let (pt, _g0) = plan.ptrs.slice.device_ptr(s);
        let pd = pt;
        let ps = pt + (plan.stages * 8) as u64;
        let (h0, _g1) = p0.hl.slice.device_ptr_mut(s);
        let (x0, _g2) = p0.xs.slice.device_ptr_mut(s);
        let (h1, _g3) = p1.hl.slice.device_ptr_mut(s);
        let (x1, _g4) = p1.xs.slice.device_ptr_mut(s);
        let (q0, _g5) = s0.slice.device_ptr_mut(s);
        let (q1, _g6) = s1.slice.device_ptr_mut(s);
        let (wp, _g7) = nw.slice.device_ptr(s);
        let (yp, _g8) = y.slice.device_ptr_mut(s);
        let (bp, _g9) = plan.bar.slice.device_ptr(s);
        let mut args = [
            arg_ptr(&pd),
            arg_ptr(&ps),
            arg_ptr(&stages),
            arg_ptr(&h0),
            arg_ptr(&x0),
            arg_ptr(&h1),
            arg_ptr(&x1),
            arg_ptr(&q0),
            arg_ptr(&q1),
            arg_ptr(&wp),
            arg_ptr(&yp),
            arg_ptr(&rows),
            arg_ptr(&nch),
            arg_ptr(&bp),
            arg_ptr(&base),
            arg_ptr(&eps),
        ];
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: ((warps * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments are in the kernel's order and types; the pointer table
        // holds the planes of `stages` matrices of this layout (borrowed by the plan),
        // the preparations cover n values, the partials n / 32, nw and y n rows
        // (`check_io`); the whole grid is resident (`chain_grid`).
        unsafe { launch_raw(s, f, cfg, &mut args, false) }
            .map_err(driver_err("cuLaunchKernelEx(gemv_chain)"))?;
        let barriers = (plan.stages as u32).saturating_sub(1);
        plan.base
            .set(base.wrapping_add(barriers.wrapping_mul(blocks as u32)));
        Ok(())
    }

    /// The same chain as one ping-pong launch per stage with the norm epilogues (the
    /// decode step's way), into the same buffers.
    pub fn chain_separate(&self, ws: &[&MxTiled], io: ChainIo<'_>) -> Result<(), CudaError> {
        let Some(first) = ws.first() else {
            return Err(shape("gemv_chain", "no stage".into()));
        };
        let n = first.layout.rows;
        check_io(&io, n)?;
        let ChainIo {
            preps: [p0, p1],
            ss: [s0, s1],
            nw,
            eps,
            y,
        } = io;
        let mut preps = [p0, p1];
        let mut ss = [s0, s1];
        for (i, w) in ws.iter().enumerate() {
            let (pin, pout) = split_pair(&mut preps, i & 1);
            let (sout, sin) = split_pair(&mut ss, i & 1);
            let epi = Epilogue {
                accumulate: false,
                norm_in: (i > 0).then_some(NormIn {
                    parts: &*sin,
                    dim: n,
                    eps,
                }),
                out: EpiOut::Norm {
                    weight: nw,
                    prep: pout,
                    parts: sout,
                },
            };
            self.gemv_fused(w, pin, y, epi)?;
        }
        Ok(())
    }
}

/// (pair[i], the other one): stage i reads preparation i & 1 and writes the other, and
/// writes partials i & 1 after reading the other (stage i − 1's).
fn split_pair<'p, T>(pair: &'p mut [&mut T; 2], i: usize) -> (&'p mut T, &'p mut T) {
    let [a, b] = pair;
    if i == 0 {
        (&mut **a, &mut **b)
    } else {
        (&mut **b, &mut **a)
    }
}

fn check_io(io: &ChainIo<'_>, n: usize) -> Result<(), CudaError> {
    if io.preps.iter().any(|p| p.cols() < n)
        || io.ss.iter().any(|s| s.len() < n / 32)
        || io.nw.len() != n
        || io.y.len() < n
    {
        return Err(shape(
            "gemv_chain",
            format!("buffers too small for {n} rows"),
        ));
    }
    Ok(())
}
