//! GEMMs through cuBLASLt: `Y[m, n] = X[m, k] · W[n, k]ᵀ` (or `Y += …`), all row-major:
//! bf16 operands with f32 accumulation and f32 or bf16 output ([`BlasLt::gemm_bf16`]),
//! and exact f32 ([`BlasLt::gemm_f32`]: f32 operands and output, `CUBLAS_COMPUTE_32F`,
//! which never takes the TF32 tensor-core path; that is `CUBLAS_COMPUTE_32F_FAST_TF32`).
//!
//! Key design choice: like the driver and NVRTC, `libcublasLt` is loaded at run time
//! (cudarc `cublaslt`, `dynamic-loading`); [`BlasLt::new`] checks that it can be
//! `dlopen`ed before any call into it and otherwise returns
//! [`CudaError::Unavailable`]. cudarc's safe wrapper is not used because it allocates
//! its workspace outside the ledger (and unwraps); here the workspace is a ledger span
//! like every other device buffer, and only cudarc's thin `result` layer is called.
//!
//! Row-major `Y = X·Wᵀ` is the column-major product `Yᵀ[n, m] = W · Xᵀ`: W's storage
//! read column-major is `[k, n]` (transposed, `op(A) = T`), X's is `[k, m]` (`op(B) = N`),
//! and Y's storage read column-major is `[n, m]` with leading dimension n. This "TN"
//! form is cuBLASLt's best-supported bf16 layout. bf16 values travel as their `u16` bit
//! patterns (`half::bf16::to_bits`), so cudarc's `f16` feature is not needed.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::context::{CudaContext, DeviceBuffer};
use super::{CudaError, driver_err};
use crate::ledger::{Owner, SpanKind};

/// Workspace bytes: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB on older chips).
const WORKSPACE_HOPPER: usize = 32 << 20;
const WORKSPACE_OTHER: usize = 4 << 20;
/// `cublasOperation_t::CUBLAS_OP_T` (an `int`-sized enum; cudarc's cublaslt bindings
/// do not carry the type).
const OP_T: i32 = 1;
const OP_N: i32 = 0;

/// Element types the GEMM can write: `f32`, or bf16 as its `u16` bit pattern.
pub trait BlasOut: sealed::Sealed + cudarc::driver::DeviceRepr {
    /// The cuBLASLt data type of `Y`.
    const DTYPE: sys::cudaDataType;
    /// A name for error messages.
    const NAME: &'static str;
}
impl BlasOut for f32 {
    const DTYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_32F;
    const NAME: &'static str = "f32";
}
impl BlasOut for u16 {
    const DTYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_16BF;
    const NAME: &'static str = "bf16";
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// (m, n, k, operand type name, output type name, accumulate).
type AlgoKey = (usize, usize, usize, &'static str, &'static str, bool);

/// A cuBLASLt handle bound to a context's stream, with a workspace in its ledger.
pub struct BlasLt {
    handle: sys::cublasLtHandle_t,
    stream: Arc<CudaStream>,
    workspace: DeviceBuffer<u8>,
    /// The heuristic's algorithm per (m, n, k, operand type, output type, accumulate).
    algos: Mutex<HashMap<AlgoKey, sys::cublasLtMatmulAlgo_t>>,
}

// SAFETY: cuBLASLt handles may be used from several host threads (NVIDIA's cuBLAS
// documentation: the library is thread safe); the algorithm cache is behind a mutex and
// the stream and workspace are cudarc/ledger objects that are themselves Send + Sync.
unsafe impl Send for BlasLt {}
// SAFETY: as above.
unsafe impl Sync for BlasLt {}

impl std::fmt::Debug for BlasLt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlasLt")
            .field("workspace", &self.workspace)
            .finish()
    }
}

fn blas_err(op: &'static str) -> impl Fn(lt::CublasError) -> CudaError {
    move |e| CudaError::Driver {
        op,
        message: format!("{e:?}"),
    }
}

fn shape_of(op: &'static str, detail: String) -> CudaError {
    CudaError::Shape { op, detail }
}

/// The operands of one GEMM call: device addresses (kept alive by the caller's guards),
/// their type and the buffer lengths for the size checks.
struct Operands {
    op: &'static str,
    dtype: sys::cudaDataType,
    name: &'static str,
    x: cudarc::driver::sys::CUdeviceptr,
    w: cudarc::driver::sys::CUdeviceptr,
    lens: (usize, usize),
}

/// A matrix layout that is destroyed when dropped.
struct Layout(sys::cublasLtMatrixLayout_t);
impl Layout {
    fn new(dtype: sys::cudaDataType, rows: usize, cols: usize) -> Result<Layout, CudaError> {
        let ld = i64::try_from(rows).map_err(|_| {
            shape_of(
                "cublasLtMatrixLayoutCreate",
                format!("{rows} rows exceed i64"),
            )
        })?;
        lt::create_matrix_layout(dtype, rows as u64, cols as u64, ld)
            .map(Layout)
            .map_err(blas_err("cublasLtMatrixLayoutCreate"))
    }
}
impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created by `Layout::new`, destroyed once.
        let _ = unsafe { lt::destroy_matrix_layout(self.0) };
    }
}

/// A matmul descriptor (f32 compute and scale, W transposed) destroyed when dropped.
struct Desc(sys::cublasLtMatmulDesc_t);
impl Desc {
    fn new() -> Result<Desc, CudaError> {
        let d = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map(Desc)
        .map_err(blas_err("cublasLtMatmulDescCreate"))?;
        for (attr, op) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                OP_T,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                OP_N,
            ),
        ] {
            // SAFETY: `d.0` is live; the attribute is an int read from `op`.
            unsafe {
                lt::set_matmul_desc_attribute(
                    d.0,
                    attr,
                    (&op as *const i32).cast::<c_void>(),
                    std::mem::size_of::<i32>(),
                )
            }
            .map_err(blas_err("cublasLtMatmulDescSetAttribute"))?;
        }
        Ok(d)
    }
}
impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by `Desc::new`, destroyed once.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}

/// A heuristic preference capped at the workspace size, destroyed when dropped.
struct Pref(sys::cublasLtMatmulPreference_t);
impl Pref {
    /// `narrow_out`: the output type is narrower than f32 (bf16), so split-K partial
    /// sums may only be reduced in the f32 compute type (in the workspace), never in the
    /// output buffer or type: a bf16 reduction of partial sums loses ~2^-9 of each
    /// partial, far more than the final rounding when they cancel (measured: 1e-3
    /// absolute on a 3e-3 result with the 4 MB workspace of non-Hopper GPUs).
    fn new(workspace: usize, narrow_out: bool) -> Result<Pref, CudaError> {
        let p = lt::create_matmul_pref()
            .map(Pref)
            .map_err(blas_err("cublasLtMatmulPreferenceCreate"))?;
        use sys::cublasLtMatmulPreferenceAttributes_t as A;
        p.set(
            A::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            workspace as u64,
        )?;
        if narrow_out {
            let mask =
                sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32;
            p.set(A::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, mask)?;
        }
        Ok(p)
    }

    /// Sets attribute `a` to `v` (the type the attribute takes: u64 or u32 here).
    fn set<T: Copy>(
        &self,
        a: sys::cublasLtMatmulPreferenceAttributes_t,
        v: T,
    ) -> Result<(), CudaError> {
        // SAFETY: `self.0` is live; cuBLASLt reads `size_of::<T>()` bytes from `v`, the
        // attribute's own size for the attributes set here.
        unsafe {
            lt::set_matmul_pref_attribute(
                self.0,
                a,
                (&v as *const T).cast::<c_void>(),
                std::mem::size_of::<T>(),
            )
        }
        .map_err(blas_err("cublasLtMatmulPreferenceSetAttribute"))
    }
}
impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created by `Pref::new`, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

impl BlasLt {
    /// Whether `libcublasLt` can be loaded here (no device needed): `Unavailable`
    /// with the reason otherwise. For checks before anything is opened.
    pub fn available() -> Result<(), CudaError> {
        // SAFETY: only tries `dlopen` on candidate names.
        if unsafe { sys::is_culib_present() } {
            Ok(())
        } else {
            Err(CudaError::Unavailable {
                reason: "libcublasLt (cuBLASLt) was not found; add its directory (e.g. /usr/local/cuda/lib64) to LD_LIBRARY_PATH".into(),
            })
        }
    }

    /// Loads cuBLASLt, creates a handle and allocates the workspace under `owner`
    /// (scratch). `Unavailable` when `libcublasLt` cannot be loaded.
    pub fn new(ctx: &CudaContext, owner: &Owner) -> Result<BlasLt, CudaError> {
        Self::available()?;
        let bytes = if ctx.compute_capability().0 >= 9 {
            WORKSPACE_HOPPER
        } else {
            WORKSPACE_OTHER
        };
        let workspace = ctx.alloc::<u8>(owner, SpanKind::Scratch, bytes)?;
        ctx.raw()
            .bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        let handle = lt::create_handle().map_err(|e| CudaError::Unavailable {
            reason: format!("cublasLtCreate failed: {e:?}"),
        })?;
        Ok(BlasLt {
            handle,
            stream: Arc::clone(ctx.stream()),
            workspace,
            algos: Mutex::new(HashMap::new()),
        })
    }

    /// Workspace bytes held in the ledger.
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.bytes()
    }

    /// `y[m, n] = x[m, k] · w[n, k]ᵀ`, or `y += …` when `accumulate`; x and w are bf16
    /// bit patterns, row-major, y is f32 or bf16 (`u16` bits). Buffers may be longer than
    /// the matrices. Queued on the context's stream (asynchronous).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_bf16<Y: BlasOut>(
        &mut self,
        x: &DeviceBuffer<u16>,
        w: &DeviceBuffer<u16>,
        y: &mut DeviceBuffer<Y>,
        m: usize,
        n: usize,
        k: usize,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        self.gemm_of("gemm_bf16", x, w, y, (m, n, k), accumulate)
    }

    /// Exact f32 `y[m, n] = x[m, k] · w[n, k]ᵀ`, or `y += …` when `accumulate`: f32
    /// operands, f32 output, `CUBLAS_COMPUTE_32F` (IEEE f32 multiply-adds, no TF32).
    /// Row-major; buffers may be longer than the matrices. Queued on the context's
    /// stream (asynchronous).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f32(
        &mut self,
        x: &DeviceBuffer<f32>,
        w: &DeviceBuffer<f32>,
        y: &mut DeviceBuffer<f32>,
        m: usize,
        n: usize,
        k: usize,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        self.gemm_of("gemm_f32", x, w, y, (m, n, k), accumulate)
    }

    /// The public GEMMs' common front: operands of type `X` (bf16 bits or f32), their
    /// device pointers held for the call, then [`Self::matmul`].
    fn gemm_of<X: BlasOut, Y: BlasOut>(
        &mut self,
        op: &'static str,
        x: &DeviceBuffer<X>,
        w: &DeviceBuffer<X>,
        y: &mut DeviceBuffer<Y>,
        (m, n, k): (usize, usize, usize),
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let s = Arc::clone(&self.stream);
        let (wp, _g0) = w.slice().device_ptr(&s);
        let (xp, _g1) = x.slice().device_ptr(&s);
        let operands = Operands {
            op,
            dtype: X::DTYPE,
            name: X::NAME,
            x: xp,
            w: wp,
            lens: (x.len(), w.len()),
        };
        self.matmul(operands, y, m, n, k, accumulate)
    }

    /// The shared body of the GEMMs: checks the sizes, picks the algorithm, queues it.
    fn matmul<Y: BlasOut>(
        &mut self,
        o: Operands,
        y: &mut DeviceBuffer<Y>,
        m: usize,
        n: usize,
        k: usize,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        if k == 0 {
            return Err(shape_of(o.op, "k = 0".into()));
        }
        for (name, len, need) in [
            ("x", o.lens.0, m.checked_mul(k)),
            ("w", o.lens.1, n.checked_mul(k)),
            ("y", y.len(), m.checked_mul(n)),
        ] {
            match need {
                Some(need) if len >= need => {}
                _ => {
                    return Err(shape_of(
                        o.op,
                        format!("{name} holds {len} values, m={m} n={n} k={k} need more"),
                    ));
                }
            }
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let desc = Desc::new()?;
        let a = Layout::new(o.dtype, k, n)?;
        let b = Layout::new(o.dtype, k, m)?;
        let c = Layout::new(Y::DTYPE, n, m)?;
        let algo = self.algo(&desc, &a, &b, &c, (m, n, k, o.name, Y::NAME, accumulate))?;
        let alpha = 1f32;
        let beta = if accumulate { 1f32 } else { 0f32 };
        let s = &*self.stream;
        s.context()
            .bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        let ws_len = self.workspace.len();
        let (yp, _g2) = y.slice_mut().device_ptr_mut(s);
        let (tp, _g3) = self.workspace.slice_mut().device_ptr_mut(s);
        // SAFETY: the descriptors are live; the pointers are device buffers of at least
        // the sizes the layouts describe (checked above) and stay alive while the caller's
        // and these guards do; C and D are the same buffer with the same layout (in place,
        // as cuBLASLt allows); the workspace is as large as the preference told the
        // heuristic.
        unsafe {
            lt::matmul(
                self.handle,
                desc.0,
                (&alpha as *const f32).cast::<c_void>(),
                (&beta as *const f32).cast::<c_void>(),
                o.w as *const c_void,
                a.0,
                o.x as *const c_void,
                b.0,
                yp as *const c_void,
                c.0,
                yp as *mut c_void,
                c.0,
                &algo,
                tp as *mut c_void,
                ws_len,
                s.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(blas_err("cublasLtMatmul"))
    }

    /// The cached or freshly chosen algorithm for this problem.
    fn algo(
        &self,
        desc: &Desc,
        a: &Layout,
        b: &Layout,
        c: &Layout,
        key: AlgoKey,
    ) -> Result<sys::cublasLtMatmulAlgo_t, CudaError> {
        let mut cache = self.algos.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = cache.get(&key) {
            return Ok(*a);
        }
        let pref = Pref::new(self.workspace.len(), key.4 != "f32")?;
        // SAFETY: every descriptor is live; the heuristic only reads them.
        let found = unsafe {
            lt::get_matmul_algo_heuristic(self.handle, desc.0, a.0, b.0, c.0, c.0, pref.0)
        }
        .map_err(|e| {
            shape_of(
                "cublasLtMatmulAlgoGetHeuristic",
                format!(
                    "cuBLASLt has no {} algorithm for m={} n={} k={} out={}: {e:?}",
                    key.3, key.0, key.1, key.2, key.4
                ),
            )
        })?;
        cache.insert(key, found.algo);
        Ok(found.algo)
    }
}

impl Drop for BlasLt {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: the handle was created in `new` and is destroyed once here.
            let _ = unsafe { lt::destroy_handle(self.handle) };
        }
    }
}
