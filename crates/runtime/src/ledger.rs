//! The memory ledger: the one allocator of every buffer a runtime holds.
//!
//! Key design choice: Rust ownership frees memory (a [`Buffer`] returns its bytes
//! when it drops), and the ledger *accounts* for it. Every span names an owner
//! `"<stem>:<token>"`, a kind and its bytes, so the daemon can answer "what is live,
//! what is pending, what still fits" before it loads anything, and `sweep(owner)`
//! can confirm that a closed runtime really let go of everything it held.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::buffer::{Buffer, Element};
use crate::device::Device;

/// Errors of the ledger.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LedgerError {
    /// An allocation or reservation does not fit in `room()`.
    #[error("{owner} asked for {need} bytes ({kind}) but only {room} bytes of room are left")]
    NoRoom {
        owner: String,
        kind: SpanKind,
        need: u64,
        room: u64,
    },
    /// A request cannot be served even at its smallest setting.
    #[error(
        "{request} does not fit: it needs at least {need} bytes, {room} bytes of room are left"
    )]
    DoesNotFit {
        request: String,
        need: u64,
        room: u64,
    },
    /// `sweep` found spans that are still alive after their owner closed.
    #[error("{owner} still holds {spans} span(s) of {bytes} bytes after close")]
    Leaked {
        owner: String,
        spans: usize,
        bytes: u64,
    },
    /// A malformed `max_memory` value.
    #[error(
        "invalid max_memory {value:?}: expected a positive size such as 32GiB, 512MiB, 8g, 100m, 2gb or a byte count"
    )]
    BadMaxMemory { value: String },
    /// A malformed owner string.
    #[error("invalid owner {value:?}: expected \"<stem>:<token>\"")]
    BadOwner { value: String },
    /// The requested size overflows or the host allocator refused it.
    #[error("cannot allocate {len} elements of {elem_bytes} bytes for {owner}")]
    AllocFailed {
        owner: String,
        len: usize,
        elem_bytes: usize,
    },
    /// The knob range given to [`fit`] is empty.
    #[error("{request}: empty knob range {min}..={max}")]
    EmptyRange {
        request: String,
        min: usize,
        max: usize,
    },
}

/// What a span is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpanKind {
    /// Weights that stay for the runtime's life.
    Resident,
    /// Working memory reused between steps (activations, KV cache).
    Scratch,
    /// Memory one request or job holds privately.
    Private,
}

impl SpanKind {
    /// The lowercase name used in JSON and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            SpanKind::Resident => "resident",
            SpanKind::Scratch => "scratch",
            SpanKind::Private => "private",
        }
    }
}

impl fmt::Display for SpanKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

static OWNER_COUNTER: AtomicU64 = AtomicU64::new(1);

/// The owner of spans: `"<stem>:<token>"`, for example `"llama:7"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// A fresh owner for one opening of `stem`; the token is a process counter.
    pub fn mint(stem: &str) -> Owner {
        let n = OWNER_COUNTER.fetch_add(1, Ordering::Relaxed);
        Owner(format!("{stem}:{n}"))
    }

    /// Parses an existing owner string, checking the `"<stem>:<token>"` shape.
    pub fn parse(value: &str) -> Result<Owner, LedgerError> {
        match value.rsplit_once(':') {
            Some((stem, token)) if !stem.is_empty() && !token.is_empty() => {
                Ok(Owner(value.to_string()))
            }
            _ => Err(LedgerError::BadOwner {
                value: value.to_string(),
            }),
        }
    }

    /// The owner string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stem part (before the last `:`).
    pub fn stem(&self) -> &str {
        self.0.rsplit_once(':').map_or(self.0.as_str(), |(s, _)| s)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug)]
struct Span {
    owner: Owner,
    kind: SpanKind,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    spans: HashMap<u64, Span>,
    reservations: HashMap<u64, (Owner, u64)>,
    next_id: u64,
    live: u64,
    pending: u64,
}

/// A callback that reports the bytes a device can still hand out right now (for
/// CUDA: `cuMemGetInfo`'s free figure). The ledger adds what it already holds.
pub type FreeBytes = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Where the ledger's budget comes from.
#[derive(Clone)]
enum BudgetSource {
    Device(Device),
    Fixed(u64),
    Probe(FreeBytes),
}

impl fmt::Debug for BudgetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetSource::Device(d) => write!(f, "Device({d})"),
            BudgetSource::Fixed(b) => write!(f, "Fixed({b})"),
            BudgetSource::Probe(_) => f.write_str("Probe"),
        }
    }
}

/// The process-wide memory ledger. Always shared as `Arc<Ledger>`.
#[derive(Debug)]
pub struct Ledger {
    device: Device,
    source: BudgetSource,
    cap: Option<u64>,
    inner: Mutex<Inner>,
}

/// One owner's holdings in a [`LedgerSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerUsage {
    pub owner: String,
    /// Bytes per span kind; kinds with no spans are absent.
    pub kinds: BTreeMap<SpanKind, u64>,
    pub spans: usize,
    pub bytes: u64,
}

/// A consistent picture of the ledger at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerSnapshot {
    pub device: Device,
    pub budget: u64,
    pub cap: Option<u64>,
    pub live: u64,
    pub pending: u64,
    pub room: u64,
    pub owners: Vec<OwnerUsage>,
}

impl Ledger {
    /// A ledger over `device`, capped at `max_memory` bytes when given.
    pub fn new(device: Device, max_memory: Option<u64>) -> Arc<Ledger> {
        Arc::new(Ledger {
            device,
            source: BudgetSource::Device(device),
            cap: max_memory,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// A ledger whose device reports exactly `bytes` free (tests, benchmarks and
    /// machines where the operating system's figure must be overridden).
    pub fn with_fixed_budget(device: Device, bytes: u64, max_memory: Option<u64>) -> Arc<Ledger> {
        Arc::new(Ledger {
            device,
            source: BudgetSource::Fixed(bytes),
            cap: max_memory,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// A ledger whose free bytes come from `free` each time the budget is read (a
    /// device driver's figure, e.g. `cuMemGetInfo`). The budget is that free figure
    /// plus this ledger's live bytes (which the driver already counts as used), so
    /// `room()` = free − pending: every span must be taken before its memory is
    /// allocated and released after it is freed.
    pub fn with_free_source(
        device: Device,
        free: FreeBytes,
        max_memory: Option<u64>,
    ) -> Arc<Ledger> {
        Arc::new(Ledger {
            device,
            source: BudgetSource::Probe(free),
            cap: max_memory,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked while holding it; the
        // counters are updated atomically under the lock, so they are still valid.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device this ledger accounts for.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The `max_memory` cap, if any.
    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    fn budget_locked(&self, inner: &Inner) -> u64 {
        let free = match &self.source {
            BudgetSource::Device(d) => d.available_bytes(),
            BudgetSource::Fixed(b) => return self.capped(*b),
            // Live spans are already out of the driver's free figure; pending bytes
            // are not (nothing is allocated for them yet), so only live is added back
            // and a reservation lowers `room()` by its size.
            BudgetSource::Probe(f) => return self.capped(f().saturating_add(inner.live)),
        };
        // What the device can still give plus what we already hold. Reserved
        // (pending) bytes are not allocated yet, so they are still inside
        // `free`: adding them back would let a reservation leave `room()`
        // unchanged.
        self.capped(free.saturating_add(inner.live))
    }

    fn capped(&self, b: u64) -> u64 {
        self.cap.map_or(b, |c| b.min(c))
    }

    /// What the device can give this process in total, capped by `max_memory`.
    pub fn budget(&self) -> u64 {
        let inner = self.lock();
        self.budget_locked(&inner)
    }

    /// Bytes held by live spans.
    pub fn live(&self) -> u64 {
        self.lock().live
    }

    /// Bytes reserved but not yet allocated.
    pub fn pending(&self) -> u64 {
        self.lock().pending
    }

    fn room_locked(&self, inner: &Inner) -> u64 {
        self.budget_locked(inner)
            .saturating_sub(inner.live)
            .saturating_sub(inner.pending)
    }

    /// `budget − live − pending`, never negative.
    pub fn room(&self) -> u64 {
        let inner = self.lock();
        self.room_locked(&inner)
    }

    /// Reserves `bytes` for `owner` so that later allocations drawn from the
    /// reservation cannot be starved by others. Dropping it returns what is unused.
    pub fn reserve(
        self: &Arc<Self>,
        owner: &Owner,
        bytes: u64,
    ) -> Result<Reservation, LedgerError> {
        let mut inner = self.lock();
        let room = self.room_locked(&inner);
        if bytes > room {
            return Err(LedgerError::NoRoom {
                owner: owner.to_string(),
                kind: SpanKind::Resident,
                need: bytes,
                room,
            });
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.pending += bytes;
        inner.reservations.insert(id, (owner.clone(), bytes));
        Ok(Reservation {
            ledger: Arc::clone(self),
            id,
            owner: owner.clone(),
        })
    }

    /// A zeroed buffer of `len` elements for `owner`, if it fits in `room()`.
    pub fn alloc<T: Element>(
        self: &Arc<Self>,
        owner: &Owner,
        kind: SpanKind,
        len: usize,
    ) -> Result<Buffer<T>, LedgerError> {
        self.alloc_inner(owner, kind, len, None)
    }

    /// A buffer holding a copy of `data`, if it fits in `room()`.
    pub fn alloc_from<T: Element>(
        self: &Arc<Self>,
        owner: &Owner,
        kind: SpanKind,
        data: &[T],
    ) -> Result<Buffer<T>, LedgerError> {
        let mut buf = self.alloc_inner(owner, kind, data.len(), None)?;
        buf.copy_from_slice(data);
        Ok(buf)
    }

    fn alloc_inner<T: Element>(
        self: &Arc<Self>,
        owner: &Owner,
        kind: SpanKind,
        len: usize,
        from: Option<u64>,
    ) -> Result<Buffer<T>, LedgerError> {
        let fail = || LedgerError::AllocFailed {
            owner: owner.to_string(),
            len,
            elem_bytes: std::mem::size_of::<T>(),
        };
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(fail)? as u64;
        let id = self.open_span(owner, kind, bytes, from)?;
        match Buffer::zeroed(len) {
            Some(data) => Ok(Buffer::new(Arc::clone(self), id, data)),
            None => {
                self.release(id);
                Err(fail())
            }
        }
    }

    /// Records a span of `bytes` for `owner` (drawing from reservation `from` first)
    /// if it fits in `room()`; returns its id.
    fn open_span(
        &self,
        owner: &Owner,
        kind: SpanKind,
        bytes: u64,
        from: Option<u64>,
    ) -> Result<u64, LedgerError> {
        let mut inner = self.lock();
        // Bytes drawn from a reservation are already counted in `pending`.
        let drawn = match from.and_then(|r| inner.reservations.get_mut(&r)) {
            Some((_, left)) => {
                let d = (*left).min(bytes);
                *left -= d;
                d
            }
            None => 0,
        };
        inner.pending -= drawn;
        let extra = bytes - drawn;
        let room = self.room_locked(&inner);
        if extra > room {
            // Put the drawn bytes back before refusing.
            if let Some((_, left)) = from.and_then(|r| inner.reservations.get_mut(&r)) {
                *left += drawn;
            }
            inner.pending += drawn;
            return Err(LedgerError::NoRoom {
                owner: owner.to_string(),
                kind,
                need: bytes,
                room,
            });
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.live += bytes;
        inner.spans.insert(
            id,
            Span {
                owner: owner.clone(),
                kind,
                bytes,
            },
        );
        Ok(id)
    }

    /// A host-less span: `bytes` of memory that lives elsewhere (a device buffer)
    /// accounted as `live` under `owner` and `kind` until the guard drops. The caller
    /// takes the span *before* allocating the memory it stands for.
    pub fn span(
        self: &Arc<Self>,
        owner: &Owner,
        kind: SpanKind,
        bytes: u64,
    ) -> Result<SpanGuard, LedgerError> {
        let id = self.open_span(owner, kind, bytes, None)?;
        Ok(SpanGuard {
            ledger: Arc::clone(self),
            id,
            bytes,
        })
    }

    /// Returns a span's bytes; called by `Buffer`'s `Drop`.
    pub(crate) fn release(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(span) = inner.spans.remove(&id) {
            inner.live -= span.bytes;
        }
    }

    fn end_reservation(&self, id: u64) {
        let mut inner = self.lock();
        if let Some((_, left)) = inner.reservations.remove(&id) {
            inner.pending -= left;
        }
    }

    /// Confirms that `owner` holds nothing after its runtime closed.
    ///
    /// Buffers free themselves when dropped, so a sweep of a correctly closed
    /// runtime finds nothing and returns `Ok(0)`. A span that survived close (a
    /// leak) is reported as [`LedgerError::Leaked`]; the owner's unused
    /// reservations are dropped either way.
    pub fn sweep(&self, owner: &Owner) -> Result<u64, LedgerError> {
        let mut inner = self.lock();
        let reserved: Vec<u64> = inner
            .reservations
            .iter()
            .filter(|(_, (o, _))| o == owner)
            .map(|(id, _)| *id)
            .collect();
        let mut freed = 0;
        for id in reserved {
            if let Some((_, left)) = inner.reservations.remove(&id) {
                inner.pending -= left;
                freed += left;
            }
        }
        let (spans, bytes) = inner
            .spans
            .values()
            .filter(|s| &s.owner == owner)
            .fold((0usize, 0u64), |(n, b), s| (n + 1, b + s.bytes));
        if spans > 0 {
            return Err(LedgerError::Leaked {
                owner: owner.to_string(),
                spans,
                bytes,
            });
        }
        Ok(freed)
    }

    /// Bytes `owner` holds in live spans.
    pub fn owner_bytes(&self, owner: &Owner) -> u64 {
        self.lock()
            .spans
            .values()
            .filter(|s| &s.owner == owner)
            .map(|s| s.bytes)
            .sum()
    }

    /// Everything the ledger knows, taken under one lock.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let inner = self.lock();
        let mut owners: BTreeMap<&str, OwnerUsage> = BTreeMap::new();
        for span in inner.spans.values() {
            let u = owners
                .entry(span.owner.as_str())
                .or_insert_with(|| OwnerUsage {
                    owner: span.owner.to_string(),
                    kinds: BTreeMap::new(),
                    spans: 0,
                    bytes: 0,
                });
            *u.kinds.entry(span.kind).or_insert(0) += span.bytes;
            u.spans += 1;
            u.bytes += span.bytes;
        }
        LedgerSnapshot {
            device: self.device,
            budget: self.budget_locked(&inner),
            cap: self.cap,
            live: inner.live,
            pending: inner.pending,
            room: self.room_locked(&inner),
            owners: owners.into_values().collect(),
        }
    }
}

/// Bytes set aside for one owner; allocations drawn from it cannot be starved.
#[derive(Debug)]
pub struct Reservation {
    ledger: Arc<Ledger>,
    id: u64,
    owner: Owner,
}

impl Reservation {
    /// Allocates a zeroed buffer, drawing its bytes from this reservation first.
    pub fn alloc<T: Element>(&self, kind: SpanKind, len: usize) -> Result<Buffer<T>, LedgerError> {
        self.ledger
            .alloc_inner(&self.owner, kind, len, Some(self.id))
    }

    /// Bytes of this reservation not yet drawn.
    pub fn remaining(&self) -> u64 {
        self.ledger
            .lock()
            .reservations
            .get(&self.id)
            .map_or(0, |(_, b)| *b)
    }
}

impl Reservation {
    /// A host-less span (see [`Ledger::span`]) drawing its bytes from this reservation first.
    pub fn span(&self, kind: SpanKind, bytes: u64) -> Result<SpanGuard, LedgerError> {
        let id = self
            .ledger
            .open_span(&self.owner, kind, bytes, Some(self.id))?;
        Ok(SpanGuard {
            ledger: Arc::clone(&self.ledger),
            id,
            bytes,
        })
    }
}

/// A live host-less span; dropping it returns its bytes to the ledger.
#[derive(Debug)]
pub struct SpanGuard {
    ledger: Arc<Ledger>,
    id: u64,
    bytes: u64,
}

impl SpanGuard {
    /// Bytes accounted.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        self.ledger.release(self.id);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.ledger.end_reservation(self.id);
    }
}

/// The largest knob value in `min..=max` whose `bytes_for(knob)` fits `room()`.
///
/// `bytes_for` must not decrease as the knob grows (context length, tile size,
/// batch). When even `min` does not fit, the error names `request`.
pub fn fit(
    ledger: &Ledger,
    request: &str,
    min: usize,
    max: usize,
    bytes_for: impl Fn(usize) -> u64,
) -> Result<usize, LedgerError> {
    if min > max {
        return Err(LedgerError::EmptyRange {
            request: request.to_string(),
            min,
            max,
        });
    }
    let room = ledger.room();
    let need = bytes_for(min);
    if need > room {
        return Err(LedgerError::DoesNotFit {
            request: request.to_string(),
            need,
            room,
        });
    }
    let (mut lo, mut hi) = (min, max); // invariant: lo fits
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if bytes_for(mid) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

/// Parses a `max_memory` value: `32GiB`, `512MiB`, `8g`, `100m`, `2gb`, `64k`, or
/// a positive byte count. Units are binary (1 g = 2^30 bytes), case-insensitive.
/// An empty string means "uncapped" (`None`).
pub fn parse_max_memory(value: &str) -> Result<Option<u64>, LedgerError> {
    let bad = || LedgerError::BadMaxMemory {
        value: value.to_string(),
    };
    let v = value.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(bad());
    }
    Ok(Some(bytes))
}
