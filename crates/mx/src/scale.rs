//! The E8M0 shared scale and the two rules that choose it for a block of 32 values.
//!
//! Design: the scale exponent is derived from the f32 bit pattern of the block's peak magnitude
//! (exponent field + a mantissa comparison), never from `log2`/`powf`, so it costs a few integer
//! ops per block. Both rules clamp into the representable E8M0 range 0..=254 (0xFF is NaN).

use crate::ElementFormat;

/// How the shared power of two of a block is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScaleRule {
    /// The predecessor's rule: the smallest power of two `2^e` with `peak / 2^e <= endpoint`
    /// (6 for E2M1, 448 for E4M3, 57344 for E5M2). Nothing clips.
    #[default]
    Ceil,
    /// OCP MX v1.0: `e = floor(log2(peak)) - emax_elem` (2 for E2M1, 8 for E4M3, 15 for E5M2).
    /// Values in the top binade above the endpoint saturate.
    Ocp,
}

/// Bias of the E8M0 scale: byte `s` means `2^(s - 127)`.
pub const E8M0_BIAS: i32 = 127;
/// Largest scale byte that is a number (0xFF is NaN).
pub const E8M0_MAX_BYTE: u8 = 254;

/// Decodes an E8M0 scale byte to `2^(byte - 127)`; `None` for 0xFF (NaN, not a scale).
/// Byte 0 is 2^-127, an f32 subnormal, represented exactly.
#[inline]
pub fn decode_e8m0(byte: u8) -> Option<f32> {
    match byte {
        0xFF => None,
        0 => Some(f32::from_bits(0x0040_0000)),
        b => Some(f32::from_bits(u32::from(b) << 23)),
    }
}

/// The E8M0 scale byte for a block whose peak magnitude has f32 bit pattern `amax_bits`
/// (sign cleared, finite). Zero, and any peak so small that the exponent would fall below the
/// E8M0 range, give byte 0.
#[inline(always)]
pub fn scale_byte(format: ElementFormat, rule: ScaleRule, amax_bits: u32) -> u8 {
    let exp_field = (amax_bits >> 23) as i32;
    if exp_field == 0 {
        // Zero or f32-subnormal peak: floor(log2) <= -127, so every rule lands below byte 0.
        return 0;
    }
    let (emax, endpoint_mant) = format.endpoint_bits();
    // floor(log2(peak)) - emax, as a biased E8M0 byte.
    let mut biased = exp_field - 127 - emax + E8M0_BIAS;
    if rule == ScaleRule::Ceil && (amax_bits & 0x007F_FFFF) > endpoint_mant {
        // The peak's mantissa is above the endpoint's: one more power of two is needed to fit.
        biased += 1;
    }
    biased.clamp(0, i32::from(E8M0_MAX_BYTE)) as u8
}
