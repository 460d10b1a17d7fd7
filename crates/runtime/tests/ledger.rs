//! Ledger accounting: live/pending/room totals, reservations, sweep, fit, the
//! max_memory parser, and concurrent allocate/sweep from several threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, LedgerError, Owner, SpanKind, fit, parse_max_memory};

const MIB: u64 = 1 << 20;

#[test]
fn alloc_and_drop_keep_totals_exact() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 64 * MIB, None);
    let owner = Owner::mint("test");
    let a = ledger
        .alloc::<f32>(&owner, SpanKind::Resident, 1000)
        .unwrap();
    let b = ledger.alloc::<u8>(&owner, SpanKind::Scratch, 333).unwrap();
    assert_eq!(ledger.live(), 4000 + 333);
    assert_eq!(ledger.room(), 64 * MIB - 4333);
    assert!(a.iter().all(|&x| x == 0.0));
    let snap = ledger.snapshot();
    assert_eq!(snap.owners.len(), 1);
    assert_eq!(snap.owners[0].spans, 2);
    assert_eq!(snap.owners[0].kinds[&SpanKind::Resident], 4000);
    assert_eq!(snap.owners[0].kinds[&SpanKind::Scratch], 333);
    // A live span makes sweep report a leak, naming the owner.
    match ledger.sweep(&owner) {
        Err(LedgerError::Leaked {
            owner: o,
            spans: 2,
            bytes: 4333,
        }) => assert_eq!(o, owner.to_string()),
        other => panic!("expected a leak, got {other:?}"),
    }
    drop(a);
    drop(b);
    assert_eq!(ledger.live(), 0);
    assert_eq!(ledger.sweep(&owner), Ok(0));
}

#[test]
fn refuses_what_does_not_fit_and_keeps_state() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, MIB, None);
    let owner = Owner::mint("big");
    let keep = ledger
        .alloc::<u8>(&owner, SpanKind::Resident, 1000)
        .unwrap();
    let err = ledger
        .alloc::<f32>(&owner, SpanKind::Resident, MIB as usize)
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::NoRoom { need, room, .. } if need == 4 * MIB && room == MIB - 1000)
    );
    assert_eq!(ledger.live(), 1000);
    drop(keep);
    // Overflowing sizes are an error, not a panic.
    let err = ledger
        .alloc::<f32>(&owner, SpanKind::Resident, usize::MAX)
        .unwrap_err();
    assert!(matches!(err, LedgerError::AllocFailed { .. }));
}

#[test]
fn cap_limits_budget() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 10 * MIB, Some(2 * MIB));
    assert_eq!(ledger.budget(), 2 * MIB);
    let real = Ledger::new(Device::Cpu, Some(MIB));
    assert!(real.budget() <= MIB);
}

#[test]
fn reservations_are_pending_until_drawn() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 10 * MIB, None);
    let owner = Owner::mint("res");
    let other = Owner::mint("other");
    let r = ledger.reserve(&owner, 4 * MIB).unwrap();
    assert_eq!(ledger.pending(), 4 * MIB);
    assert_eq!(ledger.room(), 6 * MIB);
    // Others cannot take the reserved bytes.
    assert!(
        ledger
            .alloc::<u8>(&other, SpanKind::Scratch, 7 * MIB as usize)
            .is_err()
    );
    let buf = r.alloc::<u8>(SpanKind::Resident, MIB as usize).unwrap();
    assert_eq!(ledger.pending(), 3 * MIB);
    assert_eq!(ledger.live(), MIB);
    assert_eq!(r.remaining(), 3 * MIB);
    // Drawing beyond the reservation takes the rest from room.
    let buf2 = r.alloc::<u8>(SpanKind::Resident, 5 * MIB as usize).unwrap();
    assert_eq!(ledger.pending(), 0);
    assert_eq!(ledger.live(), 6 * MIB);
    drop(r);
    drop((buf, buf2));
    assert_eq!((ledger.live(), ledger.pending()), (0, 0));
}

#[test]
fn sweep_drops_unused_reservations() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 10 * MIB, None);
    let owner = Owner::mint("sw");
    let r = ledger.reserve(&owner, 2 * MIB).unwrap();
    assert_eq!(ledger.sweep(&owner), Ok(2 * MIB));
    assert_eq!(ledger.pending(), 0);
    drop(r); // dropping after sweep must not underflow
    assert_eq!(ledger.pending(), 0);
}

#[test]
fn fit_shrinks_the_knob() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 100_000, None);
    // 1000 bytes of weights + 64 bytes per context token.
    let bytes = |ctx: usize| 1000 + 64 * ctx as u64;
    assert_eq!(
        fit(&ledger, "chat", 16, 100_000, bytes),
        Ok((100_000 - 1000) / 64)
    );
    assert_eq!(fit(&ledger, "chat", 16, 100, bytes), Ok(100));
    match fit(&ledger, "a 4096-token chat", 4096, 8192, bytes) {
        Err(LedgerError::DoesNotFit {
            request,
            need,
            room,
        }) => {
            assert_eq!(request, "a 4096-token chat");
            assert_eq!(need, 1000 + 64 * 4096);
            assert_eq!(room, 100_000);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fit(&ledger, "x", 5, 4, bytes),
        Err(LedgerError::EmptyRange { .. })
    ));
}

#[test]
fn max_memory_parser() {
    let g = 1u64 << 30;
    let m = 1u64 << 20;
    for (s, want) in [
        ("32GiB", 32 * g),
        ("512MiB", 512 * m),
        ("8g", 8 * g),
        ("100m", 100 * m),
        ("2gb", 2 * g),
        ("300MB", 300 * m),
        ("64k", 64 << 10),
        ("123456", 123_456),
        (" 4G ", 4 * g),
    ] {
        assert_eq!(parse_max_memory(s), Ok(Some(want)), "{s}");
    }
    assert_eq!(parse_max_memory(""), Ok(None));
    for bad in [
        "0",
        "-5g",
        "g",
        "1.5g",
        "12 parsecs",
        "99999999999999999999",
        "18014398509481984g",
        "5x",
    ] {
        assert!(
            matches!(parse_max_memory(bad), Err(LedgerError::BadMaxMemory { .. })),
            "{bad}"
        );
    }
}

#[test]
fn owners_are_unique_and_parse() {
    let a = Owner::mint("llama");
    let b = Owner::mint("llama");
    assert_ne!(a, b);
    assert_eq!(a.stem(), "llama");
    assert!(Owner::parse("wan22-i2v:17").is_ok());
    assert!(Owner::parse("nostem").is_err());
    assert!(Owner::parse(":3").is_err());
    assert!(Owner::parse("x:").is_err());
}

#[test]
fn concurrent_alloc_and_sweep_keep_totals() {
    let ledger = Ledger::with_fixed_budget(Device::Cpu, 1 << 40, None);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let mut total = 0u64;
                for round in 0..200 {
                    let owner = Owner::mint(&format!("t{t}"));
                    let mut held = Vec::new();
                    for i in 0..5 {
                        let len = 1 + (t * 131 + round * 17 + i * 7) % 4096;
                        held.push(ledger.alloc::<f32>(&owner, SpanKind::Scratch, len).unwrap());
                    }
                    let mine: u64 = held.iter().map(|b| b.bytes()).sum();
                    assert_eq!(ledger.owner_bytes(&owner), mine);
                    total += mine;
                    drop(held);
                    assert_eq!(ledger.sweep(&owner), Ok(0));
                }
                total
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(total > 0);
    let snap = ledger.snapshot();
    assert_eq!((snap.live, snap.pending), (0, 0));
    assert!(snap.owners.is_empty());
}

/// A device ledger over a fake driver: free bytes come from a callback (as
/// `cuMemGetInfo` does for CUDA), and device buffers are host-less spans.
#[test]
fn free_source_and_hostless_spans() {
    use std::sync::atomic::{AtomicU64, Ordering};
    // The fake device: 100 MiB total, `used` of it taken by whoever allocates.
    let used = Arc::new(AtomicU64::new(0));
    let probe = Arc::clone(&used);
    let ledger = Ledger::with_free_source(
        Device::Cuda(1),
        Arc::new(move || 100 * MIB - probe.load(Ordering::SeqCst)),
        None,
    );
    assert_eq!(ledger.device(), Device::Cuda(1));
    assert_eq!(ledger.budget(), 100 * MIB);
    let owner = Owner::mint("gpu-model");
    // Span first, then the "driver" allocation, as the CUDA context does.
    let w = ledger.span(&owner, SpanKind::Resident, 30 * MIB).unwrap();
    used.fetch_add(30 * MIB, Ordering::SeqCst);
    // Budget = free (70) + live (30): unchanged; room = 70.
    assert_eq!(ledger.budget(), 100 * MIB);
    assert_eq!(ledger.live(), 30 * MIB);
    assert_eq!(ledger.pending(), 0);
    assert_eq!(ledger.room(), 70 * MIB);
    // Another process takes 20 MiB: our room shrinks, our budget too.
    used.fetch_add(20 * MIB, Ordering::SeqCst);
    assert_eq!(ledger.room(), 50 * MIB);
    // A reservation's span draws from it: pending falls as live rises. Pending bytes
    // are not out of the driver's free figure yet, so they lower room by themselves.
    let r = ledger.reserve(&owner, 10 * MIB).unwrap();
    assert_eq!(ledger.room(), 40 * MIB);
    assert_eq!(ledger.budget(), 100 * MIB - 20 * MIB);
    let kv = r.span(SpanKind::Scratch, 4 * MIB).unwrap();
    used.fetch_add(4 * MIB, Ordering::SeqCst);
    assert_eq!((ledger.live(), ledger.pending()), (34 * MIB, 6 * MIB));
    assert_eq!(r.remaining(), 6 * MIB);
    assert_eq!(ledger.room(), 40 * MIB);
    let snap = ledger.snapshot();
    assert_eq!(snap.device.to_string(), "cuda:1");
    assert_eq!(snap.owners.len(), 1);
    assert_eq!(snap.owners[0].kinds[&SpanKind::Resident], 30 * MIB);
    assert_eq!(snap.owners[0].kinds[&SpanKind::Scratch], 4 * MIB);
    assert_eq!(snap.owners[0].spans, 2);
    // More than the room is refused before any allocation, with the kind named.
    let err = ledger
        .span(&owner, SpanKind::Private, 41 * MIB)
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::NoRoom { kind: SpanKind::Private, need, room, .. } if need == 41 * MIB && room == 40 * MIB),
        "{err:?}"
    );
    // Live spans at sweep are a leak; dropping them (and the memory) clears it.
    assert!(matches!(
        ledger.sweep(&owner),
        Err(LedgerError::Leaked { spans: 2, bytes, .. }) if bytes == 34 * MIB
    ));
    assert_eq!(ledger.pending(), 0, "sweep dropped the reservation's rest");
    assert_eq!(r.remaining(), 0);
    drop((w, kv, r));
    used.fetch_sub(34 * MIB, Ordering::SeqCst);
    assert_eq!(ledger.live(), 0);
    assert_eq!(ledger.sweep(&owner), Ok(0));
    assert_eq!(ledger.room(), 80 * MIB);
}

#[test]
fn free_source_respects_the_cap() {
    let ledger = Ledger::with_free_source(Device::Cuda(0), Arc::new(|| 8 * MIB), Some(5 * MIB));
    assert_eq!(ledger.budget(), 5 * MIB);
    let owner = Owner::mint("capped");
    let a = ledger.span(&owner, SpanKind::Scratch, 5 * MIB).unwrap();
    assert_eq!(a.bytes(), 5 * MIB);
    assert_eq!(ledger.room(), 0);
    assert!(ledger.span(&owner, SpanKind::Scratch, 1).is_err());
    drop(a);
    assert_eq!(ledger.room(), 5 * MIB);
}

/// On the real CPU budget (MemAvailable), a reservation lowers `room()` by its
/// size: reserved bytes are not allocated yet, so they are still inside the
/// free figure and must not be added back to the budget.
#[test]
fn a_reservation_lowers_room_on_the_device_budget() {
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("res");
    let before = ledger.room();
    let size = 256 * MIB;
    let r = ledger.reserve(&owner, size).unwrap();
    let after = ledger.room();
    // MemAvailable moves a little on a busy machine: 64 MiB of slack.
    assert!(
        after + size <= before + 64 * MIB && after + size + 64 * MIB >= before,
        "room {before} -> {after} after reserving {size}"
    );
    drop(r);
    ledger.sweep(&owner).unwrap();
}
