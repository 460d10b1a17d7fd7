//! favlo-codec: turns saved media files into the compressed downloads the daemon serves.
//!
//! - [`mp4_from_avi`]: MJPEG AVI (what the video pipelines save) to an H.264
//!   MP4 (constrained baseline, yuv420p, one track, the AVI's exact frame rate
//!   and size).
//! - [`wav_from_samples`]: float samples to 16-bit PCM WAV.
//! - [`flac_from_wav`]: 16-bit (8–24) PCM WAV to lossless FLAC.
//!
//! Key design choice: the containers (AVI reading, MP4 writing) are written
//! here, small and bounds-checked; the codecs are libraries (OpenH264 built
//! from source, so no system video library is needed; pure-Rust hound and
//! flacenc for audio). Every function takes and returns whole files in memory:
//! downloads are seconds of small video or minutes of audio.

mod audio;
pub mod avi;
mod error;
mod h264;
mod mp4;
mod sps;
mod yuv;

pub use audio::{flac_from_wav, wav_from_samples};
pub use error::CodecError;

/// OpenH264's largest picture: 3840 on the long side, 2160 on the short.
const MAX_LONG_SIDE: u32 = 3840;
const MAX_SHORT_SIDE: u32 = 2160;

/// MJPEG AVI -> MP4 (H.264, yuv420p, one video track at the AVI's frame rate
/// and size).
///
/// Odd widths/heights are padded by one repeated column/row for 4:2:0 and the
/// track header declares the source size; H.264 cropping works in 2-pixel
/// units for 4:2:0, so a decoder then outputs the padded even size. Even sizes
/// are exact: the picture is padded to whole macroblocks (and to at least
/// 16x16, OpenH264's minimum) and the SPS crops it back.
pub fn mp4_from_avi(avi: &[u8]) -> Result<Vec<u8>, CodecError> {
    let parsed = avi::parse(avi)?;
    let (width, height) = (parsed.width, parsed.height);
    if width.max(height) > MAX_LONG_SIDE || width.min(height) > MAX_SHORT_SIDE {
        return Err(CodecError::Avi {
            reason: format!(
                "picture {width}x{height} exceeds the H.264 encoder's {MAX_LONG_SIDE}x{MAX_SHORT_SIDE}"
            ),
        });
    }
    let pictures = parsed.frames.iter().enumerate().map(|(index, jpeg)| {
        // Check the JPEG's declared size before decoding, so a hostile header
        // cannot make the decoder allocate a huge picture.
        let reader = || {
            image::ImageReader::with_format(std::io::Cursor::new(jpeg), image::ImageFormat::Jpeg)
        };
        let (got_width, got_height) = reader()
            .into_dimensions()
            .map_err(|source| CodecError::Jpeg { index, source })?;
        if (got_width, got_height) != (width, height) {
            return Err(CodecError::FrameSize {
                index,
                width,
                height,
                got_width,
                got_height,
            });
        }
        let img = reader()
            .decode()
            .map_err(|source| CodecError::Jpeg { index, source })?
            .to_rgb8();
        if img.dimensions() != (width, height) {
            return Err(CodecError::FrameSize {
                index,
                width,
                height,
                got_width: img.width(),
                got_height: img.height(),
            });
        }
        Ok(yuv::rgb_to_i420(
            img.as_raw(),
            width as usize,
            height as usize,
        ))
    });
    let crop = (width + (width & 1), height + (height & 1));
    let stream = h264::encode(pictures, parsed.rate.fps(), crop)?;
    mp4::write(&mp4::Track {
        width,
        height,
        coded_width: crop.0,
        coded_height: crop.1,
        timescale: parsed.rate.rate,
        sample_delta: parsed.rate.scale,
        stream: &stream,
    })
}
