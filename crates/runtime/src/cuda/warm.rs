//! Which kernel modules each workload loads, and filling the disk cache for them ahead of
//! the loads.
//!
//! Key design choice: on a first run (or after an upgrade changes a kernel's source)
//! every module is an NVRTC compile of seconds; compiled one after another inside a
//! model's open they made the first chat wait for their sum (18 s on the H200 machine).
//! [`warm_kernels`] compiles the missing ones side by side into the cache, so the loads
//! that follow are cache reads; `favlo serve --device cuda` runs it in the background at
//! start-up and each model's open runs it for its own set.

use super::compile::{Module, WarmReport, warm_cache};
use super::{
    CudaError, attention, attn_prefill, conv1d, conv2d, decode, encoder, gemm, gemv, kernels,
    mx_gemm, rel_encoder, rope_store, sample, vits_dp,
};

/// A workload's kernel modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSet {
    /// Chat (favlo-llama): decode step, prefill chunks, greedy sampling.
    Chat,
    /// Embeddings (favlo-bert).
    Embeddings,
    /// Images and video (favlo-dcgan).
    Images,
    /// The voice (favlo-vits).
    Voice,
    /// What `favlo selftest cuda` loads (`cuda::selftest`).
    Selftest,
    /// Every module of the runtime, benchmarks' included.
    All,
}

impl KernelSet {
    /// The modules, each once.
    pub fn modules(self) -> Vec<Module> {
        let chat = [
            gemv::MODULE,
            attention::MODULE,
            attention::ONEPASS_MODULE,
            rope_store::MODULE,
            decode::MODULE,
            attn_prefill::MODULE,
            mx_gemm::MODULE,
            sample::MODULE,
        ];
        match self {
            KernelSet::Chat => chat.to_vec(),
            KernelSet::Embeddings => vec![encoder::MODULE],
            KernelSet::Images => vec![conv2d::MODULE],
            KernelSet::Voice => vec![conv1d::MODULE, rel_encoder::MODULE, vits_dp::MODULE],
            KernelSet::Selftest => vec![
                gemv::MODULE,
                kernels::GEMV_MODULE,
                kernels::OPS_MODULE,
                attention::MODULE,
                attention::ONEPASS_MODULE,
                sample::MODULE,
            ],
            KernelSet::All => {
                let mut v = chat.to_vec();
                v.extend([
                    encoder::MODULE,
                    conv2d::MODULE,
                    conv1d::MODULE,
                    rel_encoder::MODULE,
                    vits_dp::MODULE,
                    attention::ONEPASS_FMA_MODULE,
                    gemm::MODULE,
                    kernels::GEMV_MODULE,
                    kernels::OPS_MODULE,
                ]);
                v
            }
        }
    }
}

impl KernelSet {
    /// [`Self::modules`] that exist for `arch`: the wgmma GEMM (`gemm_mx`) only for
    /// sm_90a, as `GemmMx::load` requires; every other module builds for sm_89 and up.
    pub fn modules_for(self, arch: &str) -> Vec<Module> {
        let mut v = self.modules();
        if !super::GemmMx::supports(arch) {
            v.retain(|m| *m != gemm::MODULE);
        }
        v
    }
}

/// Compiles `set`'s modules for `arch` (e.g. `CudaContext::arch()`) into the disk cache
/// where it does not hold them yet, several at once; see [`WarmReport`].
pub fn warm_kernels(arch: &str, set: KernelSet) -> Result<WarmReport, CudaError> {
    warm_cache(arch, &set.modules_for(arch))
}

#[cfg(test)]
mod tests {
    use super::KernelSet;

    #[test]
    fn sets_name_each_module_once_and_all_covers_the_others() {
        let all = KernelSet::All.modules();
        let mut names: Vec<_> = all.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a module listed twice in All");
        for set in [
            KernelSet::Chat,
            KernelSet::Embeddings,
            KernelSet::Images,
            KernelSet::Voice,
            KernelSet::Selftest,
        ] {
            for m in set.modules() {
                assert!(all.contains(&m), "{set:?}: {} missing from All", m.name);
            }
        }
    }
}
