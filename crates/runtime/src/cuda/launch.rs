//! Kernel launches with programmatic dependent launch (PDL, `cuLaunchKernelEx`).
//!
//! Key design choice: a kernel launched here may be scheduled while the previous kernel
//! in the stream is still running (once all of that kernel's blocks have executed
//! `griddepcontrol.launch_dependents` or exited); every kernel launched this way calls
//! `griddepcontrol.wait` (`pdl_wait` in prep32.cuh) before it reads memory an earlier
//! kernel wrote, so results are the same as with plain launches. Used by the decode
//! step's kernels when their `pdl` flag is set; captured CUDA graphs keep the
//! programmatic edges.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig, sys};

/// A kernel parameter's address, as `cuLaunchKernelEx` takes it.
pub(crate) fn arg_ptr<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed.
///
/// # Safety
/// `args` must point at the kernel's parameters, in order, with matching types, and
/// stay valid for the call; the launch must not read or write out of bounds; the kernel
/// must wait (`griddepcontrol.wait`) before reading what earlier kernels wrote.
pub(crate) unsafe fn launch_ex(
    s: &Arc<CudaStream>,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract.
    unsafe { launch_raw(s, f, cfg, args, true) }
}

/// `cuLaunchKernelEx` from raw parameter addresses, with programmatic stream
/// serialization allowed when `pdl` (else an ordinary launch).
///
/// # Safety
/// As for [`launch_ex`]; with `pdl` false the kernel may read at once.
pub(crate) unsafe fn launch_raw(
    s: &Arc<CudaStream>,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
    pdl: bool,
) -> Result<(), DriverError> {
    // SAFETY: a zeroed attribute value is a valid union bit pattern; the field written
    // is the one the attribute id selects.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let lc = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: s.cu_stream(),
        attrs: &mut attr,
        numAttrs: u32::from(pdl),
    };
    // SAFETY: the caller's contract.
    unsafe {
        sys::cuLaunchKernelEx(
            &lc,
            f.cu_function(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
}
