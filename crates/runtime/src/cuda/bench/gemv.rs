//! The MX GEMV benchmark: MXFP4/MXFP8 matrices timed from DRAM beside the
//! device-to-device copy bandwidth of the same run.
//!
//! Key design choice: bytes per GEMV = packed data plane + scale plane + x (f32) read
//! (y's write is left out); each timed repetition runs the GEMV once over each of
//! several copies of the weight totalling ≥ 512 MB, so the 60 MB L2 of an H200 cannot
//! serve it (median of 15 after 2 warm-ups, CUDA events). Before timing, the first 64
//! rows are checked against the f64 CPU reference and every row against the first
//! case of the same shape.

use std::sync::Arc;

use favlo_mx::{ElementFormat, MxLayout, MxView};

use super::{BenchError, Rng, random_mx};
use crate::cpu::{WeightRef, reference};
use crate::cuda::{
    CudaContext, CudaKernels, DeviceBuffer, GemvDecode, GemvKernel, GemvMma, MxDevice, MxTiled,
    XPrep, copy_bandwidth_gbps, tile_mx, time_ms,
};
use crate::ledger::{Owner, SpanKind};

/// Largest max|y − ref| / max|ref| a timed kernel may show.
const TOLERANCE: f64 = 1e-5;
/// Rows checked against the f64 reference.
const REF_ROWS: usize = 64;

/// What one benchmark case launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemvVariant {
    /// The tensor-core GEMV ([`GemvMma`]) with these settings.
    Mma {
        kernel: GemvKernel,
        /// (warps, ring depth) instead of the kernel's own choice.
        ring: Option<(usize, usize)>,
        /// Ping-pong L2 prefetch distance (0 = off).
        pp_prefetch: u8,
    },
    /// A timing probe of the ring kernels ([`GemvMma::gemv_probe`] mode); its output is
    /// not checked.
    Probe {
        ring: Option<(usize, usize)>,
        mode: usize,
    },
    /// The CUDA-core GEMV on the favlo-mx layout.
    CudaCore(GemvDecode),
}

/// One named case of the table.
#[derive(Clone, Debug)]
pub struct GemvCase {
    pub name: String,
    pub variant: GemvVariant,
}

/// The name of [`GemvCase::read_ceiling`]'s rows.
pub const READ_CEILING: &str = "read ceiling";

impl GemvCase {
    /// The read ceiling ([`GemvMma::gemv_probe`] mode 5): the same bytes streamed by a
    /// plain grid-stride read, nothing computed; no kernel that reads them once in one
    /// launch is faster.
    pub fn read_ceiling() -> GemvCase {
        GemvCase {
            name: READ_CEILING.into(),
            variant: GemvVariant::Probe {
                ring: None,
                mode: 5,
            },
        }
    }

    /// The default tensor-core kernel ([`GemvKernel::Auto`]).
    pub fn auto() -> GemvCase {
        GemvCase {
            name: "Auto".into(),
            variant: GemvVariant::Mma {
                kernel: GemvKernel::Auto,
                ring: None,
                pp_prefetch: 0,
            },
        }
    }
}

/// What [`gemv_bench`] runs.
#[derive(Clone, Debug)]
pub struct GemvBenchOptions {
    /// (format, rows N, columns K) per matrix.
    pub shapes: Vec<(ElementFormat, usize, usize)>,
    /// The cases run on every shape (the first is the all-rows reference).
    pub cases: Vec<GemvCase>,
    /// Also time the same launches over one copy (L2-resident when it fits).
    pub one_copy: bool,
    /// Also time the x preparation alone, per shape.
    pub prep_x: bool,
    /// Also time each tensor-core case with programmatic dependent launch between the
    /// back-to-back GEMVs (as the decode graph chains them): `GemvRow::us_pdl`.
    pub pdl_chain: bool,
}

impl Default for GemvBenchOptions {
    /// `favlo bench kernels --device cuda`: MXFP8 and MXFP4 at 8192×8192 and
    /// 4096×14336, the default (`Auto`) kernel and the read ceiling of its bytes.
    fn default() -> Self {
        let mut shapes = Vec::new();
        for format in [ElementFormat::Fp8E4M3, ElementFormat::Fp4E2M1] {
            shapes.push((format, 8192, 8192));
            shapes.push((format, 4096, 14336));
        }
        GemvBenchOptions {
            shapes,
            cases: vec![GemvCase::auto(), GemvCase::read_ceiling()],
            one_copy: false,
            prep_x: false,
            pdl_chain: true,
        }
    }
}

/// One row of the table.
#[derive(Clone, Debug)]
pub struct GemvRow {
    pub format: ElementFormat,
    pub rows: usize,
    pub cols: usize,
    pub name: String,
    /// The kernel a tensor-core case resolved to (`Auto` → `PingPong`, `Ring`, ...).
    pub kernel: Option<GemvKernel>,
    /// Bytes read per GEMV (data + scales + x).
    pub bytes: f64,
    /// Median µs per GEMV from DRAM.
    pub us: f64,
    pub gbps: f64,
    /// Percent of the run's copy bandwidth.
    pub of_copy: f64,
    /// max |y − ref| / max |ref| over the first 64 rows (f64 CPU reference); NaN for a
    /// timing probe, whose output means nothing.
    pub rel_err: f64,
    /// The same over all rows against the shape's first case.
    pub rel_err_all: f64,
    /// µs per GEMV over one copy (with `one_copy`).
    pub us_one_copy: Option<f64>,
    /// µs per GEMV with PDL between consecutive launches (`pdl_chain`), and the
    /// kernel `Auto` picks then.
    pub us_pdl: Option<f64>,
    pub kernel_pdl: Option<GemvKernel>,
}

impl GemvRow {
    /// The chained GEMV ([`Self::us_pdl`]) in percent of the copy bandwidth.
    pub fn chained_of_copy(&self, copy_gbps: f64) -> Option<f64> {
        self.us_pdl
            .map(|us| 100.0 * self.bytes / (us * 1e-6) / 1e9 / copy_gbps)
    }
}

/// The table and its ceiling.
#[derive(Clone, Debug)]
pub struct GemvBench {
    /// `cuda:N <name> (sm_XY)`.
    pub device: String,
    /// Device-to-device copy of 1 GiB, read + written bytes, GB/s.
    pub copy_gbps: f64,
    pub rows: Vec<GemvRow>,
    /// (K, µs) of the x preparation per shape (with `prep_x`).
    pub prep_x_us: Vec<(usize, f64)>,
    /// (case, shape, reason) of cases the device refused to launch.
    pub skipped: Vec<String>,
}

/// A one-line device description: `cuda:N <name> (sm_XY)`.
pub(crate) fn describe(ctx: &CudaContext) -> String {
    let (major, minor) = ctx.compute_capability();
    format!("cuda:{} {} (sm_{major}{minor})", ctx.ordinal(), ctx.name())
}

/// Runs the GEMV table on `ctx`; `each` sees every row as soon as it is measured.
pub fn gemv_bench(
    ctx: &Arc<CudaContext>,
    opts: &GemvBenchOptions,
    mut each: impl FnMut(&GemvRow),
) -> Result<GemvBench, BenchError> {
    if opts.cases.is_empty() {
        return Err(BenchError::Options("no GEMV case to run".into()));
    }
    let kernels = CudaKernels::load(ctx)?;
    let mut mma = GemvMma::load(ctx)?;
    let copy_gbps = copy_bandwidth_gbps(ctx, 1 << 30, 20)?;
    let mut out = GemvBench {
        device: describe(ctx),
        copy_gbps,
        rows: Vec::new(),
        prep_x_us: Vec::new(),
        skipped: Vec::new(),
    };
    let mut rng = Rng::new(42);
    for &(format, n, k) in &opts.shapes {
        let owner = Owner::mint("cuda-bench-gemv");
        let mut shape = Shape::upload(ctx, &owner, opts, (format, n, k), &mut rng)?;
        mma.prep_x(&shape.x, shape.layout.padded_cols(), &mut shape.prep)?;
        let mut first: Option<Vec<f32>> = None;
        for case in &opts.cases {
            match shape.run_case(ctx, &kernels, &mut mma, case, opts, &mut first)? {
                Ok(mut row) => {
                    row.of_copy = 100.0 * row.gbps / copy_gbps;
                    if opts.pdl_chain
                        && matches!(
                            case.variant,
                            GemvVariant::Mma { .. } | GemvVariant::Probe { mode: 5..=8, .. }
                        )
                    {
                        // The same launches chained with PDL, as the decode step runs
                        // them (checked again: the output must not change).
                        mma.pdl = true;
                        let chained =
                            shape.run_case(ctx, &kernels, &mut mma, case, opts, &mut first);
                        mma.pdl = false;
                        if let Ok(r) = chained? {
                            row.us_pdl = Some(r.us);
                            row.kernel_pdl = r.kernel;
                        }
                    }
                    each(&row);
                    out.rows.push(row);
                }
                Err(reason) => out.skipped.push(format!("{} {n}×{k}: {reason}", case.name)),
            }
        }
        if opts.prep_x {
            out.prep_x_us.push((k, shape.time_prep(ctx, &owner, &mma)?));
        }
        drop(shape);
        ctx.sweep(&owner)?;
    }
    Ok(out)
}

/// One matrix shape's device data and its reference output.
struct Shape {
    layout: MxLayout,
    x_host: Vec<f32>,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    prep: XPrep,
    /// Tiled copies for the tensor-core kernels (≥ 512 MB together).
    tiled: Vec<MxTiled>,
    /// favlo-mx layout copies for the CUDA-core kernel (only when a case needs them).
    plain: Vec<MxDevice>,
    /// f64 reference of the first rows, and its max |value|.
    want: Vec<f64>,
    want_max: f64,
}

impl Shape {
    fn upload(
        ctx: &Arc<CudaContext>,
        owner: &Owner,
        opts: &GemvBenchOptions,
        (format, n, k): (ElementFormat, usize, usize),
        rng: &mut Rng,
    ) -> Result<Shape, BenchError> {
        let (layout, host) = random_mx(format, n, k, (119, 133), rng);
        let copies = (512usize << 20).div_ceil(layout.total_bytes()).max(2);
        let view = MxView::new(layout, &host)?;
        let plain = if opts
            .cases
            .iter()
            .any(|c| matches!(c.variant, GemvVariant::CudaCore(_)))
        {
            (0..copies)
                .map(|_| MxDevice::upload(ctx, owner, view))
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        let tiled_host = tile_mx(view);
        let tiled = (0..copies)
            .map(|_| MxTiled::upload(ctx, owner, &tiled_host))
            .collect::<Result<_, _>>()?;
        let x_host: Vec<f32> = (0..k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let x = ctx.upload(
            owner,
            SpanKind::Scratch,
            &CudaKernels::padded_x(layout, &x_host),
        )?;
        let y = ctx.alloc::<f32>(owner, SpanKind::Scratch, n)?;
        let prep = XPrep::new(ctx, owner, layout.padded_cols())?;

        // The first rows as a matrix of their own: their data rows, then their scales.
        let m = n.min(REF_ROWS);
        let sub = MxLayout {
            format,
            rows: m,
            cols: k,
        };
        let mut sub_bytes = vec![0u8; sub.total_bytes()];
        sub_bytes[..sub.scale_offset()].copy_from_slice(&host[..sub.scale_offset()]);
        sub_bytes[sub.scale_offset()..]
            .copy_from_slice(&host[layout.scale_offset()..][..m * layout.scale_row_bytes()]);
        let want = reference::linear(&x_host, &WeightRef::Mx(MxView::new(sub, &sub_bytes)?), None);
        let want_max = want.iter().fold(0f64, |a, b| a.max(b.abs()));
        Ok(Shape {
            layout,
            x_host,
            x,
            y,
            prep,
            tiled,
            plain,
            want,
            want_max,
        })
    }

    /// Checks and times one case; `Ok(Err(reason))` when the device refuses its shape.
    fn run_case(
        &mut self,
        ctx: &CudaContext,
        kernels: &CudaKernels,
        mma: &mut GemvMma,
        case: &GemvCase,
        opts: &GemvBenchOptions,
        first: &mut Option<Vec<f32>>,
    ) -> Result<Result<GemvRow, String>, BenchError> {
        let layout = self.layout;
        let (kernel, ring, pp_prefetch, probe) = match case.variant {
            GemvVariant::Mma {
                kernel,
                ring,
                pp_prefetch,
            } => (kernel, ring, pp_prefetch, None),
            GemvVariant::Probe { ring, mode } => (GemvKernel::Ring, ring, 0, Some(mode)),
            GemvVariant::CudaCore(_) => (GemvKernel::Auto, None, 0, None),
        };
        mma.kernel = kernel;
        mma.ring_override = ring;
        mma.pp_prefetch = pp_prefetch;
        let mma = &*mma;
        let Shape {
            tiled,
            plain,
            x,
            y,
            prep,
            ..
        } = self;
        let run = |i: usize, y: &mut DeviceBuffer<f32>| match (case.variant, probe) {
            (GemvVariant::CudaCore(decode), _) => match plain.get(i).or(plain.last()) {
                Some(w) => kernels.gemv_mx_with(w, x, y, decode),
                None => Err(crate::cuda::CudaError::Shape {
                    op: "gemv bench",
                    detail: "no favlo-mx copy uploaded".into(),
                }),
            },
            (_, Some(mode)) => mma.gemv_probe(mode, &tiled[i], prep, y),
            _ => mma.gemv(&tiled[i], prep, y, false),
        };
        match run(0, y) {
            Err(crate::cuda::CudaError::Shape { detail, .. }) => return Ok(Err(detail)),
            other => other?,
        }
        let got = ctx.download(y)?;
        let err = got
            .iter()
            .zip(&self.want)
            .fold(0f64, |a, (g, w)| a.max((f64::from(*g) - w).abs()));
        let rel_err = err / self.want_max.max(f64::MIN_POSITIVE);
        let rel_err_all = match first {
            None => {
                *first = Some(got.clone());
                0.0
            }
            Some(b) => {
                let m = b.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
                let d = b
                    .iter()
                    .zip(&got)
                    .fold(0f64, |a, (p, q)| a.max(f64::from((p - q).abs())));
                d / m.max(f64::MIN_POSITIVE)
            }
        };
        let what = format!("{} {}×{}", case.name, layout.rows, layout.cols);
        if probe.is_none() {
            for e in [rel_err, rel_err_all] {
                if e.is_nan() || e > TOLERANCE {
                    return Err(BenchError::Mismatch {
                        what,
                        rel_err: e,
                        tolerance: TOLERANCE,
                    });
                }
            }
        }
        let n = tiled.len();
        let ms = time_ms(ctx, 2, 15, || (0..n).try_for_each(|i| run(i, y)))? / n as f64;
        let us_one_copy = if opts.one_copy {
            Some(1e3 * time_ms(ctx, 2, 15, || (0..n).try_for_each(|_| run(0, y)))? / n as f64)
        } else {
            None
        };
        let bytes = layout.total_bytes() as f64 + (layout.padded_cols() * 4) as f64;
        let gbps = bytes / (ms * 1e-3) / 1e9;
        let (rel_err, rel_err_all) = if probe.is_some() {
            (f64::NAN, f64::NAN)
        } else {
            (rel_err, rel_err_all)
        };
        let resolved = match case.variant {
            GemvVariant::CudaCore(_) | GemvVariant::Probe { .. } => None,
            _ => Some(mma.resolve(
                layout.format,
                layout.rows.div_ceil(32),
                layout.data_row_bytes() / 128,
            )),
        };
        Ok(Ok(GemvRow {
            format: layout.format,
            rows: layout.rows,
            cols: layout.cols,
            name: case.name.clone(),
            kernel: resolved,
            bytes,
            us: ms * 1e3,
            gbps,
            of_copy: 0.0,
            rel_err,
            rel_err_all,
            us_one_copy,
            us_pdl: None,
            kernel_pdl: None,
        }))
    }

    /// µs of the x preparation alone (64 distinct x vectors per repetition).
    fn time_prep(
        &mut self,
        ctx: &CudaContext,
        owner: &Owner,
        mma: &GemvMma,
    ) -> Result<f64, BenchError> {
        let padded = CudaKernels::padded_x(self.layout, &self.x_host);
        let xs: Vec<_> = (0..64)
            .map(|_| ctx.upload(owner, SpanKind::Scratch, &padded))
            .collect::<Result<_, _>>()?;
        let cols = self.layout.padded_cols();
        let prep = &mut self.prep;
        let ms = time_ms(ctx, 2, 15, || {
            xs.iter().try_for_each(|x| mma.prep_x(x, cols, prep))
        })?;
        Ok(1e3 * ms / xs.len() as f64)
    }
}

/// One row of [`chain_bench`]: a chain of dependent N×N GEMVs (each stage's input the
/// RMSNorm preparation of the previous stage's rows), µs per stage.
#[derive(Clone, Debug)]
pub struct ChainRow {
    pub format: ElementFormat,
    pub n: usize,
    pub stages: usize,
    /// Bytes read per stage (data + scales + x).
    pub bytes: f64,
    /// One launch per stage, plain / under programmatic dependent launch.
    pub us_separate: f64,
    pub us_separate_pdl: f64,
    /// All stages in one launch with grid barriers ([`GemvMma::gemv_chain`]).
    pub us_chain: f64,
    /// The x preparation of stage 0, included once per chain in each time above.
    pub us_prep: f64,
    /// max |y_chain − y_separate| (must be 0: the same arithmetic).
    pub max_diff: f32,
}

/// Times a chain of dependent GEMVs over distinct copies (≥ 512 MB) both ways.
pub fn chain_bench(
    ctx: &Arc<CudaContext>,
    format: ElementFormat,
    n: usize,
) -> Result<ChainRow, BenchError> {
    use crate::cuda::ChainIo;
    let owner = Owner::mint("cuda-bench-chain");
    let mut mma = GemvMma::load(ctx)?;
    // The chain runs the ping-pong loop; the separate launches must too (another
    // kernel splits the chunks over the warps otherwise and sums in another order).
    mma.kernel = GemvKernel::PingPong;
    let mut rng = Rng::new(7);
    let (layout, host) = random_mx(format, n, n, (119, 133), &mut rng);
    let stages = (512usize << 20).div_ceil(layout.total_bytes()).max(2);
    let tiled_host = tile_mx(MxView::new(layout, &host)?);
    let ws = (0..stages)
        .map(|_| MxTiled::upload(ctx, &owner, &tiled_host))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&MxTiled> = ws.iter().collect();
    let x_host: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let nw_host: Vec<f32> = (0..n).map(|_| rng.uniform(0.5, 1.5)).collect();
    let x = ctx.upload(&owner, SpanKind::Scratch, &x_host)?;
    let nw = ctx.upload(&owner, SpanKind::Scratch, &nw_host)?;
    let mut p0 = XPrep::new(ctx, &owner, n)?;
    let mut p1 = XPrep::new(ctx, &owner, n)?;
    let mut s0 = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n / 32)?;
    let mut s1 = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n / 32)?;
    let mut y = ctx.alloc::<f32>(&owner, SpanKind::Scratch, n)?;
    let plan = mma.chain_plan(&owner, &refs)?;
    let eps = 1e-6;
    let mut run = |mma: &GemvMma,
                   one: bool,
                   y: &mut DeviceBuffer<f32>|
     -> Result<(), crate::cuda::CudaError> {
        mma.prep_x(&x, n, &mut p0)?;
        let io = ChainIo {
            preps: [&mut p0, &mut p1],
            ss: [&mut s0, &mut s1],
            nw: &nw,
            eps,
            y,
        };
        if one {
            mma.gemv_chain(&plan, io)
        } else {
            mma.chain_separate(&refs, io)
        }
    };
    run(&mma, false, &mut y)?;
    let want = ctx.download(&y)?;
    run(&mma, true, &mut y)?;
    let got = ctx.download(&y)?;
    let max_diff = want
        .iter()
        .zip(&got)
        .fold(0f32, |a, (p, q)| a.max((p - q).abs()));
    if !(max_diff == 0.0) || want.iter().any(|v| !v.is_finite()) {
        return Err(BenchError::Mismatch {
            what: format!("GEMV chain {n}×{n}, one launch vs one per stage"),
            rel_err: f64::from(max_diff),
            tolerance: 0.0,
        });
    }
    let per = |ms: f64| 1e3 * ms / stages as f64;
    let us_separate = per(time_ms(ctx, 2, 15, || run(&mma, false, &mut y))?);
    mma.pdl = true;
    let us_separate_pdl = per(time_ms(ctx, 2, 15, || run(&mma, false, &mut y))?);
    mma.pdl = false;
    let us_chain = per(time_ms(ctx, 2, 15, || run(&mma, true, &mut y))?);
    let us_prep = 1e3 * time_ms(ctx, 2, 15, || mma.prep_x(&x, n, &mut p0))?;
    drop((plan, refs));
    drop((ws, x, nw, p0, p1, s0, s1, y));
    ctx.sweep(&owner)?;
    Ok(ChainRow {
        format,
        n,
        stages,
        bytes: layout.total_bytes() as f64 + (layout.padded_cols() * 4) as f64,
        us_separate,
        us_separate_pdl,
        us_chain,
        us_prep,
        max_diff,
    })
}
