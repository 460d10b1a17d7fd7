//! GFLOP/s of `cpu::amx::gemm` (bf16, bf16x3) beside the AVX-512 `sgemm_nn` on MiniLM's
//! linear shapes (k = 384 / 1536; n = 1152 / 384 / 1536 / 384), 1 and 2 threads.
//!
//! Run: `cargo run --release -p favlo-runtime --example amx_bench [m ...]` (default m: 10 320 1280;
//! `AMX_BENCH_THREADS=1,2` picks the thread counts).

use std::time::Instant;

use favlo_runtime::cpu::amx::{self, BLayout, GemmOpts, PackedB, Precision};
use favlo_runtime::cpu::sgemm_nn_par;

/// Seconds of CPU time this process has used (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`):
/// on the shared build machine, CPU time is far less disturbed by other load than wall time.
fn cpu_seconds() -> f64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let mut ts = [0i64; 2];
        // SAFETY: clock_gettime(2) writes one timespec into `ts`; rcx/r11 are clobbered.
        unsafe {
            std::arch::asm!("syscall", inlateout("rax") 228i64 => _, in("rdi") 2i64,
                in("rsi") ts.as_mut_ptr(), lateout("rcx") _, lateout("r11") _, options(nostack));
        }
        ts[0] as f64 + ts[1] as f64 * 1e-9
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        0.0
    }
}

/// Best GFLOP/s over 5 rounds, by wall time (`cpu`: by process CPU time divided by threads).
fn time<F: FnMut()>(flop: f64, threads: usize, mut f: F) -> (f64, f64) {
    f();
    let (mut best, mut best_cpu) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let reps = 3;
        let (t, c) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        best_cpu = best_cpu.min((cpu_seconds() - c) / reps as f64 / threads as f64);
    }
    (flop / best / 1e9, flop / best_cpu / 1e9)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ms: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ms = if ms.is_empty() {
        vec![10, 320, 1280]
    } else {
        ms
    };
    println!("AMX available: {}", amx::available());
    let shapes = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];
    let threads_list: Vec<usize> = match std::env::var("AMX_BENCH_THREADS") {
        Ok(t) => t.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![1, 2],
    };
    for threads in threads_list {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        for &m in &ms {
            for &(n, k) in &shapes {
                let a: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 7919) % 1000) as f32 / 1e3 - 0.5)
                    .collect();
                let w: Vec<f32> = (0..n * k)
                    .map(|i| ((i * 104729) % 997) as f32 / 1e3 - 0.5)
                    .collect();
                let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
                let mut c = vec![0f32; m * n];
                let flop = 2.0 * (m * n * k) as f64;
                let sg = pool.install(|| {
                    time(flop, threads, || {
                        sgemm_nn_par(m, n, k, &a, k, &wt, n, &mut c, n)
                    })
                });
                let mut line = format!(
                    "t={threads} m={m:5} n={n:5} k={k:5}: sgemm {:6.1} ({:6.1})",
                    sg.0, sg.1
                );
                for p in [Precision::Bf16, Precision::Bf16x3] {
                    let packed = amx::pack_b(&w, BLayout::Nk, n, k, p);
                    let b = PackedB::new(&packed, n, k, p).ok_or("packed B of the wrong length")?;
                    let g = pool.install(|| {
                        time(flop, threads, || {
                            amx::gemm(m, &a, k, &b, &mut c, n, &GemmOpts::default())
                        })
                    });
                    line += &format!("  {p:?} {:6.1} ({:6.1})", g.0, g.1);
                }
                println!("{line} GFLOP/s (per CPU-second per thread)");
            }
        }
    }
    Ok(())
}
