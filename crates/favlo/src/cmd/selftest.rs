//! `favlo selftest cuda [--device cuda:N]`: the GPU kernels a chat runs, checked on
//! this machine's GPU against float64 CPU references (`favlo_runtime::cuda::selftest`),
//! one line per check as it finishes.
//!
//! Key design choice: a failed check is reported, not raised: every check runs, the
//! table says which failed and by how much, and the exit status is 1 when any did (2
//! when the device cannot be used at all), so a script or a bug report gets the whole
//! picture from one run.

use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct SelftestArgs {
    #[command(subcommand)]
    pub target: Target,
}

#[derive(Subcommand, Debug)]
pub enum Target {
    /// The CUDA kernels (MX GEMV, batched GEMV, RMSNorm, decode attention, device
    /// sampling, cuBLASLt) against float64 CPU references, with their bounds.
    Cuda(CudaArgs),
}

#[derive(Args, Debug)]
pub struct CudaArgs {
    /// cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    pub device: String,
}

pub fn run(args: SelftestArgs) -> anyhow::Result<ExitCode> {
    match args.target {
        Target::Cuda(a) => cuda(&a),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_a: &CudaArgs) -> anyhow::Result<ExitCode> {
    Err(
        crate::cmd::common::UsageError("this favlo was built without the cuda feature".into())
            .into(),
    )
}

#[cfg(feature = "cuda")]
fn cuda(a: &CudaArgs) -> anyhow::Result<ExitCode> {
    use favlo_runtime::cuda::CudaContext;
    use favlo_runtime::cuda::selftest::{self, Check};
    use favlo_runtime::device::Device;

    let Device::Cuda(n) = crate::cmd::common::device(&a.device)? else {
        return Err(crate::cmd::common::UsageError(
            "favlo selftest cuda needs a CUDA device: use --device cuda or cuda:N".into(),
        )
        .into());
    };
    let ctx = CudaContext::open(n as usize, None)
        .map_err(|e| crate::cmd::common::UsageError(format!("--device cuda:{n}: {e}")))?;
    println!(
        "favlo selftest cuda: {} ({}) against float64 CPU references",
        ctx.name(),
        ctx.arch()
    );
    let start = std::time::Instant::now();
    let warm = selftest::warm(&ctx)?;
    if !warm.compiled.is_empty() {
        println!(
            "compiled {} kernel module(s) for this GPU in {:.1} s (cached for later runs)",
            warm.compiled.len(),
            start.elapsed().as_secs_f64()
        );
    }
    let line = |c: &Check| {
        println!(
            "  {}  {:<52} {:>9.2e} ≤ {:<7.0e} {}",
            if c.passed() { "pass" } else { "FAIL" },
            c.name,
            c.error,
            c.bound,
            c.measure
        );
    };
    let checks = selftest::run(&ctx, &mut |c| line(c))?;
    let failed = checks.iter().filter(|c| !c.passed()).count();
    println!(
        "{} of {} checks passed in {:.1} s",
        checks.len() - failed,
        checks.len(),
        start.elapsed().as_secs_f64()
    );
    if failed > 0 {
        println!(
            "{failed} failed: this GPU, driver or arch computes something other than the CPU; please report the table above"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
