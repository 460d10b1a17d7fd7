//! One CUDA device: its context and stream, and device buffers accounted in a ledger.
//!
//! Key design choice: every device allocation first takes a ledger span, so the
//! ledger's `room()` is the single answer to "does this fit on the GPU". The ledger's
//! budget is the device's free memory from `cuMemGetInfo` at open time (nothing is
//! ours yet, so free + ours = free), capped by `max_memory`.
//!
//! The ledger is `Ledger::with_free_source(Device::Cuda(ordinal), ..)`: its free
//! figure is `cuMemGetInfo`'s, read whenever the budget is, so budget = device free +
//! this ledger's live + pending, and another process taking memory shrinks `room()`.
//! A device buffer holds a host-less ledger span ([`crate::ledger::SpanGuard`]) of
//! its byte size and kind, so it shows in the ledger as `live` under its owner, and
//! `sweep` (after a stream synchronize, so asynchronous frees have completed) reports
//! any survivor as a leak.

use std::sync::Arc;

use cudarc::driver::{self as drv, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};

use super::{CudaError, driver_err};
use crate::device::Device;
use crate::ledger::{Ledger, LedgerError, Owner, SpanGuard, SpanKind};

/// The oldest GPUs the kernels run on: Ampere (sm_80, e.g. A100; sm_86, RTX 30xx). The
/// tensor-core GEMV's `mma.sync` f16 shapes and `cp.async` need sm_80; FP8 conversions
/// fall back to integer code below sm_89 (`fp8_sw.cuh`).
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);

/// Environment variable that makes the kernels target an older arch than the device's,
/// as PTX the driver compiles for the device: `FAVLO_CUDA_ARCH=sm_86` on a Hopper runs
/// the code paths an RTX 30xx would (no FP8 conversion, no PDL, no wgmma GEMM), so
/// they can be tested on the GPU at hand.
pub const ARCH_ENV: &str = "FAVLO_CUDA_ARCH";

/// The compute capability the kernels target on a device of `device_cc`, and whether
/// that is an [`ARCH_ENV`] override (compiled to PTX) rather than the device's own.
fn target_cc(device_cc: (i32, i32), ordinal: usize) -> Result<((i32, i32), bool), CudaError> {
    choose_target(std::env::var(ARCH_ENV).ok().as_deref(), device_cc, ordinal)
}

/// [`target_cc`] for the variable's value `v`.
fn choose_target(
    v: Option<&str>,
    device_cc: (i32, i32),
    ordinal: usize,
) -> Result<((i32, i32), bool), CudaError> {
    let Some(v) = v.filter(|v| !v.trim().is_empty()) else {
        return Ok((device_cc, false));
    };
    let bad = |why: String| CudaError::Unavailable {
        reason: format!("{ARCH_ENV}={v}: {why}"),
    };
    let cc = parse_cc(v).ok_or_else(|| bad("not an arch; write it as sm_86, 86 or 8.6".into()))?;
    if cc < MIN_COMPUTE_CAPABILITY {
        let (ma, mi) = MIN_COMPUTE_CAPABILITY;
        return Err(bad(format!("the kernels need sm_{ma}{mi} or newer")));
    }
    if cc > device_cc {
        return Err(bad(format!(
            "cuda:{ordinal} is sm_{}{}; only an older arch than the device's can be targeted",
            device_cc.0, device_cc.1
        )));
    }
    Ok((cc, cc != device_cc))
}

/// Shared memory (per multiprocessor, most one block may opt into) of compute
/// capability `cc`, from NVIDIA's tables: what an [`ARCH_ENV`] target caps the
/// device's figures at, so kernels size their shared memory as on that GPU.
fn arch_shared_memory(cc: (i32, i32)) -> (usize, usize) {
    match cc {
        (8, 0) | (8, 7) => (167_936, 166_912),
        (9, _) | (10, _) => (233_472, 232_448),
        _ => (102_400, 101_376),
    }
}

/// `sm_86`, `compute_86`, `86` or `8.6` -> (8, 6).
fn parse_cc(v: &str) -> Option<(i32, i32)> {
    let v = v.trim();
    let v = v
        .strip_prefix("sm_")
        .or_else(|| v.strip_prefix("compute_"))
        .unwrap_or(v);
    let v = v.strip_suffix('a').unwrap_or(v);
    let (ma, mi) = match v.split_once('.') {
        Some((ma, mi)) => (ma.parse().ok()?, mi.parse().ok()?),
        None if v.len() >= 2 && v.bytes().all(|b| b.is_ascii_digit()) => {
            let (ma, mi) = v.split_at(v.len() - 1);
            (ma.parse().ok()?, mi.parse().ok()?)
        }
        None => return None,
    };
    (0..=9).contains(&mi).then_some((ma, mi))
}

/// An open CUDA device.
pub struct CudaContext {
    ordinal: usize,
    name: String,
    /// The compute capability the kernels target: the device's, or an [`ARCH_ENV`]
    /// override (then `ptx`).
    cc: (i32, i32),
    ptx: bool,
    ctx: Arc<drv::CudaContext>,
    stream: Arc<CudaStream>,
    ledger: Arc<Ledger>,
}

impl std::fmt::Debug for CudaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaContext")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("cc", &self.cc)
            .finish()
    }
}

/// Checks that the driver and NVRTC libraries can be loaded, without panicking.
pub(crate) fn check_libraries() -> Result<(), CudaError> {
    // SAFETY: these only try `dlopen` on candidate names.
    if !unsafe { drv::sys::is_culib_present() } {
        return Err(CudaError::Unavailable {
            reason: "libcuda (the NVIDIA driver library) was not found".into(),
        });
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::Unavailable {
            reason: "libnvrtc (CUDA's run-time compiler) was not found; add its directory to LD_LIBRARY_PATH".into(),
        });
    }
    Ok(())
}

/// The NVRTC target of compute capability `(major, minor)`: `sm_90a` on Hopper (its
/// arch-specific features: wgmma, setmaxnreg), else `sm_XY`; `compute_XY` (PTX, which
/// the driver compiles for the device) when `ptx`, for an [`ARCH_ENV`] override.
fn arch_name((ma, mi): (i32, i32), ptx: bool) -> String {
    if ptx {
        format!("compute_{ma}{mi}")
    } else if ma == 9 && mi == 0 {
        "sm_90a".into()
    } else {
        format!("sm_{ma}{mi}")
    }
}

impl CudaContext {
    /// Whether CUDA can be used here: `Ok(device count)` or why not.
    pub fn probe() -> Result<usize, CudaError> {
        check_libraries()?;
        let n = drv::CudaContext::device_count().map_err(|e| CudaError::Unavailable {
            reason: format!("cuDeviceGetCount failed: {e:?}"),
        })?;
        if n <= 0 {
            return Err(CudaError::Unavailable {
                reason: "the driver reports no CUDA device".into(),
            });
        }
        Ok(n as usize)
    }

    /// Opens device `ordinal`; the ledger's budget is its free memory, capped at `max_memory`.
    pub fn open(ordinal: usize, max_memory: Option<u64>) -> Result<Arc<CudaContext>, CudaError> {
        let count = Self::probe()?;
        if ordinal >= count {
            return Err(CudaError::Unavailable {
                reason: format!("cuda:{ordinal} asked for, but only {count} device(s) exist"),
            });
        }
        let ctx = drv::CudaContext::new(ordinal).map_err(|e| CudaError::Unavailable {
            reason: format!("cannot create a context on cuda:{ordinal}: {e:?}"),
        })?;
        // One stream, so the per-buffer event tracking cudarc offers is not needed.
        // SAFETY: called before any buffer exists.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(driver_err("cuDeviceGetName"))?;
        let cc = ctx
            .compute_capability()
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        if cc < MIN_COMPUTE_CAPABILITY {
            let (maj, min) = MIN_COMPUTE_CAPABILITY;
            return Err(CudaError::Unavailable {
                reason: format!(
                    "cuda:{ordinal} ({name}) is sm_{}{}; Favlo's kernels need sm_{maj}{min} or newer (Ampere, Ada, Hopper or later: they use the f16 tensor-core mma and cp.async)",
                    cc.0, cc.1
                ),
            });
        }
        let (cc, ptx) = target_cc(cc, ordinal)?;
        ctx.mem_get_info().map_err(driver_err("cuMemGetInfo"))?;
        // A stream of our own (not the legacy default stream), so decode steps can be
        // captured as CUDA graphs.
        let stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let probe_ctx = Arc::clone(&ctx);
        // A failing cuMemGetInfo reads as "nothing free": a refusal, not a guess.
        let free = Arc::new(move || probe_ctx.mem_get_info().map_or(0, |(f, _)| f as u64));
        let device = Device::Cuda(u32::try_from(ordinal).unwrap_or(u32::MAX));
        let ledger = Ledger::with_free_source(device, free, max_memory);
        // Shown beside the host ledger (`GET /v1/memory`) while the context lives.
        crate::device_ledgers::register(&ledger);
        Ok(Arc::new(CudaContext {
            ordinal,
            name,
            cc,
            ptx,
            ctx,
            stream,
            ledger,
        }))
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// Device name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Compute capability (major, minor) the kernels target: the device's, unless
    /// [`ARCH_ENV`] names an older one. Every arch-dependent choice (PDL, the wgmma
    /// GEMM, the GEMV variants) follows this, not the silicon.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }
    /// The NVRTC target: `sm_90a` on Hopper (arch-specific features), else `sm_XY`;
    /// `compute_XY` (PTX) under an [`ARCH_ENV`] override.
    pub fn arch(&self) -> String {
        arch_name(self.cc, self.ptx)
    }

    /// Shared memory per multiprocessor and the most one block may opt into, from the
    /// driver; under an [`ARCH_ENV`] target no more than that arch's GPUs have.
    pub fn shared_memory_limits(&self) -> Result<(usize, usize), CudaError> {
        use drv::sys::CUdevice_attribute as A;
        let attr = |a: A| {
            self.ctx
                .attribute(a)
                .map(|v| v.max(0) as usize)
                .map_err(driver_err("cuDeviceGetAttribute"))
        };
        let per_sm = attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
        let per_block = attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        if !self.ptx {
            return Ok((per_sm, per_block));
        }
        let (sm, block) = arch_shared_memory(self.cc);
        Ok((per_sm.min(sm), per_block.min(block)))
    }

    /// [`Self::arch`] of device `ordinal`, read from the driver without creating a
    /// context (no device memory, no ledger): what compiling kernels ahead needs.
    pub fn device_arch(ordinal: usize) -> Result<String, CudaError> {
        let count = Self::probe()?;
        if ordinal >= count {
            return Err(CudaError::Unavailable {
                reason: format!("cuda:{ordinal} asked for, but only {count} device(s) exist"),
            });
        }
        let ord = i32::try_from(ordinal).map_err(|_| CudaError::Unavailable {
            reason: format!("cuda:{ordinal}: ordinal out of range"),
        })?;
        let dev = drv::result::device::get(ord).map_err(driver_err("cuDeviceGet"))?;
        use drv::sys::CUdevice_attribute as A;
        // SAFETY: `dev` was just returned by cuDeviceGet (the driver is initialised by
        // `probe`).
        let attr = |a: A| unsafe { drv::result::device::get_attribute(dev, a) };
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        let (cc, ptx) = target_cc((major, minor), ordinal)?;
        Ok(arch_name(cc, ptx))
    }
    /// The ledger accounting this device's memory.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
    /// The stream every launch and copy goes on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub(crate) fn raw(&self) -> &Arc<drv::CudaContext> {
        &self.ctx
    }
    /// The device's current (free, total) bytes from `cuMemGetInfo`.
    pub fn mem_info(&self) -> Result<(u64, u64), CudaError> {
        let (f, t) = self
            .ctx
            .mem_get_info()
            .map_err(driver_err("cuMemGetInfo"))?;
        Ok((f as u64, t as u64))
    }

    /// A zeroed device buffer of `len` elements, if its span fits the ledger.
    pub fn alloc<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        owner: &Owner,
        kind: SpanKind,
        len: usize,
    ) -> Result<DeviceBuffer<T>, CudaError> {
        let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        let span = self.ledger.span(owner, kind, bytes)?;
        let slice = self
            .stream
            .alloc_zeros::<T>(len)
            .map_err(driver_err("cuMemAlloc"))?;
        Ok(DeviceBuffer {
            slice,
            span,
            owner: owner.as_str().to_string(),
        })
    }

    /// A device buffer holding a copy of `data`.
    pub fn upload<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        owner: &Owner,
        kind: SpanKind,
        data: &[T],
    ) -> Result<DeviceBuffer<T>, CudaError> {
        let mut buf = self.alloc::<T>(owner, kind, data.len())?;
        self.stream
            .memcpy_htod(data, &mut buf.slice)
            .map_err(driver_err("cuMemcpyHtoD"))?;
        Ok(buf)
    }

    /// Copies `data` into an existing buffer (`data.len()` ≤ its length).
    pub fn write<T: DeviceRepr>(
        &self,
        buf: &mut DeviceBuffer<T>,
        data: &[T],
    ) -> Result<(), CudaError> {
        if data.len() > buf.len() {
            return Err(CudaError::Shape {
                op: "write",
                detail: format!("{} values into a buffer of {}", data.len(), buf.len()),
            });
        }
        let mut view = buf.slice.slice_mut(0..data.len());
        self.stream
            .memcpy_htod(data, &mut view)
            .map_err(driver_err("cuMemcpyHtoD"))
    }

    /// The buffer's contents, copied to the host (synchronizes the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &DeviceBuffer<T>,
    ) -> Result<Vec<T>, CudaError> {
        self.stream
            .clone_dtoh(&buf.slice)
            .map_err(driver_err("cuMemcpyDtoH"))
    }

    /// Waits for all queued work; surfaces asynchronous kernel faults.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(driver_err("cuStreamSynchronize"))
    }

    /// Confirms that `owner` holds no device buffer any more, then sweeps the ledger.
    pub fn sweep(&self, owner: &Owner) -> Result<u64, CudaError> {
        self.synchronize()?;
        self.ledger.sweep(owner).map_err(|e| match e {
            LedgerError::Leaked {
                owner,
                spans,
                bytes,
            } => CudaError::Leaked {
                owner,
                ordinal: self.ordinal,
                buffers: spans,
                bytes,
            },
            other => CudaError::Ledger(other),
        })
    }
}

/// Device memory of `len` elements of `T`, accounted in the ledger until dropped.
pub struct DeviceBuffer<T> {
    pub(crate) slice: CudaSlice<T>,
    span: SpanGuard,
    owner: String,
}

impl<T> DeviceBuffer<T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.slice.len()
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }
    /// Bytes accounted.
    pub fn bytes(&self) -> u64 {
        self.span.bytes()
    }
    /// The underlying cudarc slice (for launching kernels outside this module).
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }
    /// Mutable access to the underlying slice.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("owner", &self.owner)
            .field("len", &self.slice.len())
            .field("bytes", &self.span.bytes())
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{arch_name, choose_target, parse_cc};

    #[test]
    fn arch_overrides_parse_and_must_be_older_than_the_device() {
        for v in ["sm_86", "compute_86", "86", "8.6", " sm_86 "] {
            assert_eq!(parse_cc(v), Some((8, 6)), "{v}");
        }
        assert_eq!(parse_cc("sm_90a"), Some((9, 0)));
        assert_eq!(parse_cc("sm_120"), Some((12, 0)));
        for v in ["ampere", "sm_", "8.", "8.10", "x86"] {
            assert_eq!(parse_cc(v), None, "{v}");
        }
        let h200 = (9, 0);
        assert_eq!(choose_target(None, h200, 0).ok(), Some((h200, false)));
        assert_eq!(choose_target(Some(""), h200, 0).ok(), Some((h200, false)));
        assert_eq!(
            choose_target(Some("sm_90"), h200, 0).ok(),
            Some((h200, false))
        );
        assert_eq!(
            choose_target(Some("sm_86"), h200, 0).ok(),
            Some(((8, 6), true))
        );
        let newer = choose_target(Some("sm_100"), h200, 1)
            .unwrap_err()
            .to_string();
        assert!(newer.contains("FAVLO_CUDA_ARCH=sm_100") && newer.contains("cuda:1 is sm_90"));
        let old = choose_target(Some("7.5"), h200, 0).unwrap_err().to_string();
        assert!(old.contains("need sm_80"), "{old}");
        let junk = choose_target(Some("ampere"), h200, 0)
            .unwrap_err()
            .to_string();
        assert!(junk.contains("write it as sm_86"), "{junk}");
        assert_eq!(arch_name((9, 0), false), "sm_90a");
        assert_eq!(arch_name((8, 6), false), "sm_86");
        assert_eq!(arch_name((8, 6), true), "compute_86");
        assert_eq!(super::arch_shared_memory((8, 6)), (102_400, 101_376));
        assert_eq!(super::arch_shared_memory((8, 0)).1, 166_912);
        assert_eq!(super::arch_shared_memory((9, 0)).1, 232_448);
    }
}
