//! A minimal RIFF AVI 1.0 writer for one MJPEG video stream.
//!
//! Key design choice: write the container ourselves (it is ~100 bytes of
//! headers) rather than pull a muxer: `RIFF('AVI ' LIST('hdrl' avih
//! LIST('strl' strh strf)) LIST('movi' '00dc'…) idx1)`, every frame a key frame,
//! `idx1` offsets relative to the `movi` FOURCC (the common convention that
//! ffmpeg, VLC and Windows read). All integers little-endian.

/// `AVIF_HASINDEX`: the file carries an `idx1`.
const AVIF_HASINDEX: u32 = 0x10;
/// `AVIIF_KEYFRAME` in an index entry.
const AVIIF_KEYFRAME: u32 = 0x10;

fn u32le(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn u16le(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Writes a chunk header with a placeholder size; returns the size's offset.
fn open_chunk(out: &mut Vec<u8>, id: &[u8; 4]) -> usize {
    out.extend_from_slice(id);
    let at = out.len();
    u32le(out, 0);
    at
}

/// Patches the size written at `at` to cover everything after it, and pads the
/// chunk to an even length (RIFF's word alignment).
fn close_chunk(out: &mut Vec<u8>, at: usize) {
    let size = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&size.to_le_bytes());
    if out.len() % 2 == 1 {
        out.push(0);
    }
}

fn open_list(out: &mut Vec<u8>, kind: &[u8; 4]) -> usize {
    let at = open_chunk(out, b"LIST");
    out.extend_from_slice(kind);
    at
}

fn clamp32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// An AVI file of `frames` (each a complete JPEG) at `fps` frames per second
/// (`fps` > 0; rate/scale are `fps`/1).
pub fn mjpeg_avi(width: u32, height: u32, fps: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let fps = fps.max(1);
    let max_frame = clamp32(frames.iter().map(Vec::len).max().unwrap_or(0));
    let total: usize = frames.iter().map(|f| f.len() + 9).sum();
    let mut out = Vec::with_capacity(total + 512 + 16 * frames.len());
    let riff = open_chunk(&mut out, b"RIFF");
    out.extend_from_slice(b"AVI ");

    let hdrl = open_list(&mut out, b"hdrl");
    let avih = open_chunk(&mut out, b"avih");
    u32le(&mut out, 1_000_000 / fps); // dwMicroSecPerFrame
    u32le(&mut out, max_frame.saturating_mul(fps)); // dwMaxBytesPerSec
    u32le(&mut out, 0); // dwPaddingGranularity
    u32le(&mut out, AVIF_HASINDEX); // dwFlags
    u32le(&mut out, clamp32(frames.len())); // dwTotalFrames
    u32le(&mut out, 0); // dwInitialFrames
    u32le(&mut out, 1); // dwStreams
    u32le(&mut out, max_frame); // dwSuggestedBufferSize
    u32le(&mut out, width);
    u32le(&mut out, height);
    for _ in 0..4 {
        u32le(&mut out, 0); // dwReserved
    }
    close_chunk(&mut out, avih);

    let strl = open_list(&mut out, b"strl");
    let strh = open_chunk(&mut out, b"strh");
    out.extend_from_slice(b"vids"); // fccType
    out.extend_from_slice(b"MJPG"); // fccHandler
    u32le(&mut out, 0); // dwFlags
    u16le(&mut out, 0); // wPriority
    u16le(&mut out, 0); // wLanguage
    u32le(&mut out, 0); // dwInitialFrames
    u32le(&mut out, 1); // dwScale
    u32le(&mut out, fps); // dwRate
    u32le(&mut out, 0); // dwStart
    u32le(&mut out, clamp32(frames.len())); // dwLength
    u32le(&mut out, max_frame); // dwSuggestedBufferSize
    u32le(&mut out, u32::MAX); // dwQuality (-1: default)
    u32le(&mut out, 0); // dwSampleSize
    for v in [0u16, 0, width as u16, height as u16] {
        u16le(&mut out, v); // rcFrame
    }
    close_chunk(&mut out, strh);
    let strf = open_chunk(&mut out, b"strf");
    u32le(&mut out, 40); // biSize
    u32le(&mut out, width);
    u32le(&mut out, height);
    u16le(&mut out, 1); // biPlanes
    u16le(&mut out, 24); // biBitCount
    out.extend_from_slice(b"MJPG"); // biCompression
    u32le(&mut out, width.saturating_mul(height).saturating_mul(3)); // biSizeImage
    for _ in 0..4 {
        u32le(&mut out, 0); // pels per meter x/y, colours used/important
    }
    close_chunk(&mut out, strf);
    close_chunk(&mut out, strl);
    close_chunk(&mut out, hdrl);

    let movi = open_list(&mut out, b"movi");
    let movi_fourcc = movi + 4;
    let mut index = Vec::with_capacity(frames.len());
    for f in frames {
        index.push((clamp32(out.len() - movi_fourcc), clamp32(f.len())));
        let c = open_chunk(&mut out, b"00dc");
        out.extend_from_slice(f);
        close_chunk(&mut out, c);
    }
    close_chunk(&mut out, movi);

    let idx1 = open_chunk(&mut out, b"idx1");
    for (offset, len) in index {
        out.extend_from_slice(b"00dc");
        u32le(&mut out, AVIIF_KEYFRAME);
        u32le(&mut out, offset);
        u32le(&mut out, len);
    }
    close_chunk(&mut out, idx1);
    close_chunk(&mut out, riff);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn le32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Walks the chunk tree independently and checks sizes, the header fields
    /// and that the index points at each frame's bytes.
    #[test]
    fn structure_and_index() {
        let frames = vec![vec![1u8, 2, 3], vec![9u8; 10], vec![7u8; 5]];
        let avi = mjpeg_avi(64, 48, 12, &frames);
        assert_eq!(&avi[..4], b"RIFF");
        assert_eq!(le32(&avi, 4) as usize, avi.len() - 8);
        assert_eq!(&avi[8..12], b"AVI ");
        // hdrl list
        assert_eq!(&avi[12..16], b"LIST");
        let hdrl_len = le32(&avi, 16) as usize;
        assert_eq!(&avi[20..24], b"hdrl");
        assert_eq!(&avi[24..28], b"avih");
        assert_eq!(le32(&avi, 28), 56);
        assert_eq!(le32(&avi, 32), 1_000_000 / 12);
        assert_eq!(le32(&avi, 32 + 16), 3); // total frames
        assert_eq!((le32(&avi, 32 + 32), le32(&avi, 32 + 36)), (64, 48));
        let strh = 32 + 56 + 12 + 8;
        assert_eq!(&avi[strh - 8..strh - 4], b"strh");
        assert_eq!(&avi[strh..strh + 8], b"vidsMJPG");
        assert_eq!(le32(&avi, strh + 24), 12); // dwRate
        // movi list right after hdrl
        let movi = 20 + hdrl_len;
        assert_eq!(&avi[movi..movi + 4], b"LIST");
        assert_eq!(&avi[movi + 8..movi + 12], b"movi");
        let movi_len = le32(&avi, movi + 4) as usize;
        let idx1 = movi + 8 + movi_len;
        assert_eq!(&avi[idx1..idx1 + 4], b"idx1");
        assert_eq!(le32(&avi, idx1 + 4) as usize, 16 * frames.len());
        for (i, f) in frames.iter().enumerate() {
            let e = idx1 + 8 + 16 * i;
            assert_eq!(&avi[e..e + 4], b"00dc");
            let at = movi + 8 + le32(&avi, e + 8) as usize;
            assert_eq!(&avi[at..at + 4], b"00dc");
            assert_eq!(le32(&avi, at + 4) as usize, f.len());
            assert_eq!(le32(&avi, e + 12) as usize, f.len());
            assert_eq!(&avi[at + 8..at + 8 + f.len()], &f[..]);
        }
        assert_eq!(idx1 + 8 + 16 * frames.len(), avi.len());
    }
}
