//! The crate's one error type.
//!
//! Key design choice: each variant names the input that was wrong (which chunk,
//! which frame, which sample) in structured fields, so the daemon can log or
//! return it without parsing a message.

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The AVI container is malformed, truncated or not a single MJPEG stream.
    #[error("bad AVI: {reason}")]
    Avi {
        /// What was wrong, with the offset where it applies.
        reason: String,
    },
    /// A video frame's JPEG could not be decoded.
    #[error("frame {index}: JPEG decode failed: {source}")]
    Jpeg {
        /// Zero-based frame number in the AVI.
        index: usize,
        /// The decoder's error.
        source: image::ImageError,
    },
    /// A video frame's size differs from the size the AVI header declares.
    #[error("frame {index} is {got_width}x{got_height}, the AVI declares {width}x{height}")]
    FrameSize {
        /// Zero-based frame number in the AVI.
        index: usize,
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The JPEG's width.
        got_width: u32,
        /// The JPEG's height.
        got_height: u32,
    },
    /// The H.264 encoder failed or produced a stream this muxer cannot carry.
    #[error("H.264 encode failed at frame {frame}: {reason}")]
    Encode {
        /// Zero-based frame number being encoded.
        frame: usize,
        /// The encoder's message or what was missing from its output.
        reason: String,
    },
    /// The MP4 would exceed a field width of the container (e.g. a 32-bit size).
    #[error("MP4 too large: {what}")]
    Mp4TooLarge {
        /// Which field overflowed.
        what: &'static str,
    },
    /// Reading or writing a WAV failed.
    #[error("WAV: {source}")]
    Wav {
        /// hound's error.
        #[from]
        source: hound::Error,
    },
    /// The audio parameters or samples cannot be stored.
    #[error("bad audio input: {reason}")]
    Audio {
        /// What was wrong.
        reason: String,
    },
    /// The FLAC encoder rejected the stream.
    #[error("FLAC encode failed: {reason}")]
    Flac {
        /// The encoder's message.
        reason: String,
    },
}
