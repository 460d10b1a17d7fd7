//! A minimal ISO BMFF (MP4) writer for one H.264 video track.
//!
//! Key design choice: write the dozen boxes ourselves (ISO/IEC 14496-12 for
//! the file structure, 14496-15 for `avc1`/`avcC`) instead of pulling a muxer
//! crate: the layout is fixed and small. `moov` comes before `mdat`
//! ("fast start", playable while downloading); all samples sit in one chunk,
//! so `stsc`/`stco` have one entry each; every sample lasts `scale` ticks of a
//! `rate`-tick timescale, so the AVI's rational frame rate is kept exactly.
//! Samples are AVCC: each NAL unit prefixed by its 4-byte big-endian length.

use crate::CodecError;
use crate::h264::Stream;

/// The movie header's timescale (ticks per second for `mvhd`/`tkhd` durations).
const MOVIE_TIMESCALE: u32 = 1000;
/// The identity transform of `mvhd`/`tkhd` (16.16 and 2.30 fixed point).
const MATRIX: [u32; 9] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000];
/// ITU-T H.273 code point 6 (SMPTE 170M / BT.601 525) for primaries,
/// transfer and matrix, as `VuiConfig::bt601` writes into the SPS.
const COLOUR_SMPTE170M: u16 = 6;
/// Profiles whose `avcC` carries the chroma/bit-depth extension (14496-15 5.3.3.1.2).
const HIGH_PROFILES: [u8; 4] = [100, 110, 122, 144];

/// The track to write.
pub struct Track<'a> {
    /// Presentation width (the source's width), written to `tkhd`.
    pub width: u32,
    /// Presentation height, written to `tkhd`.
    pub height: u32,
    /// Decoded (SPS-cropped) width, written to the `avc1` sample entry.
    pub coded_width: u32,
    /// Decoded height.
    pub coded_height: u32,
    /// Media ticks per second.
    pub timescale: u32,
    /// Ticks per sample.
    pub sample_delta: u32,
    /// The encoded stream.
    pub stream: &'a Stream,
}

/// A growable byte buffer with big-endian writers and box nesting.
struct W {
    b: Vec<u8>,
}

impl W {
    fn u8(&mut self, v: u8) {
        self.b.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.b.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.b.extend_from_slice(v);
    }
    fn zeros(&mut self, n: usize) {
        self.b.resize(self.b.len() + n, 0);
    }
    /// Starts a box; returns where its size goes.
    fn open(&mut self, kind: &[u8; 4]) -> usize {
        let at = self.b.len();
        self.u32(0);
        self.bytes(kind);
        at
    }
    /// Starts a full box (version 0) with `flags`.
    fn open_full(&mut self, kind: &[u8; 4], flags: u32) -> usize {
        let at = self.open(kind);
        self.u32(flags & 0x00ff_ffff);
        at
    }
    /// Ends the box started at `at` by writing its size.
    fn close(&mut self, at: usize) -> Result<(), CodecError> {
        let size = u32::try_from(self.b.len() - at)
            .map_err(|_| CodecError::Mp4TooLarge { what: "box size" })?;
        self.b[at..at + 4].copy_from_slice(&size.to_be_bytes());
        Ok(())
    }
}

fn u32_of(v: usize, what: &'static str) -> Result<u32, CodecError> {
    u32::try_from(v).map_err(|_| CodecError::Mp4TooLarge { what })
}

fn u16_of(v: u32, what: &'static str) -> Result<u16, CodecError> {
    u16::try_from(v).map_err(|_| CodecError::Mp4TooLarge { what })
}

/// Each sample's AVCC bytes.
fn sample_bytes(stream: &Stream) -> Result<Vec<Vec<u8>>, CodecError> {
    stream
        .samples
        .iter()
        .map(|s| {
            let mut out = Vec::with_capacity(s.nals.iter().map(|n| n.len() + 4).sum());
            for nal in &s.nals {
                out.extend_from_slice(&u32_of(nal.len(), "NAL unit size")?.to_be_bytes());
                out.extend_from_slice(nal);
            }
            Ok(out)
        })
        .collect()
}

fn ftyp(w: &mut W) -> Result<(), CodecError> {
    let at = w.open(b"ftyp");
    w.bytes(b"isom");
    w.u32(0x200);
    for brand in [b"isom", b"iso2", b"avc1", b"mp41"] {
        w.bytes(brand);
    }
    w.close(at)
}

fn mvhd(w: &mut W, duration: u32) -> Result<(), CodecError> {
    let at = w.open_full(b"mvhd", 0);
    w.u32(0); // creation_time
    w.u32(0); // modification_time
    w.u32(MOVIE_TIMESCALE);
    w.u32(duration);
    w.u32(0x0001_0000); // rate 1.0
    w.u16(0x0100); // volume 1.0
    w.zeros(10); // reserved
    for m in MATRIX {
        w.u32(m);
    }
    w.zeros(24); // pre_defined
    w.u32(2); // next_track_ID
    w.close(at)
}

fn tkhd(w: &mut W, t: &Track<'_>, duration: u32) -> Result<(), CodecError> {
    let at = w.open_full(b"tkhd", 0x3); // track_enabled | track_in_movie
    w.u32(0); // creation_time
    w.u32(0); // modification_time
    w.u32(1); // track_ID
    w.u32(0); // reserved
    w.u32(duration);
    w.zeros(8); // reserved
    w.u16(0); // layer
    w.u16(0); // alternate_group
    w.u16(0); // volume (0 for video)
    w.u16(0); // reserved
    for m in MATRIX {
        w.u32(m);
    }
    w.u32(u16_of(t.width, "width")? as u32 * 0x1_0000); // 16.16
    w.u32(u16_of(t.height, "height")? as u32 * 0x1_0000);
    w.close(at)
}

fn mdhd_hdlr(w: &mut W, t: &Track<'_>, duration: u32) -> Result<(), CodecError> {
    let at = w.open_full(b"mdhd", 0);
    w.u32(0);
    w.u32(0);
    w.u32(t.timescale);
    w.u32(duration);
    // Language "und" as three 5-bit letters minus 0x60.
    let und = ((u16::from(b'u') - 0x60) << 10)
        | ((u16::from(b'n') - 0x60) << 5)
        | (u16::from(b'd') - 0x60);
    w.u16(und);
    w.u16(0); // pre_defined
    w.close(at)?;
    let at = w.open_full(b"hdlr", 0);
    w.u32(0); // pre_defined
    w.bytes(b"vide");
    w.zeros(12); // reserved
    w.bytes(b"VideoHandler\0");
    w.close(at)
}

fn avc1(w: &mut W, t: &Track<'_>) -> Result<(), CodecError> {
    let at = w.open(b"avc1");
    w.zeros(6); // reserved
    w.u16(1); // data_reference_index
    w.zeros(16); // pre_defined, reserved, pre_defined[3]
    w.u16(u16_of(t.coded_width, "width")?);
    w.u16(u16_of(t.coded_height, "height")?);
    w.u32(0x0048_0000); // 72 dpi
    w.u32(0x0048_0000);
    w.u32(0); // reserved
    w.u16(1); // frame_count
    let name = b"favlo OpenH264";
    let mut compressor = [0u8; 32];
    compressor[0] = name.len() as u8;
    compressor[1..=name.len()].copy_from_slice(name);
    w.bytes(&compressor);
    w.u16(0x0018); // depth: colour, no alpha
    w.u16(0xffff); // pre_defined = -1
    let (sps, pps) = (&t.stream.sps, &t.stream.pps);
    let c = w.open(b"avcC");
    w.u8(1); // configurationVersion
    w.u8(sps[1]); // AVCProfileIndication
    w.u8(sps[2]); // profile_compatibility
    w.u8(sps[3]); // AVCLevelIndication
    w.u8(0xfc | 3); // lengthSizeMinusOne = 3
    w.u8(0xe0 | 1); // one SPS
    w.u16(u16_of(u32_of(sps.len(), "SPS size")?, "SPS size")?);
    w.bytes(sps);
    w.u8(1); // one PPS
    w.u16(u16_of(u32_of(pps.len(), "PPS size")?, "PPS size")?);
    w.bytes(pps);
    if HIGH_PROFILES.contains(&sps[1]) {
        w.u8(0xfc | 1); // chroma_format_idc 4:2:0
        w.u8(0xf8); // bit_depth_luma_minus8 = 0
        w.u8(0xf8); // bit_depth_chroma_minus8 = 0
        w.u8(0); // numOfSequenceParameterSetExt
    }
    w.close(c)?;
    // The colour description the SPS's VUI also carries (BT.601 / SMPTE 170M,
    // limited range), for players that read only the container; square pixels.
    let colr = w.open(b"colr");
    w.bytes(b"nclx");
    for code in [COLOUR_SMPTE170M; 3] {
        w.u16(code); // colour_primaries, transfer_characteristics, matrix_coefficients
    }
    w.u8(0); // full_range_flag = 0, reserved
    w.close(colr)?;
    let pasp = w.open(b"pasp");
    w.u32(1);
    w.u32(1);
    w.close(pasp)?;
    w.close(at)
}

fn stbl(w: &mut W, t: &Track<'_>, sizes: &[u32], chunk_offset: u32) -> Result<(), CodecError> {
    let n = u32_of(sizes.len(), "sample count")?;
    let at = w.open(b"stbl");
    let d = w.open_full(b"stsd", 0);
    w.u32(1);
    avc1(w, t)?;
    w.close(d)?;
    let b = w.open_full(b"stts", 0);
    w.u32(1);
    w.u32(n);
    w.u32(t.sample_delta);
    w.close(b)?;
    let sync: Vec<u32> = (1..=n)
        .zip(&t.stream.samples)
        .filter_map(|(i, s)| s.idr.then_some(i))
        .collect();
    let b = w.open_full(b"stss", 0);
    w.u32(u32_of(sync.len(), "sync sample count")?);
    for i in sync {
        w.u32(i);
    }
    w.close(b)?;
    let b = w.open_full(b"stsc", 0);
    w.u32(1);
    w.u32(1); // first_chunk
    w.u32(n); // samples_per_chunk
    w.u32(1); // sample_description_index
    w.close(b)?;
    let b = w.open_full(b"stsz", 0);
    w.u32(0); // sample_size: sizes follow
    w.u32(n);
    for &s in sizes {
        w.u32(s);
    }
    w.close(b)?;
    let b = w.open_full(b"stco", 0);
    w.u32(1);
    w.u32(chunk_offset);
    w.close(b)?;
    w.close(at)
}

fn moov(w: &mut W, t: &Track<'_>, sizes: &[u32], chunk_offset: u32) -> Result<(), CodecError> {
    let ticks = u64::from(t.sample_delta) * sizes.len() as u64;
    let media_duration = u32::try_from(ticks).map_err(|_| CodecError::Mp4TooLarge {
        what: "media duration",
    })?;
    let movie_ticks = (ticks * u64::from(MOVIE_TIMESCALE)).div_ceil(u64::from(t.timescale.max(1)));
    let movie_duration = u32::try_from(movie_ticks).map_err(|_| CodecError::Mp4TooLarge {
        what: "movie duration",
    })?;
    let at = w.open(b"moov");
    mvhd(w, movie_duration)?;
    let trak = w.open(b"trak");
    tkhd(w, t, movie_duration)?;
    let mdia = w.open(b"mdia");
    mdhd_hdlr(w, t, media_duration)?;
    let minf = w.open(b"minf");
    let v = w.open_full(b"vmhd", 1);
    w.zeros(8); // graphicsmode, opcolor
    w.close(v)?;
    let dinf = w.open(b"dinf");
    let dref = w.open_full(b"dref", 0);
    w.u32(1);
    let url = w.open_full(b"url ", 1); // media in this file
    w.close(url)?;
    w.close(dref)?;
    w.close(dinf)?;
    stbl(w, t, sizes, chunk_offset)?;
    w.close(minf)?;
    w.close(mdia)?;
    w.close(trak)?;
    w.close(at)
}

/// Writes the whole file: `ftyp`, `moov`, `mdat`.
pub fn write(t: &Track<'_>) -> Result<Vec<u8>, CodecError> {
    if t.stream.sps.len() < 4 || t.stream.pps.is_empty() || t.timescale == 0 {
        return Err(CodecError::Encode {
            frame: 0,
            reason: "incomplete parameter sets or zero timescale".into(),
        });
    }
    let samples = sample_bytes(t.stream)?;
    let sizes = samples
        .iter()
        .map(|s| u32_of(s.len(), "sample size"))
        .collect::<Result<Vec<_>, _>>()?;
    let payload: usize = samples.iter().map(Vec::len).sum();
    // moov's size does not depend on the offset's value: size it first.
    let mut probe = W { b: Vec::new() };
    ftyp(&mut probe)?;
    moov(&mut probe, t, &sizes, 0)?;
    let data_offset = u32_of(probe.b.len() + 8, "chunk offset")?;
    let mut w = W {
        b: Vec::with_capacity(probe.b.len() + 8 + payload),
    };
    ftyp(&mut w)?;
    moov(&mut w, t, &sizes, data_offset)?;
    let mdat = w.open(b"mdat");
    for s in &samples {
        w.bytes(s);
    }
    w.close(mdat)?;
    Ok(w.b)
}
