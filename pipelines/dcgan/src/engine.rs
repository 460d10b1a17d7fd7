//! Where the generator runs: the CPU [`Generator`] or, with the `cuda` feature, its
//! GPU twin ([`crate::cuda::CudaGenerator`]), behind the one stepping interface the
//! image and video pipelines call.
//!
//! Key design choice: an enum, not a trait object, so the CPU arm is the unchanged CPU
//! generator (its calls are the ones the pipelines made before the GPU existed) and a
//! build without `cuda` has no second arm at all. The GPU arm's calls can fail (driver
//! errors), so every method returns a `Result`; on the CPU they never do.

use std::path::Path;
use std::sync::Arc;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

use crate::error::DcganError;
use crate::generator::Generator;

/// A generator on its device.
#[derive(Debug)]
pub enum Engine {
    Cpu(Generator),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaGenerator),
}

impl From<Generator> for Engine {
    fn from(g: Generator) -> Self {
        Engine::Cpu(g)
    }
}

#[cfg(feature = "cuda")]
impl From<crate::cuda::CudaGenerator> for Engine {
    fn from(g: crate::cuda::CudaGenerator) -> Self {
        Engine::Cuda(g)
    }
}

/// Whether `device` can run the generator here: `Ok` for the CPU; for
/// `Device::Cuda(n)` the build needs the `cuda` feature and the driver, NVRTC and
/// device `n` must answer. The error ("CUDA is unavailable: …") says why not.
pub fn check_device(device: Device) -> Result<(), DcganError> {
    match device {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => crate::cuda::probe(n as usize),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(DcganError::Device {
            message: "CUDA is unavailable: favlo-dcgan was built without CUDA support (cargo feature `cuda`)".into(),
        }),
        other => Err(DcganError::Device {
            message: format!("device {other} is not supported for the DCGAN generator"),
        }),
    }
}

impl Engine {
    /// Opens the checkpoint at `path` on `device`: the CPU generator (weights in
    /// `ledger`) or the GPU one (weights in the CUDA context's ledger, same `owner`).
    pub fn open(
        path: &Path,
        ledger: &Arc<Ledger>,
        owner: &Owner,
        device: Device,
    ) -> Result<Self, DcganError> {
        check_device(device)?;
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => Ok(Engine::Cuda(crate::cuda::CudaGenerator::open(
                path, n as usize, owner,
            )?)),
            _ => Ok(Engine::Cpu(Generator::open(path, ledger, owner)?)),
        }
    }

    /// The device the generator runs on.
    pub fn device(&self) -> Device {
        match self {
            Engine::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => Device::Cuda(g.ordinal()),
        }
    }

    /// Loads `batch` activations entering layer `at`; `Ok(false)` on a size mismatch.
    pub fn load_state(
        &mut self,
        at: usize,
        batch: usize,
        values: &[f32],
    ) -> Result<bool, DcganError> {
        match self {
            Engine::Cpu(g) => Ok(g.load_state(at, batch, values)),
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => g.load_state(at, batch, values),
        }
    }

    /// The layer the current activation enters.
    pub fn at(&self) -> usize {
        match self {
            Engine::Cpu(g) => g.at(),
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => g.at(),
        }
    }

    /// Runs the next layer; `Ok(false)` when already finished.
    pub fn step(&mut self) -> Result<bool, DcganError> {
        match self {
            Engine::Cpu(g) => Ok(g.step()),
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => g.step(),
        }
    }

    /// The current activation on the host.
    pub fn state(&mut self) -> Result<&[f32], DcganError> {
        match self {
            Engine::Cpu(g) => Ok(g.state()),
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => g.state(),
        }
    }

    /// Every layer on `z`; `Ok(None)` when `z` has the wrong size.
    pub fn forward(&mut self, z: &[f32], batch: usize) -> Result<Option<&[f32]>, DcganError> {
        match self {
            Engine::Cpu(g) => Ok(g.forward(z, batch)),
            #[cfg(feature = "cuda")]
            Engine::Cuda(g) => g.forward(z, batch),
        }
    }
}
