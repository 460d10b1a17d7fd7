//! Whether this process may run AMX bf16 tile instructions: CPUID, XCR0 and
//! Linux's per-process permission for the tile-data state, checked once.
//!
//! Key design choice: the permission request (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)`) is made once per process, the first time any caller
//! asks, and its answer is cached with the CPU checks in a `OnceLock`; every
//! kernel entry then costs one atomic load. Anything short of "CPU has it, OS
//! enabled it, kernel granted it" is `false`, and callers take the AVX path.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// CPUID.(EAX=7,ECX=0):EDX bits for AMX-BF16 and AMX-TILE.
#[cfg(target_arch = "x86_64")]
const CPUID7_EDX_AMX_BF16: u32 = 1 << 22;
#[cfg(target_arch = "x86_64")]
const CPUID7_EDX_AMX_TILE: u32 = 1 << 24;
/// CPUID.1:ECX bit 27: the OS uses XSAVE (so XGETBV may run).
#[cfg(target_arch = "x86_64")]
const CPUID1_ECX_OSXSAVE: u32 = 1 << 27;
/// XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA).
#[cfg(target_arch = "x86_64")]
const XCR0_TILE: u64 = (1 << 17) | (1 << 18);

fn detected() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(probe)
}

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Whether the AMX path runs: the CPU, the OS and the kernel's permission all
/// allow it, and [`set_amx_disabled`] has not switched it off.
pub fn available() -> bool {
    detected() && !DISABLED.load(Ordering::Relaxed)
}

/// Whether the CPU and OS allow AMX bf16 (ignores [`set_amx_disabled`]).
pub fn detected_amx() -> bool {
    detected()
}

/// Switch the AMX path off (process-wide; benchmarks compare paths with it).
/// Tests should call the explicit [`super::Backend`] instead, which does not
/// race with other tests.
pub fn set_amx_disabled(off: bool) {
    DISABLED.store(off, Ordering::Relaxed);
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn probe() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let (max_leaf, leaf1) = (__cpuid(0).eax, __cpuid(1));
    if max_leaf < 7 || leaf1.ecx & CPUID1_ECX_OSXSAVE == 0 {
        return false;
    }
    let leaf7 = __cpuid_count(7, 0);
    let want = CPUID7_EDX_AMX_BF16 | CPUID7_EDX_AMX_TILE;
    if leaf7.edx & want != want {
        return false;
    }
    // The A-panel conversion uses AVX-512 BF16 (every AMX CPU so far has it).
    let avx512 = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bf16");
    if !avx512 {
        return false;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 is defined.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    let xcr0 = (u64::from(hi) << 32) | u64::from(lo);
    if xcr0 & XCR0_TILE != XCR0_TILE {
        return false;
    }
    request_tile_permission()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn probe() -> bool {
    false
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; true when granted.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_permission() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a plain Linux system call that only changes this process's
    // permitted XSAVE features; the kernel clobbers rcx and r11.
    unsafe {
        std::arch::asm!("syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _, lateout("r11") _,
            options(nostack));
    }
    ret == 0
}
