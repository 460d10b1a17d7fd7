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

/// The errors of a stored KV row (`got_k`, `got_v`) against its f64 references and the
/// bound they must meet: f16 storage rounds (relative 2^-11), so an f16 cache is compared
/// against the f16-rounded reference with 2e-3; an f32 cache with 1e-5.
/// Returns (k error, v error, bound).
pub fn stored_kv_errors(
    f16_cache: bool,
    got_k: &[f32],
    got_v: &[f32],
    want_k: &[f64],
    want_v: &[f32],
) -> (f64, f64, f64) {
    let round = |x: f64| {
        if f16_cache {
            half::f16::from_f64(x).to_f64()
        } else {
            x
        }
    };
    let want_k: Vec<f64> = want_k.iter().map(|x| round(*x)).collect();
    let want_v: Vec<f64> = want_v.iter().map(|x| round(f64::from(*x))).collect();
    let tol = if f16_cache { 2e-3 } else { 1e-5 };
    (
        super::max_abs_scaled(got_k, &want_k),
        super::max_abs_scaled(got_v, &want_v),
        tol,
    )
}
