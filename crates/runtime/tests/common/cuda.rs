//! The CUDA tests' device: opened once per test, or a loud skip where CUDA is
//! unavailable (a failure instead when `FAVLO_REQUIRE_CUDA=1`).

use std::sync::Arc;

use favlo_runtime::cuda::{CudaContext, CudaError};

/// Device 0, or `None` after printing why `what` did not run.
pub fn open_or_skip(what: &str) -> Option<Arc<CudaContext>> {
    match CudaContext::open(0, None) {
        Ok(ctx) => Some(ctx),
        Err(CudaError::Unavailable { reason }) => {
            if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("FAVLO_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            eprintln!("\n**** SKIPPED: CUDA unavailable ({reason}); {what} did not run ****\n");
            None
        }
        Err(e) => panic!("CUDA present but failed to open: {e}"),
    }
}

/// Whether programmatic dependent launch may be used: the kernels wait for the kernel
/// before them (`griddepcontrol.wait`) only when built for sm_90 or newer, so under an
/// older target (`FAVLO_CUDA_ARCH=sm_86` on a Hopper) a PDL launch could read early.
#[allow(dead_code)]
pub fn pdl_ok(ctx: &CudaContext) -> bool {
    ctx.compute_capability().0 >= 9
}
