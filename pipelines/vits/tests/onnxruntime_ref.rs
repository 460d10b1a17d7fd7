//! favlo-vits against onnxruntime running the same Piper ONNX file
//! (`tools/fixtures/vits_reference.py` → `tests/fixtures/vits_ref.safetensors`),
//! with the same phoneme ids and the same noise tensors: encoder statistics,
//! log-durations, the flow output and the waveform within relative error 1e-3
//! (max |a − b| / max |b|, f32), and the frame counts exactly.
//! Case a is deterministic (noise_scale = noise_w = 0); case b uses the noise
//! with scales (0.667, 1.2, 0.8).
//!
//! Needs the real voice: `FAVLO_TEST_PIPER_ONNX=/path/en_US-joe-medium.onnx`
//! (skips with a note when unset).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use favlo_vits::{Noise, Scales, Trace, Vits};
use safetensors::SafeTensors;

fn onnx_path() -> Option<PathBuf> {
    match std::env::var_os("FAVLO_TEST_PIPER_ONNX") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
            None
        }
    }
}

fn f32s(st: &SafeTensors<'_>, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap();
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn i64s(st: &SafeTensors<'_>, name: &str) -> Vec<i64> {
    let t = st.tensor(name).unwrap();
    t.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let max = want.iter().fold(0f64, |a, b| a.max(b.abs() as f64));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (g, w)| a.max((*g as f64 - *w as f64).abs()));
    err / max.max(1e-30)
}

#[test]
fn matches_onnxruntime() {
    let Some(path) = onnx_path() else { return };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-test");
    let vits = Vits::open(&path, &ledger, &owner).unwrap();
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vits_ref.safetensors"
    ))
    .unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    for case in ["a", "b"] {
        let ids = i64s(&st, &format!("{case}_ids"));
        let s = f32s(&st, &format!("{case}_scales"));
        let scales = Scales {
            noise_scale: s[0],
            length_scale: s[1],
            noise_w: s[2],
        };
        let dp = f32s(&st, &format!("{case}_noise_dp"));
        let z = f32s(&st, &format!("{case}_noise_z"));
        let mut trace = Trace::default();
        let t0 = std::time::Instant::now();
        let audio = vits
            .synthesize(
                &ids,
                scales,
                Noise::Given { dp: &dp, z: &z },
                100_000,
                Some(&mut trace),
            )
            .unwrap();
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(
            trace.w_ceil,
            f32s(&st, &format!("{case}_w_ceil")),
            "case {case}: frame counts"
        );
        let mut report = Vec::new();
        for (name, got) in [
            ("m_p", &trace.m_p),
            ("logs_p", &trace.logs_p),
            ("logw", &trace.logw),
            ("z", &trace.z),
            ("audio", &audio),
        ] {
            let e = rel_err(got, &f32s(&st, &format!("{case}_{name}")));
            report.push(format!("{name} {e:.2e}"));
            assert!(e <= 1e-3, "case {case}: {name} rel err {e}");
        }
        eprintln!(
            "case {case}: {} ids, {} samples in {secs:.3} s: {}",
            ids.len(),
            audio.len(),
            report.join(", ")
        );
    }
    // The output does not depend on the thread count (work is split by whole
    // output columns; reductions run in a fixed order).
    let ids = i64s(&st, "b_ids");
    let dp = f32s(&st, "b_noise_dp");
    let z = f32s(&st, "b_noise_z");
    let scales = Scales {
        noise_scale: 0.667,
        length_scale: 1.2,
        noise_w: 0.8,
    };
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            vits.synthesize(&ids, scales, Noise::Given { dp: &dp, z: &z }, 100_000, None)
                .unwrap()
        })
    };
    let (one, three) = (run(1), run(3));
    assert!(
        one.iter()
            .zip(&three)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    drop(vits);
    ledger.sweep(&owner).unwrap();
}
