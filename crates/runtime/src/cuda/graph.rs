//! CUDA graphs of a context's stream: capture what a closure launches once, replay it.
//!
//! Key design choice: capture is thread-local (`CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`),
//! so other threads using CUDA meanwhile (another model, the server) are not disturbed,
//! and the capture is always ended, also when the closure fails, so the stream never
//! stays in capture mode. The kernels read anything that changes per replay (the
//! position) from device memory, which is what makes one capture valid for every step.

use cudarc::driver::sys;

use super::context::CudaContext;
use super::{CudaError, driver_err};

/// An instantiated graph of kernels on a context's stream.
pub struct CudaGraph {
    graph: cudarc::driver::CudaGraph,
}

// SAFETY: a graph exec is a driver handle that may be launched from any thread (the
// launch binds the owning context to the calling thread first); the wrapper offers
// only `&self` launch and drop, and is not `Sync`, so one thread uses it at a time.
unsafe impl Send for CudaGraph {}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraph").finish_non_exhaustive()
    }
}

impl CudaGraph {
    /// Captures the launches `f` makes on `ctx`'s stream (nothing runs yet). `f` must
    /// not synchronize, allocate, or copy from pageable host memory.
    pub fn capture(
        ctx: &CudaContext,
        f: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<CudaGraph, CudaError> {
        let s = ctx.stream();
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver_err("cuStreamBeginCapture"))?;
        let launched = f();
        let ended = s.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        let graph = ended
            .map_err(driver_err("cuStreamEndCapture"))?
            .ok_or_else(|| CudaError::Shape {
                op: "graph capture",
                detail: "nothing was launched".into(),
            })?;
        graph.upload().map_err(driver_err("cuGraphUpload"))?;
        Ok(CudaGraph { graph })
    }

    /// Replays the graph on the stream it was captured on (asynchronous).
    pub fn launch(&self) -> Result<(), CudaError> {
        self.graph.launch().map_err(driver_err("cuGraphLaunch"))
    }
}
