//! favlo-mx: OCP Microscaling (MX v1.0) element formats, E8M0 block scales, and Favlo's packed
//! row layout for MXFP4 / MXFP8 weights.
//!
//! Design: no dependencies. Element codecs are exact (checked against `ml_dtypes` golden tables),
//! decoding is by table, encoding by bit manipulation; the scale exponent comes from f32 exponent
//! bits. `pack` is multi-threaded over row chunks with `std::thread::scope`. The layout puts a
//! 128-byte-aligned data plane (codes) before a 128-byte-aligned scale plane (one E8M0 byte per
//! 32 values along K); see README.md for the diagram.

mod element;
mod error;
mod layout;
mod pack;
mod scale;

pub use element::{
    FP4_E2M1_MAX, FP4_E2M1_VALUES, FP8_E4M3_MAX, FP8_E5M2_MAX, decode_fp4_e2m1, decode_fp8_e4m3,
    decode_fp8_e5m2, encode_fp4_e2m1, encode_fp8_e4m3, encode_fp8_e5m2, encode_fp8_e5m2_saturating,
    fp8_e4m3_table, fp8_e5m2_table,
};
pub use error::MxError;
pub use layout::{MxLayout, MxView};
pub use pack::{pack, pack_with_threads, quantize_block};
pub use scale::{E8M0_BIAS, E8M0_MAX_BYTE, ScaleRule, decode_e8m0, scale_byte};

/// Number of values that share one E8M0 scale.
pub const BLOCK: usize = 32;

/// The element type of an MX matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementFormat {
    /// FP4 E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; two codes per byte, low nibble first.
    Fp4E2M1,
    /// FP8 E4M3 (OCP E4M3FN): max 448, no infinities, 0x7F/0xFF NaN.
    Fp8E4M3,
    /// FP8 E5M2: max 57344, IEEE-like infinities and NaNs.
    Fp8E5M2,
}

impl ElementFormat {
    /// Largest finite element magnitude (the `Ceil` rule's endpoint).
    pub fn max_value(self) -> f32 {
        match self {
            ElementFormat::Fp4E2M1 => FP4_E2M1_MAX,
            ElementFormat::Fp8E4M3 => FP8_E4M3_MAX,
            ElementFormat::Fp8E5M2 => FP8_E5M2_MAX,
        }
    }

    /// `emax_elem` of the OCP spec: the exponent of the largest normal element (floor(log2(max))).
    pub fn emax(self) -> i32 {
        self.endpoint_bits().0
    }

    /// Mantissa bits of the element format.
    pub fn mantissa_bits(self) -> u32 {
        match self {
            ElementFormat::Fp4E2M1 => 1,
            ElementFormat::Fp8E4M3 => 3,
            ElementFormat::Fp8E5M2 => 2,
        }
    }

    /// Bits per element code (4 or 8).
    pub fn bits(self) -> usize {
        match self {
            ElementFormat::Fp4E2M1 => 4,
            ElementFormat::Fp8E4M3 | ElementFormat::Fp8E5M2 => 8,
        }
    }

    /// Decodes one element code (for FP4 only the low nibble is read).
    pub fn decode(self, code: u8) -> f32 {
        match self {
            ElementFormat::Fp4E2M1 => decode_fp4_e2m1(code),
            ElementFormat::Fp8E4M3 => decode_fp8_e4m3(code),
            ElementFormat::Fp8E5M2 => decode_fp8_e5m2(code),
        }
    }

    /// (emax, f32 mantissa field of the endpoint): 6 = 1.5·2², 448 = 1.75·2⁸, 57344 = 1.75·2¹⁵.
    pub(crate) fn endpoint_bits(self) -> (i32, u32) {
        match self {
            ElementFormat::Fp4E2M1 => (2, 0x0040_0000),
            ElementFormat::Fp8E4M3 => (8, 0x0060_0000),
            ElementFormat::Fp8E5M2 => (15, 0x0060_0000),
        }
    }
}
