//! The runtime's GGUF block decoders (`cpu::gguf_dot::dequantize_row`, which the native
//! kernels' layouts follow) against `favlo-formats`' independent decoders, bit-exact,
//! on random blocks of every type the native path keeps (f16 scale fields set to
//! finite values, everything else random bytes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use favlo_formats::gguf::{GgmlType, dequantize};
use favlo_runtime::cpu::gguf_dot::{GgufType, dequantize_row};

#[test]
fn runtime_decoders_equal_formats_decoders() {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut byte = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 24) as u8
    };
    let pairs = [
        (GgufType::Q4_0, GgmlType::Q4_0, &[0usize][..]),
        (GgufType::Q4_1, GgmlType::Q4_1, &[0, 2]),
        (GgufType::Q5_0, GgmlType::Q5_0, &[0]),
        (GgufType::Q5_1, GgmlType::Q5_1, &[0, 2]),
        (GgufType::Q8_0, GgmlType::Q8_0, &[0]),
        (GgufType::Q4_K, GgmlType::Q4_K, &[0, 2]),
        (GgufType::Q5_K, GgmlType::Q5_K, &[0, 2]),
        (GgufType::Q6_K, GgmlType::Q6_K, &[208]),
    ];
    for (ours, theirs, f16_at) in pairs {
        let blocks = 6;
        let n = blocks * ours.block_size();
        let mut data: Vec<u8> = (0..blocks * ours.type_size()).map(|_| byte()).collect();
        for b in data.chunks_exact_mut(ours.type_size()) {
            for &at in f16_at {
                // A finite f16 with a random mantissa and a modest exponent.
                let bits = 0x2000u16 | (u16::from(b[at]) << 2) | u16::from(b[at + 1] & 0x80) << 8;
                b[at..at + 2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        let mut want = vec![0f32; n];
        dequantize(theirs, &data, n, &mut want).unwrap();
        let mut got = vec![0f32; n];
        dequantize_row(ours, &data, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{ours:?} element {i}: {g} vs {w}");
        }
        assert!(want.iter().any(|v| *v != 0.0));
    }
}
