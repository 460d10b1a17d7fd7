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
