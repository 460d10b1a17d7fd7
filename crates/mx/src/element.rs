//! MX element formats: FP4 E2M1, FP8 E4M3 (OCP "FN" flavour) and FP8 E5M2, as code <-> f32.
//!
//! Design: decoding is a table lookup (tables are built at compile time by `const fn`s from the bit
//! layout). Encoding is branch-light bit manipulation so it vectorizes inside `pack`: the normal
//! range rounds the f32 mantissa with the classic "add half-ulp minus one plus the kept LSB" trick,
//! the subnormal range lets the FPU do round-to-nearest-even by adding a power-of-two "magic"
//! constant whose ulp equals the target's subnormal spacing. Every public encoder matches
//! `ml_dtypes` bit-for-bit except where the crate contract says otherwise (see each function).

/// Bit-level description of a small IEEE-like float: `m` mantissa bits and exponent `bias`.
#[derive(Clone, Copy)]
struct Spec {
    m: u32,
    bias: i32,
}

const E4M3: Spec = Spec { m: 3, bias: 7 };
const E5M2: Spec = Spec { m: 2, bias: 15 };

/// 2^k as an f32 for k in -149..=127 (subnormal results for k < -126).
pub(crate) const fn pow2(k: i32) -> f32 {
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (k + 149))
    }
}

/// Decodes the magnitude bits (`code` without its sign) of a finite small float.
const fn decode_finite(spec: Spec, mag: u32) -> f32 {
    let exp = (mag >> spec.m) as i32;
    let mant = mag & ((1 << spec.m) - 1);
    if exp == 0 {
        mant as f32 * pow2(1 - spec.bias - spec.m as i32)
    } else {
        ((1 << spec.m) + mant) as f32 * pow2(exp - spec.bias - spec.m as i32)
    }
}

const fn with_sign(v: f32, neg: bool) -> f32 {
    if neg { -v } else { v }
}

const fn build_e4m3() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut c = 0usize;
    while c < 256 {
        let mag = (c & 0x7F) as u32;
        t[c] = if mag == 0x7F {
            f32::NAN
        } else {
            with_sign(decode_finite(E4M3, mag), c >= 0x80)
        };
        c += 1;
    }
    t
}

const fn build_e5m2() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut c = 0usize;
    while c < 256 {
        let mag = (c & 0x7F) as u32;
        t[c] = if mag == 0x7C {
            with_sign(f32::INFINITY, c >= 0x80)
        } else if mag > 0x7C {
            f32::NAN
        } else {
            with_sign(decode_finite(E5M2, mag), c >= 0x80)
        };
        c += 1;
    }
    t
}

static E4M3_TABLE: [f32; 256] = build_e4m3();
static E5M2_TABLE: [f32; 256] = build_e5m2();

/// FP4 E2M1 code -> value. Bit 3 is the sign; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
pub const FP4_E2M1_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Largest finite magnitudes of the element formats.
pub const FP4_E2M1_MAX: f32 = 6.0;
/// Largest finite OCP E4M3 magnitude (code 0x7E).
pub const FP8_E4M3_MAX: f32 = 448.0;
/// Largest finite E5M2 magnitude (code 0x7B).
pub const FP8_E5M2_MAX: f32 = 57344.0;

/// FP8 E4M3 code -> value for all 256 codes (0x7F and 0xFF are NaN).
pub fn fp8_e4m3_table() -> &'static [f32; 256] {
    &E4M3_TABLE
}

/// FP8 E5M2 code -> value for all 256 codes (0x7C/0xFC are ±inf, 0x7D..=0x7F and 0xFD..=0xFF NaN).
pub fn fp8_e5m2_table() -> &'static [f32; 256] {
    &E5M2_TABLE
}

/// Decodes an FP4 E2M1 code; only the low nibble is read.
#[inline]
pub fn decode_fp4_e2m1(code: u8) -> f32 {
    FP4_E2M1_VALUES[(code & 0x0F) as usize]
}

/// Decodes an FP8 E4M3 code (OCP E4M3FN: no infinities, 0x7F/0xFF are NaN).
#[inline]
pub fn decode_fp8_e4m3(code: u8) -> f32 {
    E4M3_TABLE[code as usize]
}

/// Decodes an FP8 E5M2 code (IEEE-like: has ±inf and NaNs).
#[inline]
pub fn decode_fp8_e5m2(code: u8) -> f32 {
    E5M2_TABLE[code as usize]
}

/// Rounds the magnitude bits `abs` of a non-NaN f32 to the small format `spec`, returning the
/// unclamped magnitude code (it may exceed the format's largest code; callers clamp).
#[inline(always)]
fn round_magnitude(spec: Spec, abs: u32) -> u32 {
    let shift = 23 - spec.m;
    // Normal range: RNE on the mantissa, then rebias the exponent. A mantissa carry moves into the
    // exponent, which is exactly the rounding-up behaviour we want.
    let rebias = ((127 - spec.bias) as u32) << spec.m;
    let normal =
        ((abs + ((1 << (shift - 1)) - 1) + ((abs >> shift) & 1)) >> shift).wrapping_sub(rebias);
    // Subnormal range: the ulp of `magic` equals the target's subnormal spacing, so the FPU's RNE
    // addition produces the subnormal mantissa count (up to 1 << m, i.e. the smallest normal).
    let magic = pow2(1 - spec.bias - spec.m as i32 + 23);
    let sub = (f32::from_bits(abs) + magic).to_bits() - magic.to_bits();
    let min_normal_bits = ((127 + 1 - spec.bias) as u32) << 23;
    if abs < min_normal_bits { sub } else { normal }
}

/// f32 -> FP8 E4M3 code with round-to-nearest-even. Saturates: anything whose rounded magnitude
/// exceeds 448 (including ±inf) becomes ±448 (0x7E/0xFE) — `ml_dtypes` would give NaN there, the
/// crate contract demands saturation. NaN becomes 0x7F (or 0xFF if its sign bit is set), as in
/// `ml_dtypes`.
#[inline]
pub fn encode_fp8_e4m3(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7FFF_FFFF;
    if abs > 0x7F80_0000 {
        return sign | 0x7F;
    }
    sign | round_magnitude(E4M3, abs).min(0x7E) as u8
}

/// f32 -> FP8 E5M2 code with round-to-nearest-even and IEEE overflow, matching `ml_dtypes`:
/// magnitudes that round above 57344 (i.e. >= 61440) and ±inf become ±inf (0x7C/0xFC); NaN becomes
/// 0x7E (0xFE with the sign bit). `pack` uses the saturating variant instead, so a finite weight
/// never turns into an infinity.
#[inline]
pub fn encode_fp8_e5m2(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7FFF_FFFF;
    if abs > 0x7F80_0000 {
        return sign | 0x7E;
    }
    sign | round_magnitude(E5M2, abs).min(0x7C) as u8
}

/// f32 -> FP8 E5M2 code, RNE, saturating finite overflow and ±inf to ±57344 (0x7B/0xFB).
/// NaN is encoded as in [`encode_fp8_e5m2`].
#[inline]
pub fn encode_fp8_e5m2_saturating(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7FFF_FFFF;
    if abs > 0x7F80_0000 {
        return sign | 0x7E;
    }
    sign | round_magnitude(E5M2, abs).min(0x7B) as u8
}

/// f32 -> FP4 E2M1 code with round-to-nearest-even, saturating to ±6 (±inf included), matching
/// `ml_dtypes.float4_e2m1fn`. E2M1 has no NaN: like `ml_dtypes` we encode NaN as a zero code whose
/// sign bit is the *inverse* of the NaN's sign bit (+NaN -> 0x8, -NaN -> 0x0); it decodes to ±0.
#[inline]
pub fn encode_fp4_e2m1(x: f32) -> u8 {
    let bits = x.to_bits();
    let abs = bits & 0x7FFF_FFFF;
    if abs > 0x7F80_0000 {
        return (((bits >> 31) ^ 1) << 3) as u8;
    }
    (((bits >> 28) & 0x8) | fp4_magnitude(f32::from_bits(abs))) as u8
}

/// Magnitude code (0..=7) of a non-negative, non-NaN value: count the RNE decision points passed.
/// A tie rounds to the neighbour with an even code, so the comparison is strict (`>`) where the
/// lower neighbour is even and inclusive (`>=`) where the upper one is.
#[inline(always)]
pub(crate) fn fp4_magnitude(a: f32) -> u32 {
    (a > 0.25) as u32
        + (a >= 0.75) as u32
        + (a > 1.25) as u32
        + (a >= 1.75) as u32
        + (a > 2.5) as u32
        + (a >= 3.5) as u32
        + (a > 5.0) as u32
}

/// FP8 E4M3 encode for `pack`: input known finite (NaN is rejected before), saturating.
#[inline(always)]
pub(crate) fn e4m3_finite(x: f32) -> u8 {
    let bits = x.to_bits();
    (((bits >> 24) & 0x80) | round_magnitude(E4M3, bits & 0x7FFF_FFFF).min(0x7E)) as u8
}

/// FP8 E5M2 encode for `pack`: input known finite, saturating to ±57344.
#[inline(always)]
pub(crate) fn e5m2_finite(x: f32) -> u8 {
    let bits = x.to_bits();
    (((bits >> 24) & 0x80) | round_magnitude(E5M2, bits & 0x7FFF_FFFF).min(0x7B)) as u8
}

/// FP4 E2M1 encode for `pack`: input known finite, saturating.
#[inline(always)]
pub(crate) fn e2m1_finite(x: f32) -> u8 {
    let bits = x.to_bits();
    (((bits >> 28) & 0x8) | fp4_magnitude(f32::from_bits(bits & 0x7FFF_FFFF))) as u8
}
