//! The AVI reader against the format: good files parse to the right size,
//! rate and frames; truncated, garbage and corrupted files give
//! `CodecError::Avi` (or `Jpeg` for a broken frame), never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{jpeg, mjpeg_avi};
use favlo_codec::avi::{FrameRate, parse};
use favlo_codec::{CodecError, mp4_from_avi};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn small_avi() -> (Vec<u8>, Vec<Vec<u8>>) {
    let frames = common::frames_rgb(16, 8, 3, 1);
    let jpegs: Vec<Vec<u8>> = frames.iter().map(|f| jpeg(f, 16, 8)).collect();
    (mjpeg_avi(16, 8, 24000, 1001, &jpegs), jpegs)
}

#[test]
fn parses_size_rate_and_frames() {
    let (avi, jpegs) = small_avi();
    let p = parse(&avi).unwrap();
    assert_eq!((p.width, p.height), (16, 8));
    assert_eq!(
        p.rate,
        FrameRate {
            rate: 24000,
            scale: 1001
        }
    );
    assert_eq!(p.frames.len(), 3);
    for (got, want) in p.frames.iter().zip(&jpegs) {
        assert_eq!(*got, &want[..]);
    }
}

#[test]
fn every_truncation_is_an_error() {
    let (avi, _) = small_avi();
    for len in 0..avi.len() {
        match mp4_from_avi(&avi[..len]) {
            Err(CodecError::Avi { reason }) => assert!(!reason.is_empty()),
            other => panic!("truncated to {len}: {other:?}"),
        }
    }
    assert!(mp4_from_avi(&avi).is_ok());
}

#[test]
fn truncation_names_the_problem() {
    let (avi, _) = small_avi();
    let err = parse(&avi[..avi.len() - 10]).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
    let err = parse(b"RIFF\x04\0\0\0WAVE").unwrap_err().to_string();
    assert!(err.contains("not a RIFF AVI"), "{err}");
}

#[test]
fn garbage_never_panics() {
    let mut rng = StdRng::seed_from_u64(42);
    for len in [0usize, 1, 11, 12, 64, 1000] {
        for _ in 0..50 {
            let mut junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            assert!(mp4_from_avi(&junk).is_err());
            // Valid magic, random body: exercises the chunk walker.
            if len >= 12 {
                junk[..4].copy_from_slice(b"RIFF");
                junk[4..8].copy_from_slice(&((len - 8) as u32).to_le_bytes());
                junk[8..12].copy_from_slice(b"AVI ");
                assert!(mp4_from_avi(&junk).is_err());
            }
        }
    }
}

/// Flipping bytes of a valid file gives an error or a valid MP4, never a panic.
#[test]
fn corrupted_bytes_never_panic() {
    let (avi, _) = small_avi();
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let mut bad = avi.clone();
        for _ in 0..rng.random_range(1..4) {
            let i = rng.random_range(0..bad.len());
            bad[i] = rng.random();
        }
        let _ = mp4_from_avi(&bad);
    }
}

#[test]
fn broken_jpeg_and_wrong_size_are_named() {
    let (_, jpegs) = small_avi();
    let mut broken = jpegs.clone();
    broken[1] = vec![0xff, 0xd8, 0xff, 0x00, 1, 2, 3];
    match mp4_from_avi(&mjpeg_avi(16, 8, 25, 1, &broken)) {
        Err(CodecError::Jpeg { index: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    match mp4_from_avi(&mjpeg_avi(16, 16, 25, 1, &jpegs)) {
        Err(CodecError::FrameSize {
            index: 0,
            got_height: 8,
            height: 16,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_frames_is_an_error() {
    let err = parse(&mjpeg_avi(16, 8, 25, 1, &[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no video frames"), "{err}");
}

/// A header declaring a huge picture is refused before any JPEG is decoded.
#[test]
fn oversized_declaration_is_refused() {
    let (_, jpegs) = small_avi();
    let err = mp4_from_avi(&mjpeg_avi(60_000, 60_000, 25, 1, &jpegs))
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceeds"), "{err}");
    match mp4_from_avi(&mjpeg_avi(4000, 2000, 25, 1, &jpegs)) {
        Err(CodecError::Avi { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// An AVI written by FFmpeg (tools/fixtures/codec_avi_fixture.py): JUNK
/// padding, an audio stream before the video (`00wb` chunks interleaved with
/// `01dc`). The reader must return exactly the packets FFmpeg's demuxer reads.
#[test]
fn ffmpeg_written_avi_matches_ffmpeg_demuxer() {
    use sha2::{Digest, Sha256};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let avi = std::fs::read(format!("{dir}ffmpeg_mjpeg.avi")).unwrap();
    let want = std::fs::read_to_string(format!("{dir}ffmpeg_mjpeg.txt")).unwrap();
    let field = |k: &str| {
        want.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')))
            .unwrap()
            .to_string()
    };
    let p = parse(&avi).unwrap();
    assert_eq!(p.width.to_string(), field("width"));
    assert_eq!(p.height.to_string(), field("height"));
    let (num, den) = field("rate")
        .split_once('/')
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap();
    assert_eq!(u64::from(p.rate.rate) * den, num * u64::from(p.rate.scale));
    let hashes: Vec<String> = want
        .lines()
        .filter_map(|l| l.strip_prefix("sha256 "))
        .map(str::to_string)
        .collect();
    assert_eq!(hashes.len().to_string(), field("frames"));
    let got: Vec<String> = p
        .frames
        .iter()
        .map(|f| {
            Sha256::digest(f)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect();
    assert_eq!(got, hashes);
    assert!(mp4_from_avi(&avi).is_ok());
}
