//! CUDA kernels against the CPU references (`favlo_runtime::cpu::reference`, f64) on
//! random non-zero inputs. Run: `cargo test -p favlo-runtime --features cuda --test cuda_kernels`.
//!
//! On a machine without CUDA every device test prints a loud SKIPPED line and passes,
//! unless `FAVLO_REQUIRE_CUDA=1` (set it on the GPU machine: then a skip is a failure).
//! The NVRTC compile test runs wherever libnvrtc loads, GPU or not.
//! Tolerances (stated per test): GEMV max|y−ref|/max|ref| ≤ 1e-5 (f32 accumulation over
//! K ≤ 4096); norms/softmax/activations/RoPE max abs error ≤ 1e-5·(1+|ref|).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{max_abs_scaled, max_rel};

use std::sync::{Arc, Mutex, MutexGuard};

use favlo_mx::{ElementFormat, MxView};
use favlo_runtime::cpu::{RopeLayout, WeightRef, reference};
use favlo_runtime::cuda::{
    CudaContext, CudaError, CudaKernels, GemvDecode, MxDevice, compile_cubin, rope_tables,
};
use favlo_runtime::ledger::{Owner, SpanKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Held by every device test of this binary for its whole run: the ledger test reads
/// the process's free device memory before and after its own allocations, which another
/// test allocating at the same time would move (cargo runs tests on parallel threads).
static DEVICE: Mutex<()> = Mutex::new(());

fn setup() -> Option<(Arc<CudaContext>, CudaKernels, MutexGuard<'static, ()>)> {
    let serial = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    match CudaContext::open(0, None) {
        Ok(ctx) => {
            let k = CudaKernels::load(&ctx).expect("kernels load");
            Some((ctx, k, serial))
        }
        Err(CudaError::Unavailable { reason }) => {
            if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("FAVLO_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            eprintln!(
                "\n**** SKIPPED: CUDA unavailable ({reason}); the CUDA kernel test did not run ****\n"
            );
            None
        }
        Err(e) => panic!("CUDA present but failed to open: {e}"),
    }
}

fn rand_vec(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random_range(-1.0f32..1.0) + 0.01) * scale)
        .collect()
}

#[test]
fn kernels_compile_with_nvrtc_for_sm90a() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("\n**** SKIPPED: libnvrtc not found; NVRTC compile check did not run ****\n");
        return;
    }
    for (name, src) in [
        ("gemv_mx", include_str!("../kernels/gemv_mx.cu")),
        ("ops", include_str!("../kernels/ops.cu")),
    ] {
        let cubin = compile_cubin(name, src, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
        // An ELF image.
        assert_eq!(&cubin[..4], b"\x7fELF", "{name}");
    }
}

fn check_gemv(
    ctx: &Arc<CudaContext>,
    k: &CudaKernels,
    format: ElementFormat,
    rows: usize,
    cols: usize,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    // Row magnitudes spread over 2^-6..2^6 so the scales differ per block and row.
    let (layout, packed) = common::packed_rows(&mut rng, format, rows, cols);
    let view = MxView::new(layout, &packed).unwrap();
    let x = rand_vec(&mut rng, cols, 2.0);
    let want = reference::linear(&x, &WeightRef::Mx(view), None);

    let owner = Owner::mint("cuda-test-gemv");
    let wd = MxDevice::upload(ctx, &owner, view).unwrap();
    let xd = ctx
        .upload(
            &owner,
            SpanKind::Scratch,
            &CudaKernels::padded_x(layout, &x),
        )
        .unwrap();
    for decode in [GemvDecode::F16x2, GemvDecode::F32Bits] {
        let mut yd = ctx
            .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; rows])
            .unwrap();
        k.gemv_mx_with(&wd, &xd, &mut yd, decode).unwrap();
        let got = ctx.download(&yd).unwrap();
        let e = max_rel(&got, &want);
        eprintln!("gemv {format:?} {decode:?} {rows}x{cols}: max rel err {e:.3e}");
        assert!(
            e <= 1e-5,
            "gemv {format:?} {decode:?} {rows}x{cols}: {e:.3e}"
        );
    }
    drop((wd, xd));
    ctx.sweep(&owner).unwrap();
}

#[test]
fn gemv_mxfp8_matches_reference() {
    let Some((ctx, k, _serial)) = setup() else {
        return;
    };
    check_gemv(&ctx, &k, ElementFormat::Fp8E4M3, 67, 1000, 1);
    check_gemv(&ctx, &k, ElementFormat::Fp8E4M3, 256, 4096, 2);
    check_gemv(&ctx, &k, ElementFormat::Fp8E4M3, 5, 96, 3);
}

#[test]
fn gemv_mxfp4_matches_reference() {
    let Some((ctx, k, _serial)) = setup() else {
        return;
    };
    check_gemv(&ctx, &k, ElementFormat::Fp4E2M1, 67, 1000, 4);
    check_gemv(&ctx, &k, ElementFormat::Fp4E2M1, 256, 4096, 5);
    check_gemv(&ctx, &k, ElementFormat::Fp4E2M1, 5, 96, 6);
}

#[test]
fn rms_norm_softmax_match_reference() {
    let Some((ctx, k, _serial)) = setup() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(7);
    let owner = Owner::mint("cuda-test-ops");
    let (rows, dim) = (7, 4096);
    let x = rand_vec(&mut rng, rows * dim, 3.0);
    let w = rand_vec(&mut rng, dim, 1.5);
    let xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
    let wd = ctx.upload(&owner, SpanKind::Scratch, &w).unwrap();
    let mut od = ctx
        .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; rows * dim])
        .unwrap();
    k.rms_norm(&xd, &wd, 1e-6, &mut od).unwrap();
    let e = max_abs_scaled(
        &ctx.download(&od).unwrap(),
        &reference::rms_norm(&x, &w, 1e-6),
    );
    eprintln!("rms_norm: {e:.3e}");
    assert!(e <= 1e-5, "rms_norm {e:.3e}");

    let (rows, dim) = (5, 3001);
    let s = rand_vec(&mut rng, rows * dim, 10.0);
    let mut sd = ctx.upload(&owner, SpanKind::Scratch, &s).unwrap();
    k.softmax(&mut sd, dim).unwrap();
    let e = max_abs_scaled(&ctx.download(&sd).unwrap(), &reference::softmax(&s, dim));
    eprintln!("softmax: {e:.3e}");
    assert!(e <= 1e-5, "softmax {e:.3e}");
    drop((xd, wd, od, sd));
    ctx.sweep(&owner).unwrap();
}

#[test]
fn silu_swiglu_match_reference() {
    let Some((ctx, k, _serial)) = setup() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(8);
    let owner = Owner::mint("cuda-test-act");
    let n = 100_003;
    let g = rand_vec(&mut rng, n, 12.0);
    let u = rand_vec(&mut rng, n, 2.0);
    let mut gd = ctx.upload(&owner, SpanKind::Scratch, &g).unwrap();
    let ud = ctx.upload(&owner, SpanKind::Scratch, &u).unwrap();
    let mut od = ctx
        .upload(&owner, SpanKind::Scratch, &vec![f32::NAN; n])
        .unwrap();
    k.swiglu(&gd, &ud, &mut od).unwrap();
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(a, b)| reference::silu(*a as f64) * *b as f64)
        .collect();
    let e = max_abs_scaled(&ctx.download(&od).unwrap(), &want);
    eprintln!("swiglu: {e:.3e}");
    assert!(e <= 1e-5, "swiglu {e:.3e}");
    k.silu(&mut gd).unwrap();
    let want: Vec<f64> = g.iter().map(|a| reference::silu(*a as f64)).collect();
    let e = max_abs_scaled(&ctx.download(&gd).unwrap(), &want);
    eprintln!("silu: {e:.3e}");
    assert!(e <= 1e-5, "silu {e:.3e}");
    drop((gd, ud, od));
    ctx.sweep(&owner).unwrap();
}

#[test]
fn rope_neox_matches_reference() {
    let Some((ctx, k, _serial)) = setup() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(9);
    let owner = Owner::mint("cuda-test-rope");
    for (t, heads, hd, rot) in [(5, 4, 128, 128), (3, 8, 64, 32)] {
        let x = rand_vec(&mut rng, t * heads * hd, 2.0);
        let pos: Vec<usize> = (0..t).map(|_| rng.random_range(0..30_000)).collect();
        let (c, s) = rope_tables(&pos, hd, rot, 1_000_000.0);
        let mut xd = ctx.upload(&owner, SpanKind::Scratch, &x).unwrap();
        let cd = ctx.upload(&owner, SpanKind::Scratch, &c).unwrap();
        let sd = ctx.upload(&owner, SpanKind::Scratch, &s).unwrap();
        k.rope_neox(&mut xd, &cd, &sd, heads, hd, rot).unwrap();
        let want = reference::rope(&x, &pos, heads, hd, rot, 1_000_000.0, RopeLayout::NeoX);
        let e = max_abs_scaled(&ctx.download(&xd).unwrap(), &want);
        eprintln!("rope_neox t{t} h{heads} hd{hd} rot{rot}: {e:.3e}");
        assert!(e <= 1e-5, "rope {e:.3e}");
    }
    ctx.sweep(&owner).unwrap();
}

#[test]
fn device_memory_goes_through_the_ledger() {
    let Some((ctx, _k, _serial)) = setup() else {
        return;
    };
    let (free, total) = ctx.mem_info().unwrap();
    let budget = ctx.ledger().budget();
    assert!(
        budget > 0 && budget <= total,
        "budget {budget} total {total}"
    );
    assert!(free <= total);
    let owner = Owner::mint("cuda-test-ledger");
    assert_eq!(ctx.ledger().device().to_string(), "cuda:0");
    let before = ctx.ledger().room();
    let live0 = ctx.ledger().live();
    let a = ctx
        .alloc::<f32>(&owner, SpanKind::Resident, 1 << 20)
        .unwrap();
    // The buffer is a live span of its kind (not a pending reservation); room follows
    // cuMemGetInfo, which drops by at least the buffer (allocation granularity).
    assert_eq!(ctx.ledger().live(), live0 + (4 << 20));
    assert_eq!(ctx.ledger().pending(), 0);
    let snap = ctx.ledger().snapshot();
    let mine = snap
        .owners
        .iter()
        .find(|o| o.owner == owner.to_string())
        .unwrap();
    assert_eq!(mine.kinds[&SpanKind::Resident], 4 << 20);
    assert!(ctx.ledger().room() <= before - (4 << 20));
    // A live buffer at sweep time is a leak.
    match ctx.sweep(&owner) {
        Err(CudaError::Leaked {
            buffers: 1, bytes, ..
        }) => assert_eq!(bytes, 4 << 20),
        other => panic!("expected a leak report, got {other:?}"),
    }
    drop(a);
    assert_eq!(ctx.sweep(&owner).unwrap(), 0);
    assert_eq!(ctx.ledger().live(), live0);
    // After the synchronize in sweep the pool has returned the memory (release
    // threshold 0), so room is back within the allocation granularity (2 MiB).
    let after = ctx.ledger().room();
    assert!(after + (2 << 20) >= before, "room {before} -> {after}");
    // More than the budget is refused by the ledger, before the driver is asked.
    let big = ctx.alloc::<u8>(&owner, SpanKind::Scratch, budget as usize + 1);
    assert!(matches!(big, Err(CudaError::Ledger(_))), "{big:?}");
}
