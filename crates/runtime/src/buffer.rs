//! Buffers: memory that exists only as a span of the [`Ledger`].
//!
//! Key design choice: a `Buffer<T>` has no public constructor. The only way to get
//! one is `Ledger::alloc*`, and dropping it returns its bytes to the ledger, so the
//! ledger's `live` figure is exact by construction.

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
