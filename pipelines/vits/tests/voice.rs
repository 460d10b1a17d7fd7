//! The speech pipeline end to end on the real Piper voice: a two-sentence job
//! preempted after its first sentence and resumed gives byte-identical WAV
//! bytes to the uninterrupted run; the audio is speech-length with energy
//! (duration 1–15 s, RMS ≥ 0.02, i.e. well above silence), and when `sox` is on
//! PATH its `stat` agrees on length (±1 ms) and RMS (±2 %); cancel and bad bodies
//! behave; FLAC decodes to the WAV's samples; the owner is swept clean.
//!
//! Needs the real voice (`FAVLO_TEST_PIPER_ONNX`, skips with a note when
//! unset) and the `espeak-ng` program.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Cursor;
use std::path::PathBuf;

use favlo_pipeline::{Control, ErrorKind, MediaError, MediaOutput, MediaPaused, MediaPipeline};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use serde_json::json;

const TEXT: &str =
    "The quick brown fox jumps over the lazy dog. Is this the right way to the station?";

fn onnx_path() -> Option<PathBuf> {
    match std::env::var_os("FAVLO_TEST_PIPER_ONNX") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
            None
        }
    }
}

fn samples_of(out: &MediaOutput) -> &[f32] {
    match out {
        MediaOutput::Audio { samples, .. } => samples,
        other => panic!("not audio: {other:?}"),
    }
}

/// `sox <wav> -n stat` → (length seconds, RMS amplitude), when sox exists.
fn sox_stat(wav: &[u8]) -> Option<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!("favlo-vits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join("speech.wav");
    std::fs::write(&path, wav).ok()?;
    let out = std::process::Command::new("sox")
        .arg(&path)
        .args(["-n", "stat"])
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(':').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some((field("Length (seconds)")?, field("RMS     amplitude")?))
}

#[test]
fn speech_job_preempts_losslessly_and_sounds() {
    let Some(path) = onnx_path() else { return };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-voice");
    let mut voice = match favlo_vits::open_path(&path, &ledger, &owner) {
        Ok(v) => v,
        Err(favlo_vits::VitsError::Espeak { reason }) => {
            eprintln!("skipped: {reason}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let body = json!({"text": TEXT, "seed": 7});
    let job = voice.parse("job-1", &body).unwrap();
    assert_eq!(voice.sentences(TEXT).unwrap().len(), 2);
    assert_eq!(voice.stages(&job), Some(2));

    let t0 = std::time::Instant::now();
    let full = voice.generate(&job, None, &Control::new()).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let wav = voice.pack(&job, full.clone()).unwrap();
    assert_eq!(
        (wav.mime.as_str(), wav.extension.as_str()),
        ("audio/wav", "wav")
    );

    // Preempted after sentence 1, resumed from the hold: the same bytes.
    let control = Control::new();
    control.preempt();
    let hold = match voice.generate(&job, None, &control) {
        Err(MediaError::Paused(MediaPaused::Preempt(h))) => h,
        other => panic!("expected a preempt, got {other:?}"),
    };
    assert_eq!(hold.stage, 1);
    control.clear_preempt();
    let resumed = voice.generate(&job, Some(hold), &control).unwrap();
    assert_eq!(voice.pack(&job, resumed).unwrap().bytes, wav.bytes);

    // Speech-length audio with energy.
    let x = samples_of(&full);
    let dur = x.len() as f64 / 22050.0;
    let rms = (x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
    eprintln!(
        "{dur:.2} s of audio, RMS {rms:.4}, synthesized in {secs:.2} s (RTF {:.3})",
        secs / dur
    );
    assert!((1.0..15.0).contains(&dur), "duration {dur}");
    assert!(rms >= 0.02, "RMS {rms} is silence");
    let mut r = hound::WavReader::new(Cursor::new(&wav.bytes)).unwrap();
    assert_eq!(
        (
            r.spec().sample_rate,
            r.spec().channels,
            r.spec().bits_per_sample
        ),
        (22050, 1, 16)
    );
    assert_eq!(r.samples::<i16>().count(), x.len());
    match sox_stat(&wav.bytes) {
        Some((len, sox_rms)) => {
            eprintln!("sox stat: length {len} s, RMS {sox_rms}");
            assert!((len - dur).abs() < 1e-3, "sox length {len} vs {dur}");
            assert!(
                (sox_rms - rms).abs() <= 0.02 * rms,
                "sox RMS {sox_rms} vs {rms}"
            );
        }
        None => eprintln!("note: sox not found, its stat check skipped"),
    }

    // A FLAC request still saves the WAV (the store derives the FLAC from it);
    // the crate's own FLAC encoder decodes to the same samples.
    let fjob = voice
        .parse(
            "job-2",
            &json!({"input": "Hello, world!", "seed": 1, "response_format": "flac"}),
        )
        .unwrap();
    let fout = voice.generate(&fjob, None, &Control::new()).unwrap();
    let want = favlo_vits::audio::to_i16(samples_of(&fout));
    let saved = voice.pack(&fjob, fout.clone()).unwrap();
    assert_eq!(
        (saved.mime.as_str(), saved.extension.as_str()),
        ("audio/wav", "wav")
    );
    let flac = favlo_vits::audio::flac(samples_of(&fout), 22050).unwrap();
    let mut fr = claxon::FlacReader::new(Cursor::new(flac)).unwrap();
    let got: Vec<i16> = fr.samples().map(|s| s.unwrap() as i16).collect();
    assert_eq!(got, want);

    // Cancel, bad bodies, text without phonemes.
    let c = Control::new();
    c.cancel();
    assert!(matches!(
        voice.generate(&job, None, &c),
        Err(MediaError::Paused(MediaPaused::Cancel))
    ));
    assert_eq!(
        voice.parse("j", &json!({"text": ""})).unwrap_err().kind(),
        ErrorKind::InvalidRequest
    );
    let empty = voice.parse("j3", &json!({"text": "..."})).unwrap();
    match voice.generate(&empty, None, &Control::new()) {
        Err(MediaError::Failed(e)) => assert_eq!(e.kind(), ErrorKind::InvalidRequest),
        other => panic!("expected invalid text, got {other:?}"),
    }

    drop(voice);
    ledger.sweep(&owner).unwrap();
}
