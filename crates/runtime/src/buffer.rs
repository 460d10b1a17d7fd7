//! Buffers: memory that exists only as a span of the [`Ledger`].
//!
//! Key design choice: a `Buffer<T>` has no public constructor. The only way to get
//! one is `Ledger::alloc*`, and dropping it returns its bytes to the ledger, so the
//! ledger's `live` figure is exact by construction.
//!
//! Large buffers (≥ [`HUGE_PAGE_MIN`]) are marked for transparent huge pages before
//! their first touch: decode streams every weight byte once per token, and with 4 KiB
//! pages each page costs a TLB walk (a small chat model's decode ran 13–36% faster
//! with 2 MiB pages on this project's 2-core test host).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::ledger::Ledger;

mod sealed {
    pub trait Sealed {}
}

/// Plain element types a buffer may hold (all-zero bits is a valid zero).
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The zero value.
    const ZERO: Self;
}

macro_rules! element {
    ($($t:ty => $zero:expr),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const ZERO: Self = $zero; }
    )*};
}

element! {
    f32 => 0.0,
    f64 => 0.0,
    half::bf16 => half::bf16::ZERO,
    half::f16 => half::f16::ZERO,
    u8 => 0,
    i8 => 0,
    u16 => 0,
    u32 => 0,
    i32 => 0,
}

/// Buffers of at least this many bytes ask for transparent huge pages.
pub const HUGE_PAGE_MIN: usize = 4 << 20;

/// Ask the kernel to back `[addr, addr + bytes)` (not yet touched) with transparent
/// huge pages. Advisory: where the kernel has THP off or lacks it, nothing changes.
fn advise_huge_pages(addr: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = addr.next_multiple_of(PAGE);
        let end = (addr + bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range lies inside an allocation this process owns and has
            // not yet touched; MADV_HUGEPAGE changes only how it is backed, never its
            // contents or validity, and a failure (e.g. THP unsupported) is harmless.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, bytes);
}

/// A ledger-accounted host buffer of `T`.
pub struct Buffer<T: Element> {
    ledger: Arc<Ledger>,
    id: u64,
    data: Vec<T>,
}

impl<T: Element> Buffer<T> {
    pub(crate) fn new(ledger: Arc<Ledger>, id: u64, data: Vec<T>) -> Self {
        Buffer { ledger, id, data }
    }

    /// A zeroed vector, or `None` when the host allocator refuses.
    pub(crate) fn zeroed(len: usize) -> Option<Vec<T>> {
        let mut v = Vec::new();
        v.try_reserve_exact(len).ok()?;
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= HUGE_PAGE_MIN {
            advise_huge_pages(v.as_mut_ptr() as usize, bytes);
        }
        v.resize(len, T::ZERO);
        Some(v)
    }

    /// Bytes this buffer accounts for.
    pub fn bytes(&self) -> u64 {
        (self.data.len() * std::mem::size_of::<T>()) as u64
    }
}

impl<T: Element> Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T: Element> Drop for Buffer<T> {
    fn drop(&mut self) {
        self.ledger.release(self.id);
    }
}

impl<T: Element> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("span", &self.id)
            .field("len", &self.data.len())
            .field("elem", &std::any::type_name::<T>())
            .finish()
    }
}
