//! The CUDA benchmarks behind `favlo bench kernels|decode|prefill --device cuda`: the
//! MX GEMV beside the device-to-device copy ceiling ([`gemv_bench`]), the batch-1 decode
//! of a Qwen3-8B-shaped model with random MX weights beside its HBM roofline
//! ([`decode_bench`]) and that model's prefill GEMMs beside the FP8 tensor-core rate
//! ([`prefill_bench`]).
//!
//! Key design choice: every figure is set against a ceiling measured in the same run
//! on the same device (the copy bandwidth, read + written bytes), and every kernel is
//! checked against a reference before it is timed, so a wrong kernel is an error, not
//! a fast number. The data is random from a fixed seed (a small xorshift generator
//! here, so the library needs no `rand`), so two runs time the same bytes.

mod decode;
mod decode_fused;
mod decode_parts;
mod gemv;
mod placement;
mod prefill;

pub use decode::{
    AltGemv, AttnMode, DecodeBench, DecodeBenchOptions, PartSet, SKIP_PARTS, decode_bench,
    parse_parts,
};
pub use decode_parts::{DecodeParts, PartRow};
pub use gemv::{
    ChainRow, GemvBench, GemvBenchOptions, GemvCase, GemvRow, GemvVariant, READ_CEILING,
    chain_bench, gemv_bench,
};
pub use placement::{PAD_MAX_KIB, Pad, PadKind, PadWhere};
pub use prefill::{
    FP8_PEAK_TFLOPS, PrefillBench, PrefillBenchOptions, PrefillRow, prefill_bench, tflops,
};

use super::CudaError;
use favlo_mx::{ElementFormat, MxError, MxLayout};

/// Errors of the CUDA benchmarks.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A device call failed.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A random weight did not form a valid MX matrix.
    #[error(transparent)]
    Mx(#[from] MxError),
    /// A kernel's output disagreed with its reference before timing.
    #[error("{what}: max relative error {rel_err:.2e} exceeds {tolerance:.0e}")]
    Mismatch {
        what: String,
        rel_err: f64,
        tolerance: f64,
    },
    /// The options cannot describe a run.
    #[error("benchmark options: {0}")]
    Options(String),
}

/// A xorshift64* generator: deterministic per seed, fast enough for gigabytes.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    pub(crate) fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// Uniform in lo..=hi.
    pub(crate) fn byte_in(&mut self, lo: u8, hi: u8) -> u8 {
        let span = u64::from(hi - lo) + 1;
        lo + (self.next_u64() % span) as u8
    }

    pub(crate) fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let w = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
}

/// A random packed MX matrix in the favlo-mx layout (`cols` even): data codes uniform
/// over the real columns (E4M3 NaN codes 0x7F/0xFF turned into 0x7E/0xFE), K padding zero, E8M0
/// scales uniform in `scales` on the real blocks and zero on padding blocks.
pub(crate) fn random_mx(
    format: ElementFormat,
    rows: usize,
    cols: usize,
    scales: (u8, u8),
    rng: &mut Rng,
) -> (MxLayout, Vec<u8>) {
    let layout = MxLayout { format, rows, cols };
    let mut b = vec![0u8; layout.total_bytes()];
    let real_bytes = match format {
        ElementFormat::Fp4E2M1 => cols.div_ceil(2),
        _ => cols,
    };
    let blocks = cols.div_ceil(32);
    for r in 0..rows {
        let row = &mut b[r * layout.data_row_bytes()..][..real_bytes];
        rng.fill(row);
        if format == ElementFormat::Fp8E4M3 {
            row.iter_mut()
                .filter(|v| (**v & 0x7f) == 0x7f)
                .for_each(|v| *v &= 0xfe);
        }
        let s = &mut b[layout.scale_offset() + r * layout.scale_row_bytes()..][..blocks];
        s.iter_mut()
            .for_each(|v| *v = rng.byte_in(scales.0, scales.1));
    }
    (layout, b)
}

/// The format's name in tables: MXFP4, MXFP8.
pub fn format_name(format: ElementFormat) -> &'static str {
    match format {
        ElementFormat::Fp4E2M1 => "MXFP4",
        ElementFormat::Fp8E4M3 => "MXFP8",
        ElementFormat::Fp8E5M2 => "MXFP8 E5M2",
    }
}

/// `mxfp4` → MXFP4, `mxfp8` → MXFP8 (E4M3): the weight formats the benchmarks take.
pub fn mx_format(name: &str) -> Option<ElementFormat> {
    match name.trim().to_ascii_lowercase().as_str() {
        "mxfp4" => Some(ElementFormat::Fp4E2M1),
        "mxfp8" => Some(ElementFormat::Fp8E4M3),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{Rng, mx_format, random_mx};
    use favlo_mx::{ElementFormat, MxView};

    /// Root mean square of the dequantized matrix (scales included), in f64.
    fn rms(format: ElementFormat, scales: (u8, u8), seed: u64) -> f64 {
        let (layout, bytes) = random_mx(format, 64, 4096, scales, &mut Rng::new(seed));
        let w = MxView::new(layout, &bytes).unwrap().dequantize();
        assert!(
            w.iter().all(|v| v.is_finite()),
            "{format:?}: a NaN/inf code"
        );
        (w.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / w.len() as f64).sqrt()
    }

    #[test]
    fn random_matrices_are_valid_and_padded_with_zeros() {
        for format in [ElementFormat::Fp4E2M1, ElementFormat::Fp8E4M3] {
            // 300 columns: 10 blocks, the last one partly padding.
            let (layout, bytes) = random_mx(format, 45, 300, (119, 133), &mut Rng::new(3));
            let view = MxView::new(layout, &bytes).unwrap();
            let real = if format == ElementFormat::Fp4E2M1 {
                150
            } else {
                300
            };
            for r in 0..45 {
                let data = view.row_data(r);
                assert!(data[..real].iter().any(|b| *b != 0));
                assert!(data[real..].iter().all(|b| *b == 0), "data padding");
                if format == ElementFormat::Fp8E4M3 {
                    assert!(data.iter().all(|b| b & 0x7f != 0x7f), "E4M3 NaN code");
                }
                let s = view.row_scales(r);
                assert!(s[..10].iter().all(|b| (119..=133).contains(b)));
                assert!(s[10..].iter().all(|b| *b == 0), "scale padding");
            }
        }
    }

    #[test]
    fn decode_bench_scales_give_both_formats_similar_magnitudes() {
        // The decode bench's scales (FP4 2^-9..2^-7, E4M3 2^-14..2^-12) should put both
        // formats' weights at about the same rms, so the activations stay O(1) in both.
        let fp4 = rms(ElementFormat::Fp4E2M1, (118, 120), 1);
        let fp8 = rms(ElementFormat::Fp8E4M3, (113, 115), 2);
        assert!((0.005..0.03).contains(&fp4), "fp4 rms {fp4}");
        let ratio = fp8 / fp4;
        assert!((0.5..2.0).contains(&ratio), "fp8/fp4 rms ratio {ratio}");
    }

    #[test]
    fn generator_is_deterministic_and_uniform() {
        let a: Vec<u64> = (0..4)
            .scan(Rng::new(9), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(Rng::new(9), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        let mut r = Rng::new(5);
        let n = 100_000;
        let mean = (0..n).map(|_| f64::from(r.uniform(-1.0, 1.0))).sum::<f64>() / n as f64;
        // Uniform on [-1, 1): standard error of the mean 0.577/sqrt(n) ≈ 1.8e-3.
        assert!(mean.abs() < 0.01, "mean {mean}");
        let mut hits = [0usize; 3];
        for _ in 0..30_000 {
            hits[usize::from(r.byte_in(118, 120) - 118)] += 1;
        }
        assert!(hits.iter().all(|h| (9_000..11_000).contains(h)), "{hits:?}");
    }

    #[test]
    fn weight_names() {
        assert_eq!(mx_format("MXFP4"), Some(ElementFormat::Fp4E2M1));
        assert_eq!(mx_format("mxfp8"), Some(ElementFormat::Fp8E4M3));
        assert_eq!(mx_format("f16"), None);
    }
}
