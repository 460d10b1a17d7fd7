//! Preemption and determinism of both pipelines (random weights, no checkpoint
//! needed): the packed bytes of a job are identical whether it was preempted 0,
//! 1, 2 or at every stage; cancel stops it; a foreign hold is refused; the PNG
//! and the AVI decode back to the generated pixels (PNG exactly, JPEG frames
//! within a mean absolute error of 12 levels (random
//! weights give noise-like frames, JPEG's worst case)).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ledger, random_generator, run_with_preempts};
use favlo_dcgan::{DcganImage, DcganVideo};
use favlo_pipeline::{Control, MediaError, MediaHold, MediaOutput, MediaPaused, MediaPipeline};
use serde_json::json;

#[test]
fn image_bytes_do_not_depend_on_preemption() {
    let (l, o) = ledger();
    let mut p = DcganImage::new(random_generator(&l, &o));
    let job = p
        .parse("img-1", &json!({"n": 3, "seed": 77, "prompt": "ignored"}))
        .unwrap();
    let (first, holds) = run_with_preempts(&mut p, &job, 0);
    assert_eq!(holds, 0);
    let want = p.pack(&job, first.clone()).unwrap();
    assert_eq!(want.mime, "image/png");
    for preempts in [1, 2, DcganImage::stages() - 1, 100] {
        let (out, holds) = run_with_preempts(&mut p, &job, preempts);
        assert_eq!(holds, preempts.min(DcganImage::stages() - 1));
        assert_eq!(
            p.pack(&job, out).unwrap().bytes,
            want.bytes,
            "{preempts} preemptions"
        );
    }
    // The PNG decodes to the generated pixels; a 3-image grid is 4·66+2 wide... for 3: 3·66+2.
    let MediaOutput::Image {
        width,
        height,
        pixels,
        ..
    } = first
    else {
        panic!()
    };
    assert_eq!((width, height), (3 * 66 + 2, 66 + 2));
    let back = image::load_from_memory(&want.bytes).unwrap().to_rgb8();
    assert_eq!(back.as_raw(), &pixels);
    // Not a constant image: the generator did something.
    assert!(pixels.iter().any(|v| *v != pixels[0]));
    // Another seed gives another image.
    let other = p.parse("img-2", &json!({"n": 3, "seed": 78})).unwrap();
    let (o2, _) = run_with_preempts(&mut p, &other, 0);
    assert_ne!(p.pack(&other, o2).unwrap().bytes, want.bytes);
}

#[test]
fn image_n_images_match_single_images() {
    // Batching is invisible: image i of an n-image request equals the same
    // latent run alone (checks the per-image independence the chunking relies on).
    let (l, o) = ledger();
    let mut g = random_generator(&l, &o);
    let z = favlo_dcgan::noise::latents(5, 4, 100);
    let all = g.forward(&z, 4).unwrap().to_vec();
    for i in 0..4 {
        let one = g.forward(&z[i * 100..(i + 1) * 100], 1).unwrap().to_vec();
        assert_eq!(one, all[i * 12288..(i + 1) * 12288].to_vec());
    }
}

#[test]
fn video_bytes_do_not_depend_on_preemption() {
    let (l, o) = ledger();
    let mut p = DcganVideo::new(random_generator(&l, &o));
    let job = p
        .parse("vid-1", &json!({"seconds": 2, "fps": 10, "seed": 3}))
        .unwrap();
    let stages = DcganVideo::stages(20);
    assert_eq!(stages, 3);
    let (first, _) = run_with_preempts(&mut p, &job, 0);
    let want = p.pack(&job, first.clone()).unwrap();
    assert_eq!(
        (want.mime.as_str(), want.extension.as_str()),
        ("video/x-msvideo", "avi")
    );
    for preempts in [1, 2, 50] {
        let (out, holds) = run_with_preempts(&mut p, &job, preempts);
        assert_eq!(holds, preempts.min(stages - 1));
        assert_eq!(out, first);
        assert_eq!(
            p.pack(&job, out).unwrap().bytes,
            want.bytes,
            "{preempts} preemptions"
        );
    }
    let MediaOutput::Video {
        frames, fps, width, ..
    } = first
    else {
        panic!()
    };
    assert_eq!((frames.len(), fps, width), (20, 10.0, 64));
    // Frames move: consecutive frames differ, but less than unrelated ones.
    let diff = |a: &[u8], b: &[u8]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| x.abs_diff(*y) as u64)
            .sum::<u64>()
    };
    assert!(diff(&frames[0], &frames[1]) > 0);
    // JPEG frames inside the AVI decode close to the raw frames.
    let jpeg_at = |avi: &[u8], i: usize| -> Vec<u8> {
        let mut at = 0;
        let mut seen = 0;
        while at + 8 <= avi.len() {
            if &avi[at..at + 4] == b"00dc" {
                let len = u32::from_le_bytes(avi[at + 4..at + 8].try_into().unwrap()) as usize;
                if seen == i {
                    return avi[at + 8..at + 8 + len].to_vec();
                }
                seen += 1;
                at += 8 + len + len % 2;
            } else {
                at += 1;
            }
        }
        panic!("frame {i} not found")
    };
    for i in [0, 7, 19] {
        let jpg = jpeg_at(&want.bytes, i);
        let back = image::load_from_memory(&jpg).unwrap().to_rgb8();
        let mae = diff(back.as_raw(), &frames[i]) as f64 / frames[i].len() as f64;
        assert_eq!((back.width(), back.height()), (64, 64));
        // Random weights make high-frequency frames, JPEG's worst case (q90).
        assert!(mae < 12.0, "frame {i}: mean abs error {mae}");
    }
}

#[test]
fn cancel_and_foreign_holds() {
    let (l, o) = ledger();
    let mut p = DcganVideo::new(random_generator(&l, &o));
    let job = p
        .parse("vid-2", &json!({"seconds": 1, "fps": 16, "seed": 1}))
        .unwrap();
    let c = Control::new();
    c.cancel();
    assert!(matches!(
        p.generate(&job, None, &c),
        Err(MediaError::Paused(MediaPaused::Cancel))
    ));
    // Cancel after a preemption: the resumed call stops at its next boundary.
    let c = Control::new();
    c.preempt();
    let Err(MediaError::Paused(MediaPaused::Preempt(h))) = p.generate(&job, None, &c) else {
        panic!()
    };
    c.clear_preempt();
    c.cancel();
    assert!(matches!(
        p.generate(&job, Some(h), &c),
        Err(MediaError::Paused(MediaPaused::Cancel))
    ));
    // A hold of another job or another pipeline is an internal error, not a panic.
    let c = Control::new();
    c.preempt();
    let Err(MediaError::Paused(MediaPaused::Preempt(h))) = p.generate(&job, None, &c) else {
        panic!()
    };
    let other = p
        .parse("vid-3", &json!({"seconds": 1, "fps": 16, "seed": 1}))
        .unwrap();
    assert!(matches!(
        p.generate(&other, Some(h), &Control::new()),
        Err(MediaError::Failed(_))
    ));
    let junk = MediaHold {
        stage: 1,
        state: Box::new(5u32),
    };
    assert!(matches!(
        p.generate(&job, Some(junk), &Control::new()),
        Err(MediaError::Failed(_))
    ));
    let mut img = DcganImage::new(random_generator(&l, &o));
    let ij = img.parse("img", &json!({"seed": 1})).unwrap();
    let junk = MediaHold {
        stage: 1,
        state: Box::new(5u32),
    };
    assert!(matches!(
        img.generate(&ij, Some(junk), &Control::new()),
        Err(MediaError::Failed(_))
    ));
}

#[test]
fn ledger_accounts_every_byte_and_refuses_when_full() {
    use favlo_runtime::device::Device;
    use favlo_runtime::ledger::{Ledger, Owner};
    let (l, o) = ledger();
    let g = random_generator(&l, &o);
    let want = favlo_dcgan::generator::weight_bytes()
        + favlo_dcgan::generator::scratch_bytes(favlo_dcgan::generator::MAX_BATCH);
    assert_eq!(l.owner_bytes(&o), want);
    drop(g);
    assert_eq!(l.sweep(&o).unwrap(), 0);
    // A ledger too small for weights + scratch: DoesNotFit before loading anything.
    let small = Ledger::with_fixed_budget(Device::Cpu, 1 << 20, None);
    let spec = favlo_pipeline::ModelSpec {
        id: "dcgan-faces".into(),
        family: "dcgan".into(),
        kind: favlo_pipeline::ModelKind::Image,
        dir: "/nonexistent".into(),
        files: vec!["weights.tar".into()],
        context_length: None,
        defaults: json!({}),
    };
    let owner = Owner::mint("dcgan");
    let e = favlo_dcgan::open_image(&spec, &small, &owner, Device::Cpu)
        .err()
        .unwrap();
    assert_eq!(e.kind(), favlo_pipeline::ErrorKind::DoesNotFit);
}
