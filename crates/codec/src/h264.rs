//! H.264 encoding of I420 pictures with Cisco's OpenH264 (built from source).
//!
//! Key design choice: one encoder per video, constrained-baseline profile,
//! single thread and single slice (deterministic bytes for the same input),
//! frame skipping off (every input frame becomes one sample), quality-mode
//! rate control bounded by a QP range that keeps the picture close to the
//! source, and an IDR every two seconds so players can seek. The Annex B
//! output is split into NAL units here; SPS/PPS are lifted out of the samples
//! into the MP4 sample entry (`avcC`).

use openh264::OpenH264API;
use openh264::encoder::{
    BitRate, Encoder, EncoderConfig, FrameRate, FrameType, IntraFramePeriod, QpRange,
    RateControlMode, VuiConfig,
};
use openh264::formats::YUVSource;

use crate::CodecError;
use crate::sps;
use crate::yuv::I420;

/// NAL unit types (ITU-T H.264 Table 7-1) this module tells apart.
const NAL_IDR: u8 = 5;
const NAL_SPS: u8 = 7;
const NAL_PPS: u8 = 8;
const NAL_AUD: u8 = 9;

/// One encoded picture: its NAL units (no start codes) and whether it is an IDR.
#[derive(Debug, Clone)]
pub struct Sample {
    /// VCL and SEI NAL units, without parameter sets.
    pub nals: Vec<Vec<u8>>,
    /// True when the picture is an IDR (an MP4 sync sample).
    pub idr: bool,
}

/// The encoded stream: the parameter sets and one sample per input frame.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Sequence parameter set NAL (with its header byte).
    pub sps: Vec<u8>,
    /// Picture parameter set NAL (with its header byte).
    pub pps: Vec<u8>,
    /// One per frame, in order.
    pub samples: Vec<Sample>,
}

/// Splits an Annex B byte stream at its start codes (`00 00 01`, optionally
/// preceded by more zeros) into NAL units, dropping trailing zero bytes.
pub fn split_annex_b(bytes: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= bytes.len() {
        if bytes[i] == 0 && bytes[i + 1] == 0 && bytes[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut out = Vec::with_capacity(starts.len());
    for (k, &s) in starts.iter().enumerate() {
        let mut end = starts.get(k + 1).map_or(bytes.len(), |&n| n - 3);
        while end > s && bytes[end - 1] == 0 {
            end -= 1;
        }
        if end > s {
            out.push(&bytes[s..end]);
        }
    }
    out
}

/// The planes as the encoder reads them: tightly packed rows.
impl YUVSource for I420 {
    fn dimensions(&self) -> (usize, usize) {
        (self.width, self.height)
    }

    fn strides(&self) -> (usize, usize, usize) {
        (self.width, self.width / 2, self.width / 2)
    }

    fn y(&self) -> &[u8] {
        &self.y
    }

    fn u(&self) -> &[u8] {
        &self.u
    }

    fn v(&self) -> &[u8] {
        &self.v
    }
}

/// The encoder settings for a picture of `width x height` at `fps`.
fn config(width: usize, height: usize, fps: f64) -> EncoderConfig {
    // Bits per pixel per frame: 1.5 up to 256x256 (small generated pictures
    // carry fine grain), falling with the square root of the area above that
    // (1080p gets about 0.26, ~16 Mbit/s at 30 fps); QP is capped at 28.
    // OpenH264's rate control clips the frame rate to [1, 60] and budgets
    // bitrate / rate per frame, so the budget uses the same clipped rate.
    let pixels = (width * height).max(1) as f64;
    let bpp = (1.5 * (65_536.0 / pixels).sqrt()).clamp(0.2, 1.5);
    let rc_fps = fps.clamp(1.0, 60.0);
    let bps = (pixels * rc_fps * bpp).clamp(64_000.0, 50_000_000.0);
    let idr_every = (fps * 2.0).round().clamp(1.0, 600.0) as u32;
    EncoderConfig::new()
        .bitrate(BitRate::from_bps(bps as u32))
        .max_frame_rate(FrameRate::from_hz(rc_fps as f32))
        .rate_control_mode(RateControlMode::Off)
        .skip_frames(false)
        .qp(QpRange::new(10, 28))
        .intra_frame_period(IntraFramePeriod::from_num_frames(idr_every))
        .num_threads(1)
        .vui(VuiConfig::bt601())
}

fn enc_err(frame: usize, reason: impl Into<String>) -> CodecError {
    CodecError::Encode {
        frame,
        reason: reason.into(),
    }
}

/// Encodes `pictures` (all the same padded size) at `fps` frames per second;
/// the SPS declares the picture cropped to `crop` (even width, height).
pub fn encode(
    pictures: impl IntoIterator<Item = Result<I420, CodecError>>,
    fps: f64,
    crop: (u32, u32),
) -> Result<Stream, CodecError> {
    let mut encoder: Option<Encoder> = None;
    let mut sps: Option<Vec<u8>> = None;
    let mut pps: Option<Vec<u8>> = None;
    let mut samples = Vec::new();
    for (index, picture) in pictures.into_iter().enumerate() {
        let p = picture?;
        let enc = match &mut encoder {
            Some(e) => e,
            None => {
                let e = Encoder::with_api_config(
                    OpenH264API::from_source(),
                    config(p.width, p.height, fps),
                )
                .map_err(|e| enc_err(index, e.to_string()))?;
                encoder.insert(e)
            }
        };
        let millis = (index as f64 * 1000.0 / fps).round() as u64;
        let bits = enc
            .encode_at(&p, openh264::Timestamp::from_millis(millis))
            .map_err(|e| enc_err(index, e.to_string()))?;
        let frame_type = bits.frame_type();
        if matches!(frame_type, FrameType::Skip | FrameType::Invalid) {
            return Err(enc_err(
                index,
                format!("encoder returned a {frame_type:?} frame"),
            ));
        }
        let annex_b = bits.to_vec();
        let mut sample = Sample {
            nals: Vec::new(),
            idr: false,
        };
        for nal in split_annex_b(&annex_b) {
            let kind = nal[0] & 0x1f;
            match kind {
                NAL_SPS | NAL_PPS => {
                    let slot = if kind == NAL_SPS { &mut sps } else { &mut pps };
                    match slot {
                        None => *slot = Some(nal.to_vec()),
                        Some(prev) if prev.as_slice() == nal => {}
                        Some(_) => {
                            return Err(enc_err(index, "parameter sets changed mid-stream"));
                        }
                    }
                }
                NAL_AUD => {}
                _ => {
                    sample.idr |= kind == NAL_IDR;
                    sample.nals.push(nal.to_vec());
                }
            }
        }
        if sample.nals.is_empty() {
            return Err(enc_err(index, "no picture data in the encoder output"));
        }
        samples.push(sample);
    }
    let frames = samples.len();
    let (Some(sps), Some(pps)) = (sps, pps) else {
        return Err(enc_err(frames, "the encoder emitted no SPS/PPS"));
    };
    let sps = sps::with_crop(&sps, crop.0, crop.1)?;
    // Read the rewritten SPS back: the declared size must be the one asked for.
    let declared = sps::read(&sps)?.cropped();
    if declared != crop || sps.len() < 4 {
        return Err(enc_err(
            frames,
            format!("SPS declares {declared:?}, wanted {crop:?}"),
        ));
    }
    Ok(Stream { sps, pps, samples })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn annex_b_split() {
        let s = [
            0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 0, 1, 0x65, 0, 4, 0,
        ];
        let nals = split_annex_b(&s);
        assert_eq!(nals, vec![&[0x67, 1, 2][..], &[0x68, 3], &[0x65, 0, 4]]);
        assert!(split_annex_b(&[0, 0, 0]).is_empty());
    }
}
