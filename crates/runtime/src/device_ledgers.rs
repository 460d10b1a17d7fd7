//! The ledgers of accelerator memory alive in this process, so the server can show them
//! beside the host ledger (`GET /v1/memory`) without the pipelines that own them handing
//! them over.
//!
//! Key design choice: a process-wide list of weak references, read as snapshots. A device
//! ledger belongs to the context that opened the device (a pipeline's); registering it
//! here neither keeps it alive (a closed model's ledger drops out) nor lets a reader
//! allocate through it.

use std::sync::{Arc, Mutex, Weak};

use crate::ledger::{Ledger, LedgerSnapshot};

static LEDGERS: Mutex<Vec<Weak<Ledger>>> = Mutex::new(Vec::new());

/// Lists `ledger` among the live device ledgers until it is dropped.
pub fn register(ledger: &Arc<Ledger>) {
    let mut all = LEDGERS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(ledger));
}

/// Snapshots of the registered ledgers still alive, in registration order.
pub fn snapshots() -> Vec<LedgerSnapshot> {
    let mut all = LEDGERS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.iter()
        .filter_map(Weak::upgrade)
        .map(|l| l.snapshot())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ledger::{Owner, SpanKind};

    #[test]
    fn registered_ledgers_show_until_dropped() {
        let a = Ledger::with_fixed_budget(Device::Cuda(7), 1 << 30, None);
        let b = Ledger::with_fixed_budget(Device::Cuda(8), 2 << 30, None);
        register(&a);
        register(&b);
        let owner = Owner::mint("device-ledgers-test");
        let span = a.span(&owner, SpanKind::Resident, 4096).unwrap();
        let mine = |s: &[LedgerSnapshot]| {
            s.iter()
                .filter(|x| matches!(x.device, Device::Cuda(7) | Device::Cuda(8)))
                .map(|x| (x.device, x.live))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            mine(&snapshots()),
            vec![(Device::Cuda(7), 4096), (Device::Cuda(8), 0)]
        );
        drop(span);
        drop(a);
        assert_eq!(mine(&snapshots()), vec![(Device::Cuda(8), 0)]);
    }
}
