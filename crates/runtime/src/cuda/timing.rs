//! Timing on the device with CUDA events, and the device-to-device copy ceiling.
//!
//! Key design choice: the copy bandwidth is measured in the same process and run as
//! the kernels it is compared with, counting bytes read plus bytes written, median of
//! the repetitions, after a warm-up.

use cudarc::driver::sys::CUevent_flags;

use super::context::CudaContext;
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

/// Median milliseconds of one call of `f` over `reps` timed calls (after `warmup`).
pub fn time_ms(
    ctx: &CudaContext,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    for _ in 0..warmup {
        f()?;
    }
    ctx.synchronize()?;
    let raw = ctx.raw();
    let start = raw
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver_err("cuEventCreate"))?;
    let end = raw
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver_err("cuEventCreate"))?;
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        start
            .record(ctx.stream())
            .map_err(driver_err("cuEventRecord"))?;
        f()?;
        end.record(ctx.stream())
            .map_err(driver_err("cuEventRecord"))?;
        end.synchronize()
            .map_err(driver_err("cuEventSynchronize"))?;
        times.push(
            start
                .elapsed_ms(&end)
                .map_err(driver_err("cuEventElapsedTime"))? as f64,
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Device-to-device copy bandwidth in GB/s (10^9 bytes/s, read + written) over a
/// buffer of `bytes`.
pub fn copy_bandwidth_gbps(ctx: &CudaContext, bytes: usize, reps: usize) -> Result<f64, CudaError> {
    let owner = Owner::mint("cuda-copy-bench");
    let src = ctx.alloc::<u8>(&owner, SpanKind::Scratch, bytes)?;
    let mut dst = ctx.alloc::<u8>(&owner, SpanKind::Scratch, bytes)?;
    let s = ctx.stream().clone();
    let ms = time_ms(ctx, 3, reps, || {
        s.memcpy_dtod(&src.slice, &mut dst.slice)
            .map_err(driver_err("cuMemcpyDtoD"))
    })?;
    drop((src, dst));
    ctx.sweep(&owner)?;
    Ok(2.0 * bytes as f64 / (ms * 1e-3) / 1e9)
}
