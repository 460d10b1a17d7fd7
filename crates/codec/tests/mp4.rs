//! MJPEG AVI -> MP4: container structure (own box walker), a decode of the
//! produced file back to pictures (OpenH264's decoder, PSNR vs the source
//! JPEGs), and an independent check by FFmpeg through PyAV when installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BoxAt, be16, be32, psnr, test_video, walk};
use favlo_codec::mp4_from_avi;
use openh264::formats::YUVSource;

/// Minimum PSNR (dB) of each decoded frame against its source JPEG decode.
const MIN_PSNR_DB: f64 = 30.0;

fn find<'a>(boxes: &'a [BoxAt], kind: &[u8; 4]) -> &'a BoxAt {
    boxes
        .iter()
        .find(|b| &b.kind == kind)
        .unwrap_or_else(|| panic!("no {:?}", String::from_utf8_lossy(kind)))
}

/// What the structure check reads back out of the file.
struct Parsed {
    boxes: Vec<BoxAt>,
    sps: Vec<u8>,
    pps: Vec<u8>,
    samples: Vec<Vec<u8>>,
}

/// Walks the file, checks every box size and the sample tables' consistency,
/// and returns the samples as stored.
fn parse(mp4: &[u8]) -> Parsed {
    let mut boxes = Vec::new();
    walk(mp4, 0, mp4.len(), 0, &mut boxes);
    let top: Vec<&[u8; 4]> = boxes
        .iter()
        .filter(|b| b.depth == 0)
        .map(|b| &b.kind)
        .collect();
    assert_eq!(top, vec![b"ftyp", b"moov", b"mdat"]);
    let avcc = find(&boxes, b"avcC");
    let a = &mp4[avcc.start..avcc.end];
    assert_eq!(a[0], 1);
    assert_eq!(a[4] & 3, 3, "4-byte NAL lengths");
    assert_eq!(a[5] & 0x1f, 1);
    let sps_len = be16(a, 6) as usize;
    let sps = a[8..8 + sps_len].to_vec();
    assert_eq!(sps[0] & 0x1f, 7);
    assert_eq!(&a[1..4], &sps[1..4], "avcC profile/level mirror the SPS");
    assert_eq!(a[8 + sps_len], 1);
    let pps_len = be16(a, 9 + sps_len) as usize;
    let pps = a[11 + sps_len..11 + sps_len + pps_len].to_vec();
    assert_eq!(pps[0] & 0x1f, 8);

    let stsz = find(&boxes, b"stsz");
    let n = be32(mp4, stsz.start + 8) as usize;
    assert_eq!(be32(mp4, stsz.start + 4), 0);
    assert_eq!(stsz.end - stsz.start, 12 + 4 * n);
    let sizes: Vec<usize> = (0..n)
        .map(|i| be32(mp4, stsz.start + 12 + 4 * i) as usize)
        .collect();
    let stsc = find(&boxes, b"stsc");
    assert_eq!(be32(mp4, stsc.start + 4), 1);
    assert_eq!(
        be32(mp4, stsc.start + 12) as usize,
        n,
        "one chunk holds every sample"
    );
    let stco = find(&boxes, b"stco");
    assert_eq!(be32(mp4, stco.start + 4), 1);
    let offset = be32(mp4, stco.start + 8) as usize;
    let mdat = find(&boxes, b"mdat");
    assert_eq!(offset, mdat.start);
    assert_eq!(sizes.iter().sum::<usize>(), mdat.end - mdat.start);
    let mut samples = Vec::new();
    let mut pos = offset;
    for s in sizes {
        let sample = &mp4[pos..pos + s];
        // AVCC: length-prefixed NAL units that fill the sample exactly.
        let mut at = 0;
        while at < s {
            let len = be32(sample, at) as usize;
            assert!(
                len > 0 && at + 4 + len <= s,
                "NAL length overruns its sample"
            );
            let kind = sample[at + 4] & 0x1f;
            assert!(
                kind != 7 && kind != 8,
                "parameter sets live in avcC, not samples"
            );
            at += 4 + len;
        }
        assert_eq!(at, s);
        samples.push(sample.to_vec());
        pos += s;
    }
    Parsed {
        boxes,
        sps,
        pps,
        samples,
    }
}

/// Decodes the stored samples with OpenH264 and converts to RGB8 with the
/// BT.601 limited-range inverse, written here from the standard's constants.
fn decode_rgb(p: &Parsed, w: usize, h: usize) -> Vec<Vec<u8>> {
    let mut dec = openh264::decoder::Decoder::new().unwrap();
    let mut out = Vec::new();
    let annex_b = |nals: &[&[u8]]| {
        let mut v = Vec::new();
        for n in nals {
            v.extend_from_slice(&[0, 0, 0, 1]);
            v.extend_from_slice(n);
        }
        v
    };
    let to_rgb = |y: &dyn YUVSource| {
        let (sy, su, _) = y.strides();
        let mut rgb = Vec::with_capacity(w * h * 3);
        for r in 0..h {
            for c in 0..w {
                let yy = 1.164_383 * (f64::from(y.y()[r * sy + c]) - 16.0);
                let cb = f64::from(y.u()[(r / 2) * su + c / 2]) - 128.0;
                let cr = f64::from(y.v()[(r / 2) * su + c / 2]) - 128.0;
                for v in [
                    yy + 1.596_027 * cr,
                    yy - 0.391_762 * cb - 0.812_968 * cr,
                    yy + 2.017_232 * cb,
                ] {
                    rgb.push(v.round().clamp(0.0, 255.0) as u8);
                }
            }
        }
        rgb
    };
    let _ = dec.decode(&annex_b(&[&p.sps, &p.pps])).unwrap();
    for s in &p.samples {
        let mut nals = Vec::new();
        let mut at = 0;
        while at < s.len() {
            let len = be32(s, at) as usize;
            nals.push(&s[at + 4..at + 4 + len]);
            at += 4 + len;
        }
        if let Some(pic) = dec.decode(&annex_b(&nals)).unwrap() {
            assert!(pic.dimensions().0 >= w && pic.dimensions().1 >= h);
            out.push(to_rgb(&pic));
        }
    }
    for pic in dec.flush_remaining().unwrap() {
        out.push(to_rgb(&pic));
    }
    out
}

#[test]
fn structure_and_decode_64x64() {
    let (w, h, n) = (64u32, 64u32, 30usize);
    let v = test_video(w, h, n, 12, 1);
    let mp4 = mp4_from_avi(&v.avi).unwrap();
    let p = parse(&mp4);
    assert_eq!(p.samples.len(), n);

    let mdhd = find(&p.boxes, b"mdhd");
    assert_eq!(
        be32(&mp4, mdhd.start + 12),
        12,
        "media timescale = AVI rate"
    );
    assert_eq!(be32(&mp4, mdhd.start + 16), 30, "media duration in ticks");
    let stts = find(&p.boxes, b"stts");
    assert_eq!(
        (be32(&mp4, stts.start + 8), be32(&mp4, stts.start + 12)),
        (30, 1)
    );
    let mvhd = find(&p.boxes, b"mvhd");
    assert_eq!(be32(&mp4, mvhd.start + 16), 2500, "2.5 s in movie ticks");
    let tkhd = find(&p.boxes, b"tkhd");
    assert_eq!(be32(&mp4, tkhd.start + 76), w << 16);
    assert_eq!(be32(&mp4, tkhd.start + 80), h << 16);
    let avc1 = find(&p.boxes, b"avc1");
    assert_eq!(
        (be16(&mp4, avc1.start + 24), be16(&mp4, avc1.start + 26)),
        (64, 64)
    );
    let colr = find(&p.boxes, b"colr");
    assert_eq!(&mp4[colr.start..colr.end], b"nclx\0\x06\0\x06\0\x06\0");
    let pasp = find(&p.boxes, b"pasp");
    assert_eq!((be32(&mp4, pasp.start), be32(&mp4, pasp.start + 4)), (1, 1));
    let hdlr = find(&p.boxes, b"hdlr");
    assert_eq!(&mp4[hdlr.start + 8..hdlr.start + 12], b"vide");

    // stss lists exactly the samples holding an IDR slice, starting with the
    // first; IDRs come at least every 2 s (24 frames at 12 fps).
    let stss = find(&p.boxes, b"stss");
    let sync: Vec<usize> = (0..be32(&mp4, stss.start + 4) as usize)
        .map(|i| be32(&mp4, stss.start + 8 + 4 * i) as usize)
        .collect();
    let idr: Vec<usize> = (1..=n)
        .filter(|&i| p.samples[i - 1][4] & 0x1f == 5)
        .collect();
    assert_eq!(sync, idr);
    assert_eq!(sync[0], 1);
    let mut bounds = sync.clone();
    bounds.push(n + 1);
    assert!(
        bounds.windows(2).all(|g| g[1] - g[0] <= 24),
        "IDR gaps {sync:?}"
    );

    let pics = decode_rgb(&p, w as usize, h as usize);
    assert_eq!(pics.len(), n);
    for (i, (got, want)) in pics.iter().zip(&v.decoded).enumerate() {
        let db = psnr(got, want);
        assert!(
            db >= MIN_PSNR_DB,
            "frame {i}: PSNR {db:.2} dB < {MIN_PSNR_DB}"
        );
    }
}

/// Not a multiple of 16 (SPS cropping) and a rational rate (30000/1001).
#[test]
fn odd_macroblock_size_and_ntsc_rate() {
    let (w, h, n) = (50u32, 38u32, 8usize);
    let v = test_video(w, h, n, 30000, 1001);
    let mp4 = mp4_from_avi(&v.avi).unwrap();
    let p = parse(&mp4);
    assert_eq!(p.samples.len(), n);
    let mdhd = find(&p.boxes, b"mdhd");
    assert_eq!(be32(&mp4, mdhd.start + 12), 30000);
    let stts = find(&p.boxes, b"stts");
    assert_eq!(be32(&mp4, stts.start + 12), 1001);
    let pics = decode_rgb(&p, w as usize, h as usize);
    assert_eq!(pics.len(), n);
    for (i, (got, want)) in pics.iter().zip(&v.decoded).enumerate() {
        let db = psnr(got, want);
        assert!(
            db >= MIN_PSNR_DB,
            "frame {i}: PSNR {db:.2} dB < {MIN_PSNR_DB}"
        );
    }
}

/// Runs tools/fixtures/codec_check_mp4.py on a source AVI and our MP4 and
/// returns its `key value` lines; None when python3 with PyAV is missing.
fn ffmpeg_check(avi: &std::path::Path, mp4: &std::path::Path) -> Option<String> {
    let have_av = std::process::Command::new("python3")
        .args(["-c", "import av, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_av {
        return None;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tools/fixtures/codec_check_mp4.py"
    );
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(avi)
        .arg(mp4)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "checker failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text)
}

/// One `key value` line of the checker's output.
fn field(text: &str, k: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {k} in {text}"))
        .to_string()
}

fn num(text: &str, k: &str) -> f64 {
    field(text, k).parse().unwrap()
}

/// FFmpeg (through PyAV) decodes the source AVI and our MP4 independently;
/// frame count, size and rate must match and every frame must be within
/// MIN_PSNR_DB of the source. Skips with a note when PyAV is not installed.
#[test]
fn ffmpeg_pyav_agrees() {
    let dir = tempfile::tempdir().unwrap();
    // (width, height, rate, scale, frames): the DCGAN shape, a non-macroblock
    // size at NTSC rate, an odd size (padded to even for 4:2:0) and one below
    // OpenH264's 16x16 minimum (padded to 16, cropped back in the SPS).
    for (w, h, rate, scale, n) in [
        (64u32, 64u32, 12u32, 1u32, 24usize),
        (50, 38, 30000, 1001, 10),
        (37, 29, 25, 1, 6),
        (10, 6, 5, 1, 4),
    ] {
        let v = test_video(w, h, n, rate, scale);
        let (avi, mp4) = (dir.path().join("in.avi"), dir.path().join("out.mp4"));
        std::fs::write(&avi, &v.avi).unwrap();
        std::fs::write(&mp4, mp4_from_avi(&v.avi).unwrap()).unwrap();
        let Some(text) = ffmpeg_check(&avi, &mp4) else {
            eprintln!(
                "SKIP ffmpeg_pyav_agrees: python3 with PyAV (pip install av numpy) not found"
            );
            return;
        };
        eprintln!("{w}x{h} @ {rate}/{scale}: {}", text.replace('\n', "; "));
        assert_eq!(field(&text, "codec"), "h264");
        assert_eq!(field(&text, "pix_fmt"), "yuv420p");
        assert_eq!(field(&text, "profile"), "Constrained Baseline");
        // BT.601 (SMPTE 170M) primaries/transfer/matrix, limited range.
        assert_eq!(field(&text, "colour"), "6 6 6 1");
        assert_eq!(num(&text, "frames") as usize, n);
        assert_eq!(num(&text, "src_frames") as usize, n);
        // H.264 4:2:0 crops in 2-pixel steps: odd sizes decode one pixel larger.
        assert_eq!(num(&text, "width") as u32, w + (w & 1));
        assert_eq!(num(&text, "height") as u32, h + (h & 1));
        assert_eq!(
            (
                num(&text, "src_width") as u32,
                num(&text, "src_height") as u32
            ),
            (w, h)
        );
        let fps = f64::from(rate) / f64::from(scale);
        assert!((num(&text, "fps") - fps).abs() < 1e-6 * fps, "fps {text}");
        let min = num(&text, "min_psnr");
        assert!(
            min >= MIN_PSNR_DB,
            "{w}x{h}: min PSNR {min:.2} dB < {MIN_PSNR_DB}"
        );
    }
}

/// The same check on an AVI written by FFmpeg itself
/// (tools/fixtures/codec_avi_fixture.py: audio stream first, JUNK padding).
#[test]
fn ffmpeg_written_avi_round_trip() {
    let avi =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ffmpeg_mjpeg.avi");
    let dir = tempfile::tempdir().unwrap();
    let mp4 = dir.path().join("fixture.mp4");
    std::fs::write(&mp4, mp4_from_avi(&std::fs::read(&avi).unwrap()).unwrap()).unwrap();
    let Some(text) = ffmpeg_check(&avi, &mp4) else {
        eprintln!(
            "SKIP ffmpeg_written_avi_round_trip: python3 with PyAV (pip install av numpy) not found"
        );
        return;
    };
    eprintln!("ffmpeg fixture: {}", text.replace('\n', "; "));
    assert_eq!(
        (num(&text, "frames"), num(&text, "src_frames")),
        (10.0, 10.0)
    );
    assert_eq!(
        (num(&text, "width"), num(&text, "height"), num(&text, "fps")),
        (64.0, 48.0, 15.0)
    );
    let min = num(&text, "min_psnr");
    assert!(min >= MIN_PSNR_DB, "min PSNR {min:.2} dB < {MIN_PSNR_DB}");
}

/// Frame rates far outside the usual range still encode; the MP4 keeps the
/// exact rational rate.
#[test]
fn extreme_frame_rates() {
    for (rate, scale) in [
        (1u32, 10u32),
        (120, 1),
        (1000, 1),
        (90_000, 1),
        (u32::MAX, 1),
    ] {
        let v = test_video(32, 32, 4, rate, scale);
        let mp4 = mp4_from_avi(&v.avi).unwrap_or_else(|e| panic!("{rate}/{scale}: {e}"));
        let p = parse(&mp4);
        assert_eq!(p.samples.len(), 4);
        let mdhd = find(&p.boxes, b"mdhd");
        assert_eq!(be32(&mp4, mdhd.start + 12), rate);
        let stts = find(&p.boxes, b"stts");
        assert_eq!(be32(&mp4, stts.start + 12), scale);
    }
    // One frame per 136 years: the 32-bit media duration overflows; a named error.
    let v = test_video(32, 32, 4, 1, u32::MAX);
    assert!(matches!(
        mp4_from_avi(&v.avi),
        Err(favlo_codec::CodecError::Mp4TooLarge {
            what: "media duration"
        })
    ));
}
