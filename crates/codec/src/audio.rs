//! Audio downloads: float samples to 16-bit PCM WAV (hound), WAV to FLAC (flacenc).
//!
//! Key design choice: the WAV is the master copy and FLAC is derived from its
//! integer samples, so the FLAC decodes bit-exactly to the WAV. Floats are
//! clamped to [-1, 1] and scaled by 32767 with round-to-nearest (symmetric, so
//! -1.0 and 1.0 map to -32767 and 32767); NaN/inf is an error, not silence.

use std::io::Cursor;

use flacenc::component::BitRepr;
use flacenc::error::Verify;

use crate::CodecError;

fn audio_err(reason: impl Into<String>) -> CodecError {
    CodecError::Audio {
        reason: reason.into(),
    }
}

/// A 16-bit PCM WAV of interleaved `samples` (each in [-1, 1]).
pub fn wav_from_samples(
    sample_rate: u32,
    channels: u16,
    samples: &[f32],
) -> Result<Vec<u8>, CodecError> {
    if sample_rate == 0 || channels == 0 {
        return Err(audio_err(format!(
            "sample rate {sample_rate} and channel count {channels} must be positive"
        )));
    }
    if !samples.len().is_multiple_of(usize::from(channels)) {
        return Err(audio_err(format!(
            "{} samples do not split into whole frames of {channels} channels",
            samples.len()
        )));
    }
    if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
        return Err(audio_err(format!("sample {i} is not finite")));
    }
    let spec = hound::WavSpec {
        channels,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cursor = Cursor::new(Vec::with_capacity(44 + 2 * samples.len()));
    let mut writer = hound::WavWriter::new(&mut cursor, spec)?;
    for &s in samples {
        writer.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)?;
    }
    writer.finalize()?;
    Ok(cursor.into_inner())
}

/// FLAC of a PCM WAV with integer samples of 8 to 24 bits (16 is the usual),
/// at most 8 channels and 96 kHz (flacenc's limits; beyond them `Flac` errors).
pub fn flac_from_wav(wav: &[u8]) -> Result<Vec<u8>, CodecError> {
    let reader = hound::WavReader::new(Cursor::new(wav))?;
    let spec = reader.spec();
    if spec.sample_format != hound::SampleFormat::Int || !(8..=24).contains(&spec.bits_per_sample) {
        return Err(audio_err(format!(
            "FLAC needs 8- to 24-bit integer PCM, the WAV is {:?} {}-bit",
            spec.sample_format, spec.bits_per_sample
        )));
    }
    let samples = reader
        .into_samples::<i32>()
        .collect::<Result<Vec<i32>, _>>()?;
    if samples.is_empty() {
        return Err(audio_err("the WAV holds no samples"));
    }
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| CodecError::Flac {
            reason: e.to_string(),
        })?;
    let source = flacenc::source::MemSource::from_samples(
        &samples,
        usize::from(spec.channels),
        usize::from(spec.bits_per_sample),
        spec.sample_rate as usize,
    );
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| CodecError::Flac {
            reason: e.to_string(),
        })?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream.write(&mut sink).map_err(|e| CodecError::Flac {
        reason: e.to_string(),
    })?;
    Ok(sink.into_inner())
}
