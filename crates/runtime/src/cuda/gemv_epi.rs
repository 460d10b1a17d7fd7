//! The tensor-core GEMV's fused epilogues (`GemvEpi` in `kernels/gemv_common.cuh`): the
//! RMSNorm and SwiGLU x preparations done by the GEMV that finishes their input.
//!
//! Key design choice: an RMSNorm is h·s·w with s = 1/rms(h) a single scalar, so the
//! GEMV that finishes h (a residual add) prepares h·w for the next GEMV block by block,
//! with no grid-wide sum, and leaves one partial sum of squares per 32 rows; the next
//! GEMV multiplies its rows by s, summing those partials itself in a fixed order (the
//! result does not depend on the schedule). SwiGLU needs gate row i and up row i, which
//! different blocks finish: a counter per pair of row tiles makes the second of the two
//! prepare them. Each replaces a kernel, and its launch boundary, in the decode step.

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, SyncOnDrop};

use super::context::DeviceBuffer;
use super::gemv::{GemvMma, XPrep, shape};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};

/// The input of a norm consumer: the partial sums of squares a producer wrote.
pub struct NormIn<'a> {
    /// One partial per 32 values of the normalized vector (`dim / 32` of them).
    pub parts: &'a DeviceBuffer<f32>,
    /// Length of the normalized vector (the consuming matrix's columns).
    pub dim: usize,
    pub eps: f32,
}

/// What a GEMV writes besides its rows.
pub enum EpiOut<'a> {
    None,
    /// The rows are the input of the next RMSNorm (weight `weight`): its x preparation
    /// without the 1/rms factor into `prep`, and a sum of squares per 32 rows into
    /// `parts` (for a consumer's [`NormIn`]).
    Norm {
        weight: &'a DeviceBuffer<f32>,
        prep: &'a mut XPrep,
        parts: &'a mut DeviceBuffer<f32>,
    },
    /// The rows are gate | up (each half a multiple of 32): silu(gate)·up prepared
    /// into `prep`; `pairs` holds one counter per 32 gate rows, zero between calls
    /// (a fresh buffer is; every call leaves them so).
    Swiglu {
        prep: &'a mut XPrep,
        pairs: &'a mut DeviceBuffer<u32>,
    },
}

/// The epilogue of one [`GemvMma::gemv_fused`] call.
pub struct Epilogue<'a> {
    /// y += W·x (a residual add) instead of y = W·x.
    pub accumulate: bool,
    /// Multiply the rows by the RMSNorm factor of a producer's partials (x was prepared
    /// by an [`EpiOut::Norm`] or [`GemvMma::norm_parts_prep`]).
    pub norm_in: Option<NormIn<'a>>,
    pub out: EpiOut<'a>,
}

impl<'a> Epilogue<'a> {
    /// y = W·x, or y += W·x when `accumulate`.
    pub fn plain(accumulate: bool) -> Epilogue<'static> {
        Epilogue {
            accumulate,
            norm_in: None,
            out: EpiOut::None,
        }
    }

    /// y = s·(W·x), s the RMSNorm factor of `norm` (q|k|v, lm_head).
    pub fn normed(norm: NormIn<'a>) -> Epilogue<'a> {
        Epilogue {
            accumulate: false,
            norm_in: Some(norm),
            out: EpiOut::None,
        }
    }

    /// y = s·(W·x) over gate | up, then silu(gate)·up prepared ([`EpiOut::Swiglu`]).
    pub fn normed_swiglu(
        norm: NormIn<'a>,
        prep: &'a mut XPrep,
        pairs: &'a mut DeviceBuffer<u32>,
    ) -> Epilogue<'a> {
        Epilogue {
            accumulate: false,
            norm_in: Some(norm),
            out: EpiOut::Swiglu { prep, pairs },
        }
    }

    /// y += W·x (a residual add), then the next RMSNorm (`weight`) prepared
    /// ([`EpiOut::Norm`]).
    pub fn residual_norm(
        weight: &'a DeviceBuffer<f32>,
        prep: &'a mut XPrep,
        parts: &'a mut DeviceBuffer<f32>,
    ) -> Epilogue<'a> {
        Epilogue {
            accumulate: true,
            norm_in: None,
            out: EpiOut::Norm {
                weight,
                prep,
                parts,
            },
        }
    }

    /// Nothing but y = W·x or y += W·x.
    pub(crate) fn is_plain(&self) -> bool {
        self.norm_in.is_none() && matches!(self.out, EpiOut::None)
    }
}

/// `GemvEpi` as the kernels take it (pointer 0 = off).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct EpiRaw {
    ss_in: u64,
    nw: u64,
    xhl: u64,
    xs: u64,
    ss_out: u64,
    pairs: u64,
    accumulate: i32,
    ss_n: i32,
    dim: f32,
    eps: f32,
    half_tiles: i32,
    pad: i32,
}

fn ptr<'a, T>(b: &'a DeviceBuffer<T>, s: &'a CudaStream, g: &mut Vec<SyncOnDrop<'a>>) -> u64 {
    let (p, guard) = b.slice.device_ptr(s);
    g.push(guard);
    p
}

fn ptr_mut<'a, T>(
    b: &'a mut DeviceBuffer<T>,
    s: &'a CudaStream,
    g: &mut Vec<SyncOnDrop<'a>>,
) -> u64 {
    let (p, guard) = b.slice.device_ptr_mut(s);
    g.push(guard);
    p
}

/// The two planes of an x preparation, written by a producer epilogue.
fn prep_ptrs<'a>(
    prep: &'a mut XPrep,
    s: &'a CudaStream,
    g: &mut Vec<SyncOnDrop<'a>>,
) -> (u64, u64) {
    (ptr_mut(&mut prep.hl, s, g), ptr_mut(&mut prep.xs, s, g))
}

impl Epilogue<'_> {
    /// Checks the epilogue against a GEMV of `rows` rows over `cols` columns and turns
    /// it into the kernel's struct; the guards must outlive the launch.
    pub(crate) fn raw<'g>(
        &'g mut self,
        rows: usize,
        cols: usize,
        s: &'g CudaStream,
        guards: &mut Vec<SyncOnDrop<'g>>,
    ) -> Result<EpiRaw, CudaError> {
        let op = "gemv_mma epilogue";
        let mut r = EpiRaw {
            accumulate: i32::from(self.accumulate),
            ..EpiRaw::default()
        };
        if let Some(n) = &self.norm_in {
            if n.dim != cols || !n.dim.is_multiple_of(32) || n.parts.len() < n.dim / 32 {
                return Err(shape(
                    op,
                    format!(
                        "norm input of {} values ({} partials) for a matrix of {cols} columns",
                        n.dim,
                        n.parts.len()
                    ),
                ));
            }
            r.ss_in = ptr(n.parts, s, guards);
            r.ss_n = i32::try_from(n.dim / 32).map_err(|_| shape(op, "dim".into()))?;
            r.dim = n.dim as f32;
            r.eps = n.eps;
        }
        match &mut self.out {
            EpiOut::None => {}
            EpiOut::Norm {
                weight,
                prep,
                parts,
            } => {
                if !rows.is_multiple_of(32)
                    || weight.len() != rows
                    || prep.cols() < rows
                    || parts.len() < rows / 32
                {
                    return Err(shape(
                        op,
                        format!(
                            "norm output: {rows} rows, weight {}, prep {}, partials {}",
                            weight.len(),
                            prep.cols(),
                            parts.len()
                        ),
                    ));
                }
                r.nw = ptr(weight, s, guards);
                (r.xhl, r.xs) = prep_ptrs(prep, s, guards);
                r.ss_out = ptr_mut(parts, s, guards);
            }
            EpiOut::Swiglu { prep, pairs } => {
                let half = rows / 2;
                if !rows.is_multiple_of(64) || prep.cols() < half || pairs.len() < half / 32 {
                    return Err(shape(
                        op,
                        format!(
                            "SwiGLU output: {rows} rows (gate | up, each a multiple of 32), \
                             prep {}, counters {}",
                            prep.cols(),
                            pairs.len()
                        ),
                    ));
                }
                (r.xhl, r.xs) = prep_ptrs(prep, s, guards);
                r.pairs = ptr_mut(pairs, s, guards);
                r.half_tiles = i32::try_from(half / 32).map_err(|_| shape(op, "rows".into()))?;
            }
        }
        Ok(r)
    }
}

impl GemvMma {
    /// The producer half of a fused RMSNorm for a vector no GEMV finished (the first
    /// norm of a decode step): per 32 values of `x` (`weight.len()` of them, a multiple
    /// of 32), the x preparation of x·w into `out` and the sum of squares into `parts`.
    /// The GEMV that reads `out` must take `parts` as its [`NormIn`].
    pub fn norm_parts_prep(
        &self,
        x: &DeviceBuffer<f32>,
        weight: &DeviceBuffer<f32>,
        out: &mut XPrep,
        parts: &mut DeviceBuffer<f32>,
    ) -> Result<(), CudaError> {
        let op = "norm_parts_prep";
        let dim = weight.len();
        if dim == 0
            || !dim.is_multiple_of(32)
            || x.len() < dim
            || out.cols() < dim
            || parts.len() < dim / 32
        {
            return Err(shape(
                op,
                format!(
                    "x {} weight {dim} prep {} partials {}",
                    x.len(),
                    out.cols(),
                    parts.len()
                ),
            ));
        }
        let blocks = dim / 32;
        let nb = i32::try_from(blocks).map_err(|_| shape(op, format!("{dim} values")))?;
        let cfg = LaunchConfig {
            grid_dim: (blocks.div_ceil(8) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let s = self.ctx().stream();
        let (xp, _g0) = x.slice.device_ptr(s);
        let (wp, _g1) = weight.slice.device_ptr(s);
        let (hp, _g2) = out.hl.slice.device_ptr_mut(s);
        let (sp, _g3) = out.xs.slice.device_ptr_mut(s);
        let (pp, _g4) = parts.slice.device_ptr_mut(s);
        let mut args = [
            arg_ptr(&xp),
            arg_ptr(&wp),
            arg_ptr(&nb),
            arg_ptr(&hp),
            arg_ptr(&sp),
            arg_ptr(&pp),
        ];
        // SAFETY: the arguments are in the kernel's order and types; dim values are
        // read from x and weight, dim/32 blocks and partials written (checked above).
        unsafe { launch_raw(s, self.norm_parts_fn(), cfg, &mut args, self.pdl) }
            .map_err(driver_err("cuLaunchKernelEx(norm_parts_prep)"))
    }
}
