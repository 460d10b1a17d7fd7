//! Minimal protobuf wire-format decoder: varints, fixed32/64 and length-delimited
//! fields, with unknown fields skipped.
//!
//! Key design choice: a [`WireReader`] is a cursor over a borrowed byte slice that
//! checks every length against the bytes that remain, and it reports byte offsets
//! relative to the whole buffer so that the caller can keep zero-copy ranges into
//! the memory map. Groups (wire types 3 and 4, deprecated since proto2) are refused.

/// One decoded field value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireValue {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1 (little-endian 8 bytes).
    Fixed64(u64),
    /// Wire type 2: absolute byte range `start..end` in the reader's base buffer.
    Bytes { start: usize, end: usize },
    /// Wire type 5 (little-endian 4 bytes).
    Fixed32(u32),
}

/// A malformed wire encoding; `at` is the absolute byte offset of the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("varint at byte {at} is longer than 10 bytes or runs past the end")]
    BadVarint { at: usize },
    #[error("field at byte {at} has unsupported wire type {wire_type}")]
    BadWireType { at: usize, wire_type: u8 },
    #[error("field at byte {at} has field number 0")]
    ZeroField { at: usize },
    #[error("field at byte {at} needs {need} bytes, only {have} remain")]
    Truncated { at: usize, need: u64, have: usize },
}

/// A cursor over `base[pos..end]`.
#[derive(Clone, Copy, Debug)]
pub struct WireReader<'a> {
    base: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> WireReader<'a> {
    /// A reader over the whole buffer.
    pub fn new(base: &'a [u8]) -> Self {
        WireReader {
            base,
            pos: 0,
            end: base.len(),
        }
    }

    /// A reader over the sub-range `start..end` of the same base buffer (as
    /// returned in [`WireValue::Bytes`]); offsets stay absolute.
    pub fn sub(&self, start: usize, end: usize) -> Self {
        let end = end.min(self.base.len());
        WireReader {
            base: self.base,
            pos: start.min(end),
            end,
        }
    }

    /// The base buffer.
    pub fn base(&self) -> &'a [u8] {
        self.base
    }

    /// True when every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.end
    }

    /// Reads one base-128 varint.
    pub fn varint(&mut self) -> Result<u64, WireError> {
        let at = self.pos;
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.base.get(self.pos).filter(|_| self.pos < self.end) else {
                return Err(WireError::BadVarint { at });
            };
            self.pos += 1;
            // The tenth byte may only contribute the top bit.
            if i == 9 && b > 1 {
                return Err(WireError::BadVarint { at });
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::BadVarint { at })
    }

    fn take(&mut self, n: u64, at: usize) -> Result<(usize, usize), WireError> {
        let have = self.end - self.pos;
        if n > have as u64 {
            return Err(WireError::Truncated { at, need: n, have });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok((start, self.pos))
    }

    fn fixed<const N: usize>(&mut self, at: usize) -> Result<[u8; N], WireError> {
        let (s, e) = self.take(N as u64, at)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.base[s..e]);
        Ok(out)
    }

    /// Reads the next `(field number, value)` or `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, WireValue)>, WireError> {
        if self.is_empty() {
            return Ok(None);
        }
        let at = self.pos;
        let key = self.varint()?;
        let wire_type = (key & 7) as u8;
        let field = key >> 3;
        if field == 0 {
            return Err(WireError::ZeroField { at });
        }
        let field = u32::try_from(field).unwrap_or(u32::MAX);
        let value = match wire_type {
            0 => WireValue::Varint(self.varint()?),
            1 => WireValue::Fixed64(u64::from_le_bytes(self.fixed::<8>(at)?)),
            2 => {
                let len = self.varint()?;
                let (start, end) = self.take(len, at)?;
                WireValue::Bytes { start, end }
            }
            5 => WireValue::Fixed32(u32::from_le_bytes(self.fixed::<4>(at)?)),
            other => {
                return Err(WireError::BadWireType {
                    at,
                    wire_type: other,
                });
            }
        };
        Ok(Some((field, value)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields() {
        // field 1 varint 300, field 2 bytes "hi", field 3 fixed32 7, field 4 varint -1 (10 bytes)
        let mut buf = vec![
            0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x1d, 7, 0, 0, 0, 0x20,
        ];
        buf.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        let mut r = WireReader::new(&buf);
        assert_eq!(r.next_field().unwrap(), Some((1, WireValue::Varint(300))));
        assert_eq!(
            r.next_field().unwrap(),
            Some((2, WireValue::Bytes { start: 5, end: 7 }))
        );
        assert_eq!(r.next_field().unwrap(), Some((3, WireValue::Fixed32(7))));
        assert_eq!(
            r.next_field().unwrap(),
            Some((4, WireValue::Varint(u64::MAX)))
        );
        assert_eq!(r.next_field().unwrap(), None);
    }

    #[test]
    fn truncation_and_bad_types_are_errors() {
        assert!(matches!(
            WireReader::new(&[0x12, 5, 1]).next_field(),
            Err(WireError::Truncated {
                need: 5,
                have: 1,
                ..
            })
        ));
        assert!(matches!(
            WireReader::new(&[0x0b]).next_field(),
            Err(WireError::BadWireType { wire_type: 3, .. })
        ));
        assert!(matches!(
            WireReader::new(&[0x08, 0x80]).next_field(),
            Err(WireError::BadVarint { .. })
        ));
        assert!(matches!(
            WireReader::new(&[0x00, 0x01]).next_field(),
            Err(WireError::ZeroField { .. })
        ));
    }
}
