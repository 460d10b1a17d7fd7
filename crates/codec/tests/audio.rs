//! WAV and FLAC against independent decoders: hound reads the WAV back
//! (within 1/32767 of each float), claxon decodes the FLAC to exactly the
//! WAV's integer samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;

use favlo_codec::{CodecError, flac_from_wav, wav_from_samples};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Interleaved test audio: a chord per channel plus seeded noise, peaking
/// near full scale so clipping paths and large values are exercised.
fn tone(frames: usize, channels: u16, rate: u32, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(frames * channels as usize);
    for i in 0..frames {
        let t = i as f32 / rate as f32;
        for c in 0..channels {
            let f = 220.0 * (1.0 + c as f32 * 0.5);
            let s = 0.6 * (std::f32::consts::TAU * f * t).sin()
                + 0.3 * (std::f32::consts::TAU * 1.5 * f * t).sin()
                + rng.random_range(-0.05f32..0.05);
            out.push(s);
        }
    }
    out
}

fn wav_ints(wav: &[u8]) -> (hound::WavSpec, Vec<i32>) {
    let r = hound::WavReader::new(Cursor::new(wav)).unwrap();
    let spec = r.spec();
    (spec, r.into_samples::<i32>().map(Result::unwrap).collect())
}

fn claxon_ints(flac: &[u8]) -> (claxon::metadata::StreamInfo, Vec<i32>) {
    let mut r = claxon::FlacReader::new(Cursor::new(flac)).unwrap();
    let info = r.streaminfo();
    (info, r.samples().map(Result::unwrap).collect())
}

#[test]
fn wav_round_trip_within_one_step() {
    for (channels, rate) in [(1u16, 16_000u32), (2, 44_100)] {
        let x = tone(3001, channels, rate, u64::from(rate));
        let wav = wav_from_samples(rate, channels, &x).unwrap();
        assert_eq!(wav.len(), 44 + 2 * x.len());
        let (spec, ints) = wav_ints(&wav);
        assert_eq!(
            (spec.channels, spec.sample_rate, spec.bits_per_sample),
            (channels, rate, 16)
        );
        assert_eq!(spec.sample_format, hound::SampleFormat::Int);
        assert_eq!(ints.len(), x.len());
        for (i, (&got, &want)) in ints.iter().zip(&x).enumerate() {
            let err = (f64::from(got) / 32767.0 - f64::from(want.clamp(-1.0, 1.0))).abs();
            assert!(err <= 1.0 / 32767.0, "sample {i}: {got} vs {want}");
        }
    }
}

#[test]
fn wav_clamps_and_rejects_bad_input() {
    let wav = wav_from_samples(8000, 1, &[1.5, -2.0, 1.0, -1.0, 0.0]).unwrap();
    assert_eq!(wav_ints(&wav).1, vec![32767, -32767, 32767, -32767, 0]);
    assert!(matches!(
        wav_from_samples(8000, 1, &[0.0, f32::NAN]),
        Err(CodecError::Audio { .. })
    ));
    assert!(matches!(
        wav_from_samples(8000, 2, &[0.0; 3]),
        Err(CodecError::Audio { .. })
    ));
    assert!(matches!(
        wav_from_samples(0, 1, &[0.0]),
        Err(CodecError::Audio { .. })
    ));
    assert!(matches!(
        wav_from_samples(8000, 0, &[]),
        Err(CodecError::Audio { .. })
    ));
}

#[test]
fn flac_decodes_bit_exactly() {
    // Lengths off the 4096 block size, mono and stereo.
    for (frames, channels, rate) in [
        (10_007usize, 1u16, 22_050u32),
        (9_000, 2, 48_000),
        (100, 2, 8_000),
    ] {
        let wav = wav_from_samples(rate, channels, &tone(frames, channels, rate, 3)).unwrap();
        let flac = flac_from_wav(&wav).unwrap();
        let (_, want) = wav_ints(&wav);
        let (info, got) = claxon_ints(&flac);
        assert_eq!(
            (info.sample_rate, info.channels, info.bits_per_sample),
            (rate, u32::from(channels), 16)
        );
        assert_eq!(info.samples, Some(frames as u64));
        assert_eq!(got, want, "{frames} frames x {channels}");
        if frames > 1000 {
            // The seeded noise carries ~12 bits a sample, so about 0.8 is the floor.
            assert!(
                flac.len() < wav.len() * 9 / 10,
                "FLAC {} vs WAV {} bytes",
                flac.len(),
                wav.len()
            );
        }
    }
}

/// 24-bit integer WAVs (written by hound directly) also convert losslessly.
#[test]
fn flac_24_bit() {
    let mut rng = StdRng::seed_from_u64(9);
    let want: Vec<i32> = (0..6000)
        .map(|i| ((i as f64 * 0.01).sin() * 4_000_000.0) as i32 + rng.random_range(-300..300))
        .collect();
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 96_000,
        bits_per_sample: 24,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cur = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
    for &s in &want {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    let (info, got) = claxon_ints(&flac_from_wav(&cur.into_inner()).unwrap());
    assert_eq!(info.bits_per_sample, 24);
    assert_eq!(got, want);
}

#[test]
fn flac_rejects_bad_wavs() {
    assert!(matches!(
        flac_from_wav(b"not a wav file at all"),
        Err(CodecError::Wav { .. })
    ));
    let empty = wav_from_samples(8000, 1, &[]).unwrap();
    assert!(matches!(
        flac_from_wav(&empty),
        Err(CodecError::Audio { .. })
    ));
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 8000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut cur = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
    w.write_sample(0.5f32).unwrap();
    w.finalize().unwrap();
    assert!(matches!(
        flac_from_wav(&cur.into_inner()),
        Err(CodecError::Audio { .. })
    ));
    let wav = wav_from_samples(8000, 1, &tone(500, 1, 8000, 1)).unwrap();
    assert!(flac_from_wav(&wav[..wav.len() / 2]).is_err());
}

fn int_wav(channels: u16, rate: u32, bits: u16, frames: usize, seed: u64) -> (Vec<u8>, Vec<i32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let max = 1i32 << (bits - 1);
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cur = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
    let mut want = Vec::new();
    for i in 0..frames * channels as usize {
        let s = ((i as f64 * 0.003).sin() * f64::from(max) * 0.7) as i32
            + rng.random_range(-max / 64..max / 64);
        if bits == 8 {
            w.write_sample(s as i8).unwrap();
        } else {
            w.write_sample(s).unwrap();
        }
        want.push(s);
    }
    w.finalize().unwrap();
    (cur.into_inner(), want)
}

/// The edges of what FLAC (and flacenc) take: 8-bit and 8-channel streams
/// convert bit-exactly; 9 channels and rates above 96 kHz (flacenc's limit)
/// are named `CodecError::Flac` errors, not panics.
#[test]
fn flac_limits() {
    for (channels, rate, bits) in [(1u16, 8_000u32, 8u16), (8, 48_000, 16), (2, 96_000, 24)] {
        let (wav, want) = int_wav(channels, rate, bits, 3000, u64::from(rate));
        let (info, got) = claxon_ints(&flac_from_wav(&wav).unwrap());
        assert_eq!(
            (info.channels, info.bits_per_sample, info.sample_rate),
            (u32::from(channels), u32::from(bits), rate)
        );
        assert_eq!(got, want, "{channels} ch {bits} bit");
    }
    for (channels, rate) in [(9u16, 48_000u32), (2, 192_000)] {
        let (wav, _) = int_wav(channels, rate, 16, 1000, 1);
        assert!(
            matches!(flac_from_wav(&wav), Err(CodecError::Flac { .. })),
            "{channels} ch {rate} Hz"
        );
    }
}
