//! Token sampling on the device (`kernels/sample.cu`): greedy, or temperature + top-k +
//! top-p + min-p driven by a caller-supplied uniform, from a `[vocab]` f32 logits
//! buffer into an 8-byte result (token id, log-probability).
//!
//! Key design choice: the rule is the host sampler's (pipelines/llama `sampler.rs`),
//! order (logit desc, id asc) included, but found without a sort: a grid of blocks (one
//! per multiprocessor at most, meeting at barriers in the result buffer's scratch)
//! radix-selects each prefix boundary (k-th element, top-p mass, the draw) on the logit's
//! 32-bit key and settles equal logits by id, so a decode step copies back 8 bytes
//! instead of vocab × 4.
//! The uniform comes from the caller, so a seeded generation stays reproducible and the
//! kernel is testable against a CPU reference.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, DevicePtr, DevicePtrMut, LaunchConfig};

use super::compile::{LoadedModule, Module};
use super::context::{CudaContext, DeviceBuffer};
use super::launch::{arg_ptr, launch_raw};
use super::{CudaError, driver_err};

const SRC: &str = include_str!("../../kernels/sample.cu");
/// This family's kernel module (see [`super::warm`]).
pub(crate) const MODULE: Module = Module {
    name: "sample",
    src: SRC,
};

/// Length in `u32`s of the result buffer: token id, then the bits of its f32
/// log-probability under the unmodified distribution, then the kernel's scratch (grid
/// barrier, per-block partials, histograms: `SmpScratch` in sample.cu, which asserts
/// that it fits). Allocate it zeroed and keep it for the sampler's later calls: the
/// barrier's generation word only grows.
pub const SAMPLE_OUT_LEN: usize = 2 + SMP_SCRATCH;
const SMP_SCRATCH: usize = 20_480;
/// Threads per block (`SMP_BT`) and most blocks (`SMP_NB`) of the kernel.
const THREADS: u32 = 512;
const MAX_BLOCKS: usize = 256;

/// The largest vocabulary (the kernel's fixed-point mass sums stay below 2^63).
pub const MAX_VOCAB: usize = 1 << 19;

/// Sampling parameters (the host sampler's meaning; penalties are not applied here).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleParams {
    /// `<= 0` or not finite: greedy.
    pub temperature: f32,
    /// 0: off.
    pub top_k: usize,
    /// Active in (0, 1).
    pub top_p: f32,
    /// Active when > 0.
    pub min_p: f32,
}

impl SampleParams {
    /// Greedy (argmax) parameters.
    pub const GREEDY: SampleParams = SampleParams {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    };
}

/// The sampling kernel of one context.
pub struct DeviceSampler {
    ctx: Arc<CudaContext>,
    f: CudaFunction,
    /// Greedy alone: one block, no barriers.
    greedy: CudaFunction,
    /// Multiprocessors: the grid's blocks must all be resident (they meet at barriers).
    sms: usize,
}

fn shape(detail: String) -> CudaError {
    CudaError::Shape {
        op: "sample",
        detail,
    }
}

impl DeviceSampler {
    /// Compiles (or reads from the cache) and loads the module.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<DeviceSampler, CudaError> {
        let m = LoadedModule::load(ctx, MODULE)?;
        let f = m.function("favlo_sample")?;
        let greedy = m.function("favlo_sample_greedy")?;
        use cudarc::driver::sys::CUdevice_attribute as A;
        let sms = ctx
            .raw()
            .attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        Ok(DeviceSampler {
            ctx: Arc::clone(ctx),
            f,
            greedy,
            sms: usize::try_from(sms).unwrap_or(1).max(1),
        })
    }

    /// Queues the choice of one token from `logits[..vocab]` with `uniform` in [0, 1)
    /// into `out` ([`SAMPLE_OUT_LEN`] values; read it with [`DeviceSampler::read`]).
    pub fn sample(
        &self,
        logits: &DeviceBuffer<f32>,
        vocab: usize,
        p: &SampleParams,
        uniform: f64,
        out: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if vocab == 0 || vocab > MAX_VOCAB || logits.len() < vocab || out.len() < SAMPLE_OUT_LEN {
            return Err(shape(format!(
                "vocab {vocab} logits {} out {}",
                logits.len(),
                out.len()
            )));
        }
        let n = i32::try_from(vocab).map_err(|_| shape(format!("vocab {vocab}")))?;
        let top_k = i32::try_from(p.top_k.min(vocab)).unwrap_or(n);
        let u = if uniform.is_finite() {
            uniform.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let s = self.ctx.stream();
        let (px, _gx) = logits.slice.device_ptr(s);
        let (po, _go) = out.slice.device_ptr_mut(s);
        if !(p.temperature > 0.0 && p.temperature.is_finite()) {
            let mut args = [arg_ptr(&px), arg_ptr(&n), arg_ptr(&po)];
            // SAFETY: favlo_sample_greedy's parameters in order and type (pointer, int,
            // pointer); lengths checked above; one block of 1024 threads, static shared
            // memory only.
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: 0,
            };
            return unsafe { launch_raw(s, &self.greedy, cfg, &mut args, false) }
                .map_err(driver_err("cuLaunchKernel(sample_greedy)"));
        }
        let mut args = [
            arg_ptr(&px),
            arg_ptr(&n),
            arg_ptr(&p.temperature),
            arg_ptr(&top_k),
            arg_ptr(&p.top_p),
            arg_ptr(&p.min_p),
            arg_ptr(&u),
            arg_ptr(&po),
        ];
        // SAFETY: the kernel's parameters in order and type (device pointers as u64,
        // int, float, int, float, float, double, pointer); lengths checked above (out
        // holds the scratch); nb blocks of 512 threads with static shared memory only,
        // nb ≤ the multiprocessor count, so all of them are resident at the barriers.
        let nb = self
            .sms
            .min(MAX_BLOCKS)
            .min(vocab.div_ceil(THREADS as usize))
            .max(1) as u32;
        let cfg = LaunchConfig {
            grid_dim: (nb, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { launch_raw(s, &self.f, cfg, &mut args, false) }
            .map_err(driver_err("cuLaunchKernel(sample)"))
    }

    /// The token id and its log-probability from `out` (synchronizes the stream; copies
    /// 8 bytes).
    pub fn read(&self, out: &DeviceBuffer<u32>) -> Result<(u32, f32), CudaError> {
        if out.len() < 2 {
            return Err(shape(format!("out {}", out.len())));
        }
        let v = self
            .ctx
            .stream()
            .clone_dtoh(&out.slice.slice(0..2))
            .map_err(driver_err("cuMemcpyDtoH"))?;
        match v.as_slice() {
            [id, lp, ..] => Ok((*id, f32::from_bits(*lp))),
            _ => Err(shape(format!("out {}", v.len()))),
        }
    }
}
