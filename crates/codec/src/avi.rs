//! A bounds-checked reader for RIFF AVI 1.0 files carrying one MJPEG video stream.
//!
//! Key design choice: walk the chunk tree with explicit length checks and
//! return `CodecError::Avi` for anything malformed or truncated (never index
//! past a slice), and take the frames from the `movi` list in file order
//! rather than trusting `idx1`: the list is the data, the index only a cache.
//! A zero-length frame chunk is AVI's "drop frame" (show the previous frame
//! again), so it repeats the previous JPEG.

use crate::CodecError;

/// The frame rate as the rational `rate / scale` frames per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRate {
    /// Time units per second (the MP4 media timescale).
    pub rate: u32,
    /// Time units per frame (every MP4 sample's duration).
    pub scale: u32,
}

impl FrameRate {
    /// Frames per second as a float.
    pub fn fps(self) -> f64 {
        f64::from(self.rate) / f64::from(self.scale)
    }
}

/// What `parse` found: the declared picture size, rate and the JPEG frames.
#[derive(Debug, Clone)]
pub struct MjpegAvi<'a> {
    /// Picture width in pixels.
    pub width: u32,
    /// Picture height in pixels.
    pub height: u32,
    /// Frame rate.
    pub rate: FrameRate,
    /// One complete JPEG per frame, in presentation order.
    pub frames: Vec<&'a [u8]>,
}

fn bad(reason: impl Into<String>) -> CodecError {
    CodecError::Avi {
        reason: reason.into(),
    }
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn fourcc(id: &[u8]) -> String {
    id.iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                char::from(c)
            } else {
                '?'
            }
        })
        .collect()
}

/// One chunk: its FOURCC, its payload and the payload's absolute offset.
struct Chunk<'a> {
    id: [u8; 4],
    data: &'a [u8],
    at: usize,
}

/// Splits `body` (absolute offset `base`) into consecutive chunks, each padded
/// to an even length; any chunk running past the end is an error.
fn chunks(body: &[u8], base: usize) -> Result<Vec<Chunk<'_>>, CodecError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let abs = base + pos;
        let (Some(id), Some(size)) = (body.get(pos..pos + 4), le32(body, pos + 4)) else {
            return Err(bad(format!("truncated chunk header at byte {abs}")));
        };
        let size = size as usize;
        let start = pos + 8;
        let Some(data) = start.checked_add(size).and_then(|end| body.get(start..end)) else {
            return Err(bad(format!(
                "chunk '{}' at byte {abs} declares {size} bytes but only {} remain",
                fourcc(id),
                body.len() - start.min(body.len())
            )));
        };
        let mut id4 = [0u8; 4];
        id4.copy_from_slice(id);
        out.push(Chunk {
            id: id4,
            data,
            at: base + start,
        });
        // Word alignment: a missing final pad byte is tolerated.
        pos = start + size + (size & 1);
    }
    Ok(out)
}

/// A LIST chunk's kind and its children.
fn list<'a>(c: &Chunk<'a>) -> Result<([u8; 4], Vec<Chunk<'a>>), CodecError> {
    let Some(kind) = c.data.get(..4) else {
        return Err(bad(format!("LIST at byte {} has no type", c.at)));
    };
    let mut k = [0u8; 4];
    k.copy_from_slice(kind);
    Ok((k, chunks(&c.data[4..], c.at + 4)?))
}

#[derive(Default)]
struct Header {
    avih_size: Option<(u32, u32)>,
    micros_per_frame: u32,
    strf_size: Option<(u32, u32)>,
    rate: Option<FrameRate>,
    video_stream: Option<usize>,
}

fn read_avih(c: &Chunk<'_>, h: &mut Header) -> Result<(), CodecError> {
    let d = c.data;
    let (Some(us), Some(w), Some(hh)) = (le32(d, 0), le32(d, 32), le32(d, 36)) else {
        return Err(bad(format!(
            "avih at byte {} is {} bytes, needs 40",
            c.at,
            d.len()
        )));
    };
    h.micros_per_frame = us;
    h.avih_size = Some((w, hh));
    Ok(())
}

/// Reads one `strl`: the first `vids` stream becomes the video stream.
fn read_strl(kids: &[Chunk<'_>], stream: usize, h: &mut Header) -> Result<(), CodecError> {
    let Some(strh) = kids.iter().find(|k| &k.id == b"strh") else {
        return Err(bad(format!("stream {stream} has no strh")));
    };
    let d = strh.data;
    let (Some(kind), Some(scale), Some(rate)) = (d.get(0..4), le32(d, 20), le32(d, 24)) else {
        return Err(bad(format!(
            "strh at byte {} is {} bytes, needs 28",
            strh.at,
            d.len()
        )));
    };
    if kind != b"vids" || h.video_stream.is_some() {
        return Ok(());
    }
    h.video_stream = Some(stream);
    if rate > 0 && scale > 0 {
        h.rate = Some(FrameRate { rate, scale });
    }
    let handler = d.get(4..8).unwrap_or(b"    ");
    if let Some(strf) = kids.iter().find(|k| &k.id == b"strf") {
        let f = strf.data;
        let (Some(w), Some(hh), Some(comp)) = (le32(f, 4), le32(f, 8), f.get(16..20)) else {
            return Err(bad(format!(
                "strf at byte {} is {} bytes, needs 20",
                strf.at,
                f.len()
            )));
        };
        if !comp.eq_ignore_ascii_case(b"MJPG") {
            return Err(bad(format!(
                "video stream {stream} is '{}', not MJPEG",
                fourcc(comp)
            )));
        }
        // A negative biHeight means a top-down bitmap; the size is its magnitude.
        h.strf_size = Some((w, (hh as i32).unsigned_abs()));
    } else if !handler.eq_ignore_ascii_case(b"MJPG") {
        return Err(bad(format!(
            "video stream {stream} is '{}', not MJPEG",
            fourcc(handler)
        )));
    }
    Ok(())
}

fn read_hdrl(kids: &[Chunk<'_>], h: &mut Header) -> Result<(), CodecError> {
    let mut stream = 0;
    for k in kids {
        if &k.id == b"avih" {
            read_avih(k, h)?;
        } else if &k.id == b"LIST" {
            let (kind, sub) = list(k)?;
            if &kind == b"strl" {
                read_strl(&sub, stream, h)?;
                stream += 1;
            }
        }
    }
    Ok(())
}

/// Collects the video stream's frames from a `movi` list (descending into
/// `rec ` lists), repeating the previous frame for an empty chunk.
fn read_movi<'a>(
    kids: &[Chunk<'a>],
    tag: &[u8; 2],
    frames: &mut Vec<&'a [u8]>,
) -> Result<(), CodecError> {
    for k in kids {
        if &k.id == b"LIST" {
            let (_, sub) = list(k)?;
            read_movi(&sub, tag, frames)?;
        } else if &k.id[..2] == tag && (&k.id[2..] == b"dc" || &k.id[2..] == b"db") {
            if k.data.is_empty() {
                let Some(&prev) = frames.last() else {
                    return Err(bad(format!("first frame chunk at byte {} is empty", k.at)));
                };
                frames.push(prev);
            } else {
                frames.push(k.data);
            }
        }
    }
    Ok(())
}

/// Parses an MJPEG AVI. Errors name what is malformed and where.
pub fn parse(avi: &[u8]) -> Result<MjpegAvi<'_>, CodecError> {
    if avi.len() < 12 {
        return Err(bad(format!(
            "{} bytes is too short for a RIFF header",
            avi.len()
        )));
    }
    if &avi[0..4] != b"RIFF" || &avi[8..12] != b"AVI " {
        return Err(bad(format!(
            "not a RIFF AVI file (starts with '{}' ... '{}')",
            fourcc(&avi[0..4]),
            fourcc(&avi[8..12])
        )));
    }
    let declared = le32(avi, 4).unwrap_or(0) as usize;
    let Some(body) = declared
        .checked_add(8)
        .and_then(|end| avi.get(12..end.max(12)))
    else {
        return Err(bad(format!(
            "truncated: RIFF declares {} bytes, the file has {}",
            declared + 8,
            avi.len()
        )));
    };
    let mut h = Header::default();
    let mut frames = Vec::new();
    let mut saw_hdrl = false;
    let mut movi_kids = None;
    for c in chunks(body, 12)? {
        if &c.id != b"LIST" {
            continue;
        }
        let (kind, kids) = list(&c)?;
        match &kind {
            b"hdrl" => {
                read_hdrl(&kids, &mut h)?;
                saw_hdrl = true;
            }
            b"movi" => movi_kids = Some(kids),
            _ => {}
        }
    }
    if !saw_hdrl {
        return Err(bad("no hdrl header list"));
    }
    let Some(stream) = h.video_stream else {
        return Err(bad("no video stream"));
    };
    if stream > 99 {
        return Err(bad(format!("video stream number {stream} is out of range")));
    }
    let Some(kids) = movi_kids else {
        return Err(bad("no movi list"));
    };
    let digits = format!("{stream:02}");
    let mut tag = [0u8; 2];
    tag.copy_from_slice(digits.as_bytes());
    read_movi(&kids, &tag, &mut frames)?;
    if frames.is_empty() {
        return Err(bad("the movi list holds no video frames"));
    }
    let (width, height) = match (h.avih_size, h.strf_size) {
        (_, Some((w, hh))) if w > 0 && hh > 0 => (w, hh),
        (Some((w, hh)), _) if w > 0 && hh > 0 => (w, hh),
        _ => return Err(bad("no non-zero picture size in avih or strf")),
    };
    let rate = match h.rate {
        Some(r) => r,
        None if h.micros_per_frame > 0 => FrameRate {
            rate: 1_000_000,
            scale: h.micros_per_frame,
        },
        None => return Err(bad("no frame rate in strh or avih")),
    };
    Ok(MjpegAvi {
        width,
        height,
        rate,
        frames,
    })
}
