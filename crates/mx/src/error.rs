//! Errors of the MX crate (hand-written `std::error::Error`: this crate has no dependencies).

use std::fmt;

/// What can go wrong when packing or viewing MX data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MxError {
    /// The f32 input does not hold `rows * cols` values.
    InputLength { expected: usize, actual: usize },
    /// A byte buffer is not exactly `layout.total_bytes()` long.
    BufferLength { expected: usize, actual: usize },
    /// `rows * cols` or the packed size overflows `usize`.
    TooLarge { rows: usize, cols: usize },
    /// An input value is NaN or infinite; an MX block has no finite scale for it.
    NonFinite { row: usize, col: usize },
}

impl fmt::Display for MxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MxError::InputLength { expected, actual } => {
                write!(
                    f,
                    "mx pack input holds {actual} values, expected {expected}"
                )
            }
            MxError::BufferLength { expected, actual } => {
                write!(f, "mx buffer is {actual} bytes, layout needs {expected}")
            }
            MxError::TooLarge { rows, cols } => {
                write!(f, "mx layout {rows}x{cols} overflows the address space")
            }
            MxError::NonFinite { row, col } => {
                write!(f, "mx pack input is not finite at row {row}, column {col}")
            }
        }
    }
}

impl std::error::Error for MxError {}
