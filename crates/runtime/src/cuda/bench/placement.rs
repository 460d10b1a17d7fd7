//! Placement probes for the decode bench: kernel modules that nothing launches, loaded
//! only to move what the driver places after them.
//!
//! The batch-1 decode step moves by ~1.5% with what is loaded before the attention's
//! and the norms' modules (one more GEMV module there is faster; one loaded after them
//! is not; the weights' addresses do not move either way). Two candidates: where the
//! later modules' code lands (instruction fetch), and where their module data (globals,
//! constant banks) lands. A pad of code alone ([`PadKind::Code`]: straight kernels of
//! volatile loads, ~32 bytes of SASS per line, no data) and a pad of data alone
//! ([`PadKind::Global`]: one `__device__` array and a one-line kernel) separate them.
//! Measured (session 47, H100): the code, from ~1.5 MiB loaded before the attention's
//! module; data alone moves nothing (docs/CUDA.md, decode).
//!
//! Key design choice: the pad's source is generated for its size and goes through the
//! same NVRTC disk cache as every module, and every pad kernel is fetched from the
//! module once loaded (under the driver's lazy loading a function's code is placed
//! when it is first fetched), so the pad is placed where the probe asks.

use std::fmt::Write as _;

use super::BenchError;
use crate::cuda::CudaContext;
use crate::cuda::compile::LoadedModule;

/// Source lines per code-pad kernel (~32 KiB of SASS each; longer straight kernels
/// compile superlinearly slowly).
const LINES_PER_KERNEL: usize = 1024;
/// SASS bytes per generated line on sm_90a (`ld.volatile` + `fadd`, two 16-byte
/// instructions; measured with `nvcc -cubin` and `readelf -S`).
const BYTES_PER_LINE: usize = 32;
/// The largest pad either kind takes, in KiB.
pub const PAD_MAX_KIB: usize = 4096;

/// What a pad module holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadKind {
    /// About this many KiB of kernel code, and no data.
    Code,
    /// A `__device__` array of this many KiB, and a one-line kernel.
    Global,
}

/// Where the decode bench loads its pad module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadWhere {
    /// Before the step's first (GEMV) module: moves every module of the step.
    First,
    /// After the GEMV modules, before the attention's and the norms' (where `--alt
    /// none`'s second GEMV module lands).
    Mid,
}

/// A pad request: its kind, its size and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pad {
    pub kind: PadKind,
    pub kib: usize,
    pub at: PadWhere,
}

impl Pad {
    /// Parses `code:KIB`, `global:KIB`, with an optional `@first` or `@mid` (the
    /// default) after it.
    pub fn parse(s: &str) -> Result<Pad, String> {
        let (spec, at) = match s.split_once('@') {
            Some((spec, "first")) => (spec, PadWhere::First),
            Some((spec, "mid")) => (spec, PadWhere::Mid),
            Some((_, other)) => return Err(format!("unknown place `{other}` (first, mid)")),
            None => (s, PadWhere::Mid),
        };
        let (kind, kib) = spec
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: expected code:KIB or global:KIB"))?;
        let kind = match kind {
            "code" => PadKind::Code,
            "global" => PadKind::Global,
            other => return Err(format!("unknown pad kind `{other}` (code, global)")),
        };
        let kib: usize = kib
            .parse()
            .map_err(|_| format!("`{kib}` is not a size in KiB"))?;
        if kib == 0 || kib > PAD_MAX_KIB {
            return Err(format!("pad of {kib} KiB: expected 1 … {PAD_MAX_KIB}"));
        }
        Ok(Pad { kind, kib, at })
    }
}

/// A loaded pad module; dropping it unloads it.
pub struct PadModule {
    _module: LoadedModule,
}

/// The pad's kernel names and CUDA source.
pub fn pad_source(kind: PadKind, kib: usize) -> (Vec<String>, String) {
    let mut src = String::new();
    let mut names = Vec::new();
    match kind {
        PadKind::Code => {
            let mut lines = (kib * 1024).div_ceil(BYTES_PER_LINE);
            while lines > 0 {
                let n = lines.min(LINES_PER_KERNEL);
                let name = format!("favlo_pad_code{}", names.len());
                let _ = writeln!(
                    src,
                    "extern \"C\" __global__ void {name}(const volatile float* p, float* out) {{\n  float a = 0.0f;"
                );
                for i in 0..n {
                    let _ = writeln!(src, "  a += p[{i}];");
                }
                let _ = writeln!(src, "  out[threadIdx.x] = a;\n}}");
                names.push(name);
                lines -= n;
            }
        }
        PadKind::Global => {
            let _ = writeln!(
                src,
                "__device__ unsigned char favlo_pad_data[{}];\n\
                 extern \"C\" __global__ void favlo_pad_global(unsigned i) {{ favlo_pad_data[i] = 1; }}",
                kib * 1024
            );
            names.push("favlo_pad_global".into());
        }
    }
    (names, src)
}

/// Compiles (or reads from the cache) and loads `pad`, and fetches each of its
/// kernels so their code is placed now.
pub fn load_pad(ctx: &CudaContext, pad: Pad) -> Result<PadModule, BenchError> {
    let (names, src) = pad_source(pad.kind, pad.kib);
    let tag = match pad.kind {
        PadKind::Code => "pad_code",
        PadKind::Global => "pad_global",
    };
    let module = LoadedModule::load_source(ctx, tag, &src)?;
    for n in &names {
        module.function(n)?;
    }
    Ok(PadModule { _module: module })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kinds_sizes_and_places() {
        let pad = |kind, kib, at| Ok(Pad { kind, kib, at });
        assert_eq!(Pad::parse("code:64"), pad(PadKind::Code, 64, PadWhere::Mid));
        assert_eq!(
            Pad::parse("global:1024@first"),
            pad(PadKind::Global, 1024, PadWhere::First)
        );
        assert!(Pad::parse("code:0").is_err());
        assert!(Pad::parse("code:99999").is_err());
        assert!(Pad::parse("code:x").is_err());
        assert!(Pad::parse("data:4").is_err());
        assert!(Pad::parse("code:4@late").is_err());
        assert!(Pad::parse("code").is_err());
    }

    #[test]
    fn code_pad_splits_into_kernels_of_bounded_length() {
        // 100 KiB at 32 bytes a line = 3200 lines: 1024 + 1024 + 1024 + 128.
        let (names, src) = pad_source(PadKind::Code, 100);
        assert_eq!(names.len(), 4);
        assert_eq!(src.matches("a += p[").count(), 3200);
        assert_eq!(src.matches("__global__").count(), 4);
        let (names, src) = pad_source(PadKind::Global, 8);
        assert_eq!(names, ["favlo_pad_global"]);
        assert!(src.contains("favlo_pad_data[8192]"));
    }
}
