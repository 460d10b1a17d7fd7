//! The devices Favlo can run on.
//!
//! Key design choice: one small `Copy` enum that every layer passes by value. The
//! enum stays open so further backends (Metal) land as new variants without changing
//! any signature.

use std::fmt;

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// Host memory and the CPU kernels in [`crate::cpu`].
    Cpu,
    /// An NVIDIA GPU by driver ordinal (the `cuda` feature's backend).
    Cuda(u32),
}

impl Device {
    /// Bytes this device can still hand out, as the operating system reports it.
    ///
    /// CPU: `MemAvailable` from `/proc/meminfo` (reclaimable pages included). On
    /// systems without that file the answer falls back to 0, which makes every
    /// uncapped `room()` zero: a clear refusal rather than a guess.
    ///
    /// CUDA: 0 here, because this module does not talk to the driver; a CUDA ledger
    /// is built with [`crate::ledger::Ledger::with_free_source`] over `cuMemGetInfo`.
    pub fn available_bytes(&self) -> u64 {
        match self {
            Device::Cpu => read_mem_available().unwrap_or(0),
            Device::Cuda(_) => 0,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

fn read_mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// Parses the `MemAvailable:` line of `/proc/meminfo` (value in kB) into bytes.
fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   1234 kB\n";
        assert_eq!(parse_mem_available(text), Some(1234 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn display_names_the_ordinal() {
        assert_eq!(Device::Cpu.to_string(), "cpu");
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
        assert_eq!(Device::Cuda(0).available_bytes(), 0);
    }

    #[test]
    fn cpu_reports_some_memory_on_linux() {
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(Device::Cpu.available_bytes() > 0);
        }
    }
}
