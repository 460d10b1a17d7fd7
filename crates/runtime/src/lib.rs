//! Favlo's runtime: the devices, the memory ledger and the kernels every pipeline
//! runs on.
//!
//! Key design choice: the [`ledger::Ledger`] is the only allocator. A [`buffer::Buffer`]
//! can only be made through it, so the daemon always knows, before it loads
//! anything, what is live, what is pending and what still fits.

pub mod bench;
pub mod buffer;
pub mod cpu;
pub mod device;
pub mod device_ledgers;
pub mod ledger;

#[cfg(feature = "cuda")]
pub mod cuda;
