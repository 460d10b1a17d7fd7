//! Run-time kernel compilation with NVRTC and the on-disk CUBIN cache.
//!
//! Key design choice: kernels ship as `.cu` source inside the binary and are compiled
//! for the exact device arch (`sm_90a` on Hopper) the first time they are needed. The
//! CUBIN is cached under `$FAVLO_HOME/cache/cuda/` (else `~/.cache/favlo/cuda/`) in a
//! file named by an FNV-1a hash of source, arch, options and NVRTC version, so any
//! change to one of those compiles afresh and stale entries are never read.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{Ptx, result, sys};

use super::context::CudaContext;
use super::{CudaError, driver_err};

/// NVRTC options every kernel is compiled with (precise math, like the CPU path).
const OPTIONS: &[&str] = &["--std=c++17", "--fmad=true"];

/// A kernel module as its family compiles it: the cache name and the full source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Module {
    /// Name in the cache file and in compile errors.
    pub name: &'static str,
    /// The CUDA C++ source (helpers prepended).
    pub src: &'static str,
}

/// A compiled kernel module.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    /// The CUBIN image for `arch`.
    pub cubin: Vec<u8>,
    /// True when the image came from the disk cache.
    pub from_cache: bool,
    /// The cache file (written or read); `None` when the cache dir is unusable.
    pub path: Option<PathBuf>,
}

/// A kernel module compiled (or read from the disk cache) and loaded into a context:
/// what every kernel family's `load` starts with.
pub(crate) struct LoadedModule {
    pub(crate) module: Arc<CudaModule>,
    /// True when the CUBIN came from the disk cache.
    pub(crate) from_cache: bool,
}

impl LoadedModule {
    /// [`load_or_compile`] `m` for the context's arch, then load it.
    pub(crate) fn load(ctx: &CudaContext, m: Module) -> Result<Self, CudaError> {
        Self::load_source(ctx, m.name, m.src)
    }

    /// [`LoadedModule::load`] of `m`'s source behind `prelude` (the `#define`s of a
    /// compile-time variant), cached under `name`.
    pub(crate) fn load_variant(
        ctx: &CudaContext,
        m: Module,
        name: &str,
        prelude: &str,
    ) -> Result<Self, CudaError> {
        Self::load_source(ctx, name, &format!("{prelude}{}", m.src))
    }

    /// [`LoadedModule::load`] for a source built at run time (not a shipped [`Module`]).
    pub(crate) fn load_source(ctx: &CudaContext, name: &str, src: &str) -> Result<Self, CudaError> {
        let k = load_or_compile(name, src, &ctx.arch())?;
        let module = ctx
            .raw()
            .load_module(Ptx::from_binary(k.cubin))
            .map_err(driver_err("cuModuleLoadData"))?;
        Ok(LoadedModule {
            module,
            from_cache: k.from_cache,
        })
    }

    /// The kernel `name` of the module.
    pub(crate) fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        self.module
            .load_function(name)
            .map_err(driver_err("cuModuleGetFunction"))
    }
}

/// The cache directory: `$FAVLO_HOME/cache/cuda`, else `$HOME/.cache/favlo/cuda`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("FAVLO_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(h).join("cache").join("cuda"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("favlo").join("cuda"))
}

/// NVRTC's (major, minor) version. The caller must have checked that NVRTC loads.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library is present (checked by the caller).
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Unavailable {
            reason: format!("nvrtcVersion failed: {e:?}"),
        })?;
    Ok((major, minor))
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0xffu8]) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `nvrtcGetCUBINSize` / `nvrtcGetPTXSize`.
type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
/// `nvrtcGetCUBIN` / `nvrtcGetPTX`.
type ImageFn = unsafe fn(sys::nvrtcProgram, *mut std::ffi::c_char) -> sys::nvrtcResult;

/// Compiles `src` to a CUBIN for `arch` (e.g. `sm_90a`) with NVRTC, no cache; for a
/// virtual arch (`compute_86`) the image is PTX text instead, which the driver
/// compiles for the device at load (`CudaContext`'s arch override).
pub fn compile_cubin(name: &str, src: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    let fail = |log: String| CudaError::Compile {
        kernel: name.to_string(),
        arch: arch.to_string(),
        log,
    };
    let c_src = CString::new(src).map_err(|_| fail("source holds a NUL byte".into()))?;
    let c_name = CString::new(name).map_err(|_| fail("name holds a NUL byte".into()))?;
    let prog = result::create_program(&c_src, Some(&c_name)).map_err(|e| fail(format!("{e:?}")))?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture={arch}"));
    // SAFETY: `prog` is a live program created above and destroyed once below.
    let out = unsafe {
        match result::compile_program(prog, &opts) {
            Ok(()) => {
                // A virtual arch gives PTX text (NUL included), which the driver
                // compiles for the device; a real one gives the CUBIN.
                let (size_of, image, what): (SizeFn, ImageFn, &str) =
                    if arch.starts_with("compute_") {
                        (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX, "PTX")
                    } else {
                        (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN, "CUBIN")
                    };
                let mut size = 0usize;
                match size_of(prog, &mut size).result() {
                    Ok(()) => {
                        let mut buf = vec![0u8; size];
                        image(prog, buf.as_mut_ptr().cast())
                            .result()
                            .map(|()| buf)
                            .map_err(|e| fail(format!("nvrtcGet{what}: {e:?}")))
                    }
                    Err(e) => Err(fail(format!("nvrtcGet{what}Size: {e:?}"))),
                }
            }
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> = l
                            .iter()
                            .take_while(|c| **c != 0)
                            .map(|c| *c as u8)
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(fail(format!("{e:?}: {log}")))
            }
        }
    };
    // SAFETY: destroyed exactly once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// The cache file of (`name`, `src`, `arch`) under this NVRTC, if there is a cache dir.
fn cache_path(name: &str, src: &str, arch: &str) -> Result<Option<PathBuf>, CudaError> {
    let (major, minor) = nvrtc_version()?;
    let ver = format!("{major}.{minor}");
    let key = fnv1a(&[
        src.as_bytes(),
        arch.as_bytes(),
        ver.as_bytes(),
        OPTIONS.join(" ").as_bytes(),
    ]);
    let ext = if arch.starts_with("compute_") {
        "ptx"
    } else {
        "cubin"
    };
    Ok(cache_dir().map(|d| d.join(format!("{name}-{arch}-{key:016x}.{ext}"))))
}

/// What [`warm_cache`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmReport {
    /// Modules compiled now, in the order given.
    pub compiled: Vec<&'static str>,
    /// Modules the cache already held.
    pub cached: usize,
}

/// Compiles into the disk cache every module of `modules` it does not hold yet for
/// `arch`, several at once (NVRTC programs are independent; up to the machine's
/// parallelism), so a first run waits for the slowest module instead of the sum of
/// them. Loading afterwards ([`LoadedModule::load`]) reads the cache. Without a
/// usable cache dir nothing is compiled (each load compiles for itself). The first
/// compile error is returned after every started compile has finished. Calls in one
/// process take turns (`favlo serve`'s background warm-up and a model's open), so a
/// module is never compiled twice at once: the later call finds it cached.
pub fn warm_cache(arch: &str, modules: &[Module]) -> Result<WarmReport, CudaError> {
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let mut todo = Vec::new();
    let mut cached = 0;
    for m in modules {
        match cache_path(m.name, m.src, arch)? {
            Some(p) if p.is_file() => cached += 1,
            Some(p) => todo.push((*m, p)),
            None => {
                return Ok(WarmReport {
                    compiled: Vec::new(),
                    cached,
                });
            }
        }
    }
    let width = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .max(1);
    let mut first_err = None;
    for batch in todo.chunks(width) {
        let results: Vec<Result<(), CudaError>> = std::thread::scope(|sc| {
            let handles: Vec<_> = batch
                .iter()
                .map(|(m, p)| {
                    sc.spawn(move || {
                        let cubin = compile_cubin(m.name, m.src, arch)?;
                        store(p, &cubin)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(CudaError::Unavailable {
                            reason: "an NVRTC compile thread panicked".into(),
                        })
                    })
                })
                .collect()
        });
        for r in results {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(WarmReport {
            compiled: todo.iter().map(|(m, _)| m.name).collect(),
            cached,
        }),
    }
}

/// The cached CUBIN for (`src`, `arch`), compiling and storing it on a miss.
pub fn load_or_compile(name: &str, src: &str, arch: &str) -> Result<CompiledKernel, CudaError> {
    let path = cache_path(name, src, arch)?;
    if let Some(p) = &path
        && let Ok(cubin) = std::fs::read(p)
        && !cubin.is_empty()
    {
        return Ok(CompiledKernel {
            cubin,
            from_cache: true,
            path,
        });
    }
    let cubin = compile_cubin(name, src, arch)?;
    if let Some(p) = &path {
        store(p, &cubin)?;
    }
    Ok(CompiledKernel {
        cubin,
        from_cache: false,
        path,
    })
}

/// Writes through a temporary file and a rename so a concurrent reader never sees
/// half an image.
fn store(path: &Path, bytes: &[u8]) -> Result<(), CudaError> {
    let err = |e: std::io::Error| CudaError::Cache {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn hash_separates_parts_and_is_stable() {
        // FNV-1a 64 of "a" followed by the 0xff separator, computed by hand-rolled
        // reference arithmetic in the test below; and part boundaries matter.
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [b'a', 0xff] {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        assert_eq!(fnv1a(&[b"a"]), h);
    }
}
