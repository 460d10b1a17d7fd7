//! The HiFi-GAN decoder (`favlo_vits::cuda::CudaDecoder`), the reverse flow
//! (`favlo_vits::cuda::CudaFlow`), the text encoder and the duration predictor on the
//! GPU against the CPU modules on the real Piper voice's weights, and the whole voice
//! opened with `Device::Cuda(0)` against the same voice on the CPU.
//!
//! - `decoder_on_gpu_matches_cpu`: both decoders on the flow outputs of the onnxruntime
//!   fixture (`tests/fixtures/vits_ref.safetensors`, cases a and b: 94 and 200 frames);
//!   max |Δ| of the waveform ≤ 1e-4 (printed). Why 1e-4: both are exact f32 and differ
//!   only in summation order (the CPU's blocked GEMM vs the GPU's per-output FMA chain
//!   over up to 256 channels × 16 taps), through 23 convolutions whose tensors reach
//!   |x| ~ 10–100 before the final tanh; the CPU path is itself within 3.6e-5 *relative*
//!   of onnxruntime. Reads `FAVLO_TEST_PIPER_DEC_ONNX` (a decoder-only cut of the voice,
//!   `tools/fixtures/vits_decoder_cut.py`, 6.7 MB) or else `FAVLO_TEST_PIPER_ONNX`.
//! - `flow_on_gpu_matches_cpu`: the device flow's output (downloaded) vs
//!   `Flow::reverse` on seeded standard-normal `z_p` of 94 and 200 frames: max |Δ| ≤
//!   1e-4 · max |z| (printed). Why: exact f32 on both sides, only summation orders
//!   differ (4 couplings × 4 WaveNet layers of k5 convolutions over 192 channels; the
//!   CPU gate's polynomial exp is within ~1e-7); the same step sequence on an f64 host
//!   backend (`cuda::flow_plan` unit test) is within 5e-7 · max |z| of the CPU flow.
//!   Needs a whole voice (`FAVLO_TEST_PIPER_ONNX`).
//! - `encoder_on_gpu_matches_cpu`: the device text encoder (`CudaEncoder`) vs
//!   `TextEncoder::run` on the fixture's ids (cases a and b: 33 and 75 phonemes): hidden
//!   states and `[m_p; logs_p]` each within 1e-4 · their max |·| (printed). Why: exact
//!   f32 on both sides, 6 layers of 1×1 / k3 convolutions, attention and layer norms
//!   whose summation orders differ; the CPU encoder is itself within 1.1e-6 of
//!   onnxruntime. Needs a whole voice (`FAVLO_TEST_PIPER_ONNX`).
//! - `durations_on_gpu_match_cpu`: the device duration predictor (`CudaDuration`) vs
//!   `DurationPredictor::run` on the fixture's ids (cases a and b, 33 and 75 phonemes;
//!   noise_w 0.8 and 0) with the CPU path's own noise stream (`Normals::for_sentence(7,
//!   0)`, scaled on the host): `logw` within 1e-4 · max |logw| both for the predictor
//!   alone (fed the CPU encoder's states) and chained after the device encoder (states
//!   never leaving the device), and equal frames per phoneme after `ceil`. Why 1e-4:
//!   exact f32 on both sides (the spline kernel repeats the CPU's f32 operations, only
//!   exp / log / erf ulps and convolution summation orders differ); the same step
//!   sequence on an f64 host backend (`cuda::dp_seq` unit test) is within 3.2e-6 of the
//!   CPU. Needs a whole voice (`FAVLO_TEST_PIPER_ONNX`).
//! - `voice_on_cuda_matches_cpu`: `Vits::open_on(.., Device::Cuda(0), ..)` (encoder,
//!   durations, flow and decoder on the GPU, the encoder's states handed to the
//!   durations and `z` from the flow to the decoder on the device) synthesizes the
//!   fixture's case-b ids (seeded noise, scales 0.667/1/0.8) like `Vits::open`: same
//!   frame counts per phoneme (a 1e-6 difference in `logw` could in principle move a
//!   `ceil` across an integer, which would show here first), the traced `logw`, `m_p`,
//!   `logs_p` and flow output each within 1e-4 · max |·|, the waveform max |Δ| ≤ 1e-4. Needs a whole voice (`FAVLO_TEST_PIPER_ONNX`; any copy of
//!   the voice's weights, e.g. the bf16-rounded one of
//!   `tools/fixtures/vits_voice_bf16.py`, since both sides use the same file).
//!
//! Without CUDA each test prints a loud SKIPPED line and passes, unless
//! `FAVLO_REQUIRE_CUDA=1`; without the voice it skips with a note.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use favlo_runtime::cuda::{CudaContext, CudaError};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner, SpanKind};
use favlo_vits::cuda::{CudaDecoder, CudaDuration, CudaEncoder, CudaFlow};
use favlo_vits::model::{Decoder, DurationPredictor, Flow, TextEncoder};
use favlo_vits::noise::Normals;
use favlo_vits::weights::{Loader, Workspace};
use favlo_vits::{Noise, Scales, Trace, Vits};
use safetensors::SafeTensors;

/// Samples per second of the voice.
const RATE: f64 = 22_050.0;
const BOUND: f64 = 1e-4;

fn cuda_or_skip(what: &str) -> bool {
    match CudaContext::probe() {
        Ok(n) if n > 0 => true,
        Ok(_) => skip(what, "no CUDA device"),
        Err(CudaError::Unavailable { reason }) => skip(what, &reason),
        Err(e) => panic!("CUDA present but failed to probe: {e}"),
    }
}

fn skip(what: &str, reason: &str) -> bool {
    if std::env::var("FAVLO_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
        panic!("FAVLO_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
    }
    eprintln!("\n**** SKIPPED: CUDA unavailable ({reason}); {what} did not run ****\n");
    false
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from)
}

fn fixture() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vits_ref.safetensors"
    ))
    .unwrap()
}

fn f32s(st: &SafeTensors<'_>, name: &str) -> Vec<f32> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn i64s(st: &SafeTensors<'_>, name: &str) -> Vec<i64> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// max |a − b| / max |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let peak = b.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
    max_abs_diff(a, b) / peak.max(1e-30)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs()))
}

/// Median seconds of `reps` runs of `f`.
fn median_s(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

#[test]
fn decoder_on_gpu_matches_cpu() {
    let Some(path) =
        env_path("FAVLO_TEST_PIPER_DEC_ONNX").or_else(|| env_path("FAVLO_TEST_PIPER_ONNX"))
    else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_DEC_ONNX or FAVLO_TEST_PIPER_ONNX");
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-cuda-test");
    let loader = Loader::open(&path, &ledger, &owner).unwrap();
    let dec = Decoder::load(&loader).unwrap();
    let ws = Workspace::new(&ledger, &owner);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    // The weights are the voice's (a cut carries them unchanged): the CPU decoder on
    // onnxruntime's flow output gives onnxruntime's waveform (onnxruntime_ref's bound).
    for case in ["a", "b"] {
        let z = f32s(&st, &format!("{case}_z"));
        let cpu = dec.run(&ws, &z, z.len() / 192).unwrap();
        let want = f32s(&st, &format!("{case}_audio"));
        let peak = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        let rel = max_abs_diff(&cpu, &want) / peak;
        println!("cpu decoder case {case} vs onnxruntime: rel err {rel:.2e} (bound 1e-3)");
        assert!(rel <= 1e-3, "case {case}: {rel:e}");
    }
    if !cuda_or_skip("decoder_on_gpu_matches_cpu") {
        return;
    }
    let gpu = CudaDecoder::open(&dec, 0, &owner, 2600).unwrap();
    for case in ["a", "b"] {
        let z = f32s(&st, &format!("{case}_z"));
        let frames = z.len() / 192;
        let cpu = dec.run(&ws, &z, frames).unwrap();
        let got = gpu.run(&z, frames).unwrap();
        assert_eq!(got.len(), cpu.len(), "case {case}: sample count");
        assert_eq!(got.len(), frames * dec.hop());
        let d = max_abs_diff(&got, &cpu);
        let peak = cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
        let secs = cpu.len() as f64 / RATE;
        let t_cpu = median_s(3, || drop(dec.run(&ws, &z, frames).unwrap()));
        let t_gpu = median_s(5, || drop(gpu.run(&z, frames).unwrap()));
        println!(
            "decoder case {case}: {frames} frames, {} samples ({secs:.2} s), peak {peak:.3}: \
             max|gpu − cpu| {d:.3e} (bound {BOUND:e}); decoder RTF cpu {:.4} ({:.1} ms), \
             gpu {:.5} ({:.2} ms, upload + download included)",
            cpu.len(),
            t_cpu / secs,
            t_cpu * 1e3,
            t_gpu / secs,
            t_gpu * 1e3
        );
        assert!(d <= BOUND, "case {case}: max |Δ| {d:e} > {BOUND:e}");
    }
}

#[test]
fn flow_on_gpu_matches_cpu() {
    let Some(path) = env_path("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-cuda-flow");
    let loader = Loader::open(&path, &ledger, &owner).unwrap();
    let flow = Flow::load(&loader).unwrap();
    let ws = Workspace::new(&ledger, &owner);
    let c = flow.channels();
    assert_eq!(c, 192);
    if !cuda_or_skip("flow_on_gpu_matches_cpu") {
        return;
    }
    let ctx = CudaContext::open(0, None).unwrap();
    let gpu = CudaFlow::open(&flow, &ctx, &owner, 2600).unwrap();
    assert_eq!(gpu.channels(), c);
    for (frames, seed) in [(94usize, 11u64), (200, 12)] {
        let z_p = Normals::for_sentence(seed, 0).take(c * frames);
        let mut want = z_p.clone();
        flow.reverse(&ws, &mut want, frames).unwrap();
        let zd = gpu.reverse(&z_p, frames).unwrap();
        let mut got = ctx.download(&zd).unwrap();
        assert!(got.len() >= c * frames);
        got.truncate(c * frames);
        let rel = rel_diff(&got, &want);
        let t_cpu = median_s(3, || {
            let mut z = z_p.clone();
            flow.reverse(&ws, &mut z, frames).unwrap();
        });
        let t_gpu = median_s(5, || {
            let zd = gpu.reverse(&z_p, frames).unwrap();
            ctx.synchronize().unwrap();
            drop(zd);
        });
        println!(
            "flow {frames} frames: max|gpu − cpu| / max|cpu| {rel:.3e} (bound 1e-4); \
             cpu {:.2} ms, gpu {:.2} ms (upload included)",
            t_cpu * 1e3,
            t_gpu * 1e3
        );
        assert!(rel <= 1e-4, "{frames} frames: {rel:e}");
    }
}

#[test]
fn encoder_on_gpu_matches_cpu() {
    let Some(path) = env_path("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-cuda-encoder");
    let loader = Loader::open(&path, &ledger, &owner).unwrap();
    let enc = TextEncoder::load(&loader).unwrap();
    let ws = Workspace::new(&ledger, &owner);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    if !cuda_or_skip("encoder_on_gpu_matches_cpu") {
        return;
    }
    let ctx = CudaContext::open(0, None).unwrap();
    let gpu = CudaEncoder::open(&enc, &ctx, &owner).unwrap();
    for case in ["a", "b"] {
        let ids = i64s(&st, &format!("{case}_ids"));
        let t = ids.len();
        let cpu = enc.run(&ws, &ids).unwrap();
        let x0 = enc.embed(&ws, &ids).unwrap();
        let got = gpu.run(&x0, t).unwrap();
        let c = cpu.m.len() / t;
        assert_eq!(got.x.len(), cpu.x.len());
        assert_eq!(got.stats.len(), 2 * c * t);
        let ex = rel_diff(&got.x, &cpu.x);
        let em = rel_diff(&got.stats[..c * t], &cpu.m);
        let el = rel_diff(&got.stats[c * t..], &cpu.logs);
        drop(cpu);
        let t_cpu = median_s(3, || drop(enc.run(&ws, &ids).unwrap()));
        let t_gpu = median_s(5, || drop(gpu.run(&x0, t).unwrap()));
        println!(
            "encoder case {case} ({t} phonemes): rel |gpu − cpu| x {ex:.3e}, m_p {em:.3e}, \
             logs_p {el:.3e} (bound 1e-4); cpu {:.2} ms, gpu {:.2} ms (transfers included)",
            t_cpu * 1e3,
            t_gpu * 1e3
        );
        assert!(ex <= 1e-4 && em <= 1e-4 && el <= 1e-4, "case {case}");
    }
}

#[test]
fn durations_on_gpu_match_cpu() {
    let Some(path) = env_path("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-cuda-durations");
    let loader = Loader::open(&path, &ledger, &owner).unwrap();
    let enc = TextEncoder::load(&loader).unwrap();
    let dp = DurationPredictor::load(&loader).unwrap();
    let ws = Workspace::new(&ledger, &owner);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    if !cuda_or_skip("durations_on_gpu_match_cpu") {
        return;
    }
    let ctx = CudaContext::open(0, None).unwrap();
    let genc = CudaEncoder::open(&enc, &ctx, &owner).unwrap();
    let gdp = CudaDuration::open(&dp, &ctx, &owner).unwrap();
    for (case, noise_w) in [("a", 0.8f32), ("b", 0.8), ("b", 0.0)] {
        let ids = i64s(&st, &format!("{case}_ids"));
        let t = ids.len();
        // The CPU path's own noise stream, scaled on the host as Vits::synthesize does.
        let noise: Vec<f32> = Normals::for_sentence(7, 0)
            .take(2 * t)
            .iter()
            .map(|v| v * noise_w)
            .collect();
        let cpu_enc = enc.run(&ws, &ids).unwrap();
        let want = dp.run(&ws, &cpu_enc.x, t, &noise).unwrap();
        // The device predictor alone, on the CPU encoder's states.
        let xc = ctx.upload(&owner, SpanKind::Scratch, &cpu_enc.x).unwrap();
        let alone = gdp.run(&xc, t, &noise).unwrap();
        drop(xc);
        // Encoder and predictor on the device, the hidden states never leaving it.
        let x0 = enc.embed(&ws, &ids).unwrap();
        let (xd, _) = genc.run_on_device(&x0, t).unwrap();
        let got = gdp.run(&xd, t, &noise).unwrap();
        assert_eq!(got.len(), t);
        let e_alone = rel_diff(&alone, &want);
        let e_chain = rel_diff(&got, &want);
        let t_cpu = median_s(5, || drop(dp.run(&ws, &cpu_enc.x, t, &noise).unwrap()));
        let t_gpu = median_s(5, || drop(gdp.run(&xd, t, &noise).unwrap()));
        println!(
            "durations case {case} ({t} phonemes, noise_w {noise_w}): max|gpu − cpu| / \
             max|cpu| of logw: predictor alone {e_alone:.3e}, encoder + predictor \
             {e_chain:.3e} (bound 1e-4); cpu {:.2} ms, gpu {:.2} ms (noise up, logw down)",
            t_cpu * 1e3,
            t_gpu * 1e3
        );
        assert!(e_alone <= 1e-4 && e_chain <= 1e-4, "case {case}");
        assert_eq!(
            Vits::frames_of(&got, 1.0),
            Vits::frames_of(&want, 1.0),
            "case {case}: frames per phoneme"
        );
    }
}

#[test]
fn voice_on_cuda_matches_cpu() {
    let Some(path) = env_path("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
        return;
    };
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-cuda-voice");
    let cpu = Vits::open(&path, &ledger, &owner).unwrap();
    assert_eq!(cpu.device(), Device::Cpu);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ids = i64s(&st, "b_ids");
    let scales = Scales {
        noise_scale: 0.667,
        length_scale: 1.0,
        noise_w: 0.8,
    };
    // Seeded noise streams (not the fixture's tensors), so the test also runs on a
    // voice whose durations differ from onnxruntime's (the bf16-rounded copy).
    let run = |v: &Vits| {
        let mut s = Normals::for_sentence(7, 0);
        v.synthesize(&ids, scales, Noise::Stream(&mut s), 2600, None)
            .unwrap()
    };
    let traced = |v: &Vits| {
        let mut s = Normals::for_sentence(7, 0);
        let mut t = Trace::default();
        let w = v
            .synthesize(&ids, scales, Noise::Stream(&mut s), 2600, Some(&mut t))
            .unwrap();
        (w, t)
    };
    let (a, ta) = traced(&cpu);
    assert!(a.len() > 22_050 / 2, "{} samples", a.len());
    if !cuda_or_skip("voice_on_cuda_matches_cpu") {
        return;
    }
    let gpu = Vits::open_on(&path, &ledger, &owner, Device::Cuda(0), 2600).unwrap();
    assert_eq!(gpu.device(), Device::Cuda(0));
    let (b, tb) = traced(&gpu);
    assert_eq!(a.len(), b.len());
    assert_eq!(ta.w_ceil, tb.w_ceil, "frames per phoneme");
    let wrel = rel_diff(&tb.logw, &ta.logw);
    println!(
        "voice: logw (durations on the GPU) max|gpu − cpu| / max|cpu| {wrel:.3e} (bound 1e-4)"
    );
    assert!(wrel <= 1e-4, "logw: {wrel:e}");
    let mrel = rel_diff(&tb.m_p, &ta.m_p);
    let lrel = rel_diff(&tb.logs_p, &ta.logs_p);
    let zrel = rel_diff(&tb.z, &ta.z);
    println!(
        "voice: max|gpu − cpu| / max|cpu|: m_p {mrel:.3e}, logs_p {lrel:.3e}, flow output \
         {zrel:.3e} (bound 1e-4 each)"
    );
    assert!(mrel <= 1e-4 && lrel <= 1e-4, "encoder: {mrel:e} / {lrel:e}");
    assert!(zrel <= 1e-4, "flow output: {zrel:e}");
    let d = max_abs_diff(&b, &a);
    let secs = a.len() as f64 / RATE;
    let t_cpu = median_s(3, || drop(run(&cpu)));
    let t_gpu = median_s(3, || drop(run(&gpu)));
    println!(
        "voice: {} samples ({secs:.2} s): max|gpu − cpu| {d:.3e} (bound {BOUND:e}); \
         sentence RTF all-CPU {:.4} ({:.1} ms), encoder + durations + flow + decoder on \
         the GPU {:.4} ({:.1} ms)",
        a.len(),
        t_cpu / secs,
        t_cpu * 1e3,
        t_gpu / secs,
        t_gpu * 1e3
    );
    assert!(d <= BOUND, "max |Δ| {d:e} > {BOUND:e}");
}
