//! Packing float samples as 16-bit PCM: WAV (`hound`) and FLAC (`flacenc`).
//!
//! Key design choice: one quantizer for both formats, `round(clamp(x, −1, 1) ·
//! 32767)`, so a FLAC decodes to exactly the WAV's samples; no normalisation
//! (the voice's own loudness is kept).

use std::io::Cursor;

use crate::error::VitsError;

/// `round(clamp(x, −1, 1) · 32767)` per sample.
pub fn to_i16(samples: &[f32]) -> Vec<i16> {
    samples
        .iter()
        .map(|x| (x.clamp(-1.0, 1.0) * 32767.0).round() as i16)
        .collect()
}

fn fail(format: &str, e: impl std::fmt::Display) -> VitsError {
    VitsError::Checkpoint {
        path: format!("<{format} encoder>").into(),
        reason: e.to_string(),
    }
}

/// A mono 16-bit PCM WAV file.
pub fn wav(samples: &[f32], sample_rate: u32) -> Result<Vec<u8>, VitsError> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cur = Cursor::new(Vec::with_capacity(44 + 2 * samples.len()));
    {
        let mut w = hound::WavWriter::new(&mut cur, spec).map_err(|e| fail("wav", e))?;
        let mut w16 = w.get_i16_writer(samples.len() as u32);
        for s in to_i16(samples) {
            w16.write_sample(s);
        }
        w16.flush().map_err(|e| fail("wav", e))?;
        w.finalize().map_err(|e| fail("wav", e))?;
    }
    Ok(cur.into_inner())
}

/// A mono 16-bit FLAC file.
pub fn flac(samples: &[f32], sample_rate: u32) -> Result<Vec<u8>, VitsError> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let ints: Vec<i32> = to_i16(samples).into_iter().map(i32::from).collect();
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| fail("flac", format!("{e:?}")))?;
    let source = flacenc::source::MemSource::from_samples(&ints, 1, 16, sample_rate as usize);
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| fail("flac", format!("{e:?}")))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| fail("flac", format!("{e:?}")))?;
    Ok(sink.as_slice().to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tone() -> Vec<f32> {
        (0..5000)
            .map(|i| 0.6 * (i as f32 * 0.07).sin() + if i == 7 { 3.0 } else { 0.0 })
            .collect()
    }

    #[test]
    fn wav_round_trips_through_hound() {
        let x = tone();
        let bytes = wav(&x, 22050).unwrap();
        let mut r = hound::WavReader::new(Cursor::new(bytes)).unwrap();
        assert_eq!(r.spec().sample_rate, 22050);
        assert_eq!(r.spec().channels, 1);
        let got: Vec<i16> = r.samples::<i16>().map(|s| s.unwrap()).collect();
        assert_eq!(got, to_i16(&x));
        assert_eq!(got[7], 32767); // clamped
    }

    #[test]
    fn flac_decodes_to_the_wav_samples() {
        let x = tone();
        let bytes = flac(&x, 22050).unwrap();
        assert_eq!(&bytes[..4], b"fLaC");
        let mut r = claxon::FlacReader::new(Cursor::new(bytes)).unwrap();
        assert_eq!(r.streaminfo().sample_rate, 22050);
        let got: Vec<i16> = r.samples().map(|s| s.unwrap() as i16).collect();
        assert_eq!(got, to_i16(&x));
    }
}
