//! Test only: the duration predictor's GPU step sequence ([`super::dp_seq::run`]) on the
//! CUDA kernels' own source (`conv1d.cu`, `rel_encoder.cu`, `vits_dp.cu`) compiled for
//! the host with g++ through `tools/cuda_host_emulate` (every thread run in turn, the
//! Rust wrappers' launch geometry), against the CPU [`DurationPredictor::run`] on the real
//! voice.
//!
//! Key design choice: this checks, without a GPU, that the kernels as written compute
//! the CPU's durations in f32 when chained the way the voice chains them (the f64 host
//! backend in `dp_seq.rs` checks the sequence, `check_vits_dp.py` each kernel alone).
//! It skips with a note when g++ or the voice is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};
use libloading::{Library, Symbol};

use super::dp_seq::tests::{max_err, noise};
use super::dp_seq::{DpBackend, DpWeights, run};
use crate::error::VitsError;
use crate::model::encoder::LN_EPS;
use crate::model::{DurationPredictor, TextEncoder, Vits};
use crate::weights::{Conv, ConvKind, Loader, Workspace};

type ConvFn = unsafe extern "C" fn(
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *mut f32,
    i32,
    i32,
    i32,
    i32,
    f32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
);
type DwFn = unsafe extern "C" fn(
    *const f32,
    *const f32,
    *const f32,
    *mut f32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
);
type LnFn = unsafe extern "C" fn(*const f32, *const f32, *const f32, *mut f32, i32, i32, f32);
type GeluFn = unsafe extern "C" fn(*mut f32, i64);
type GeluAddFn = unsafe extern "C" fn(*mut f32, *const f32, i64);
type SplineFn = unsafe extern "C" fn(*mut f32, *const f32, i32, i32, f32, f32);

/// A convolution's host copy: weight, bias, (in, out, kernel, dilation, padding).
struct EConv {
    w: Vec<f32>,
    b: Option<Vec<f32>>,
    dims: [i32; 5],
}

fn econv(c: &Conv) -> Result<EConv, VitsError> {
    let (ConvKind::Dense(g) | ConvKind::Depthwise(g)) = c.kind() else {
        panic!("transposed convolution in the duration predictor");
    };
    Ok(EConv {
        w: c.weight().to_vec(),
        b: c.bias().map(<[f32]>::to_vec),
        dims: [
            g.in_channels,
            g.out_channels,
            g.kernel,
            g.dilation,
            g.padding,
        ]
        .map(|v| v as i32),
    })
}

/// The emulated kernels (two libraries: `emu.cpp` and `emu_vits_dp.cpp`).
struct Emu {
    base: Library,
    dp: Library,
}

fn build(src: &Path, out: &Path) -> bool {
    std::process::Command::new("g++")
        .args([
            "-O2",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            "-Wno-unknown-pragmas",
            "-o",
        ])
        .arg(out)
        .arg(src)
        .status()
        .is_ok_and(|s| s.success())
}

impl Emu {
    fn open() -> Option<Emu> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/cuda_host_emulate");
        let tmp = std::env::temp_dir();
        let id = std::process::id();
        let (a, b) = (
            tmp.join(format!("favlo_emu_base_{id}.so")),
            tmp.join(format!("favlo_emu_dp_{id}.so")),
        );
        if !build(&dir.join("emu.cpp"), &a) || !build(&dir.join("emu_vits_dp.cpp"), &b) {
            return None;
        }
        // SAFETY: libraries just built from the emulation sources; their constructors do
        // nothing.
        let emu = unsafe {
            Emu {
                base: Library::new(&a).ok()?,
                dp: Library::new(&b).ok()?,
            }
        };
        let _ = std::fs::remove_file(a);
        let _ = std::fs::remove_file(b);
        Some(emu)
    }
}

impl DpBackend for Emu {
    type Buf = Vec<f32>;
    type Conv = EConv;
    type Dw = EConv;
    type Vec = Vec<f32>;

    fn upload(&self, v: &[f32]) -> Result<Vec<f32>, VitsError> {
        Ok(v.to_vec())
    }
    fn scratch(&self, n: usize) -> Result<Vec<f32>, VitsError> {
        Ok(vec![f32::NAN; n.max(1)])
    }
    fn download(&self, x: &Vec<f32>, n: usize) -> Result<Vec<f32>, VitsError> {
        Ok(x[..n].to_vec())
    }
    fn conv(
        &self,
        c: &EConv,
        x: &Vec<f32>,
        len: usize,
        residual: Option<&Vec<f32>>,
        y: &mut Vec<f32>,
    ) -> Result<(), VitsError> {
        let [cin, cout, k, d, p] = c.dims;
        let lout = len as i32 + 2 * p - d * (k - 1);
        assert!(x.len() >= cin as usize * len && y.len() >= (cout * lout) as usize);
        let null = std::ptr::null::<f32>();
        // SAFETY: the emulated `conv1d` reads x [cin, len], w, bias / residual when their
        // flags are set ([cout] / [cout, lout]) and writes y [cout, lout] (checked).
        unsafe {
            let f: Symbol<'_, ConvFn> = self.base.get(b"emu_conv1d").unwrap();
            f(
                x.as_ptr(),
                c.w.as_ptr(),
                c.b.as_ref().map_or(null, |b| b.as_ptr()),
                residual.map_or(null, |r| r.as_ptr()),
                y.as_mut_ptr(),
                i32::from(c.b.is_some()),
                i32::from(residual.is_some()),
                0,
                0,
                0.0,
                cin,
                cout,
                len as i32,
                lout,
                k,
                d,
                p,
            );
        }
        Ok(())
    }
    fn dw(&self, c: &EConv, x: &Vec<f32>, len: usize, y: &mut Vec<f32>) -> Result<(), VitsError> {
        let [_, ch, k, d, p] = c.dims;
        let lout = len as i32 + 2 * p - d * (k - 1);
        assert!(x.len() >= ch as usize * len && y.len() >= (ch * lout) as usize);
        // SAFETY: the emulated `dw_conv1d` reads x [ch, len], w [ch, k], bias [ch] when
        // set, and writes y [ch, lout] (checked).
        unsafe {
            let f: Symbol<'_, DwFn> = self.dp.get(b"emu_dw_conv1d").unwrap();
            f(
                x.as_ptr(),
                c.w.as_ptr(),
                c.b.as_ref().map_or(std::ptr::null(), |b| b.as_ptr()),
                y.as_mut_ptr(),
                i32::from(c.b.is_some()),
                ch,
                len as i32,
                lout,
                k,
                d,
                p,
            );
        }
        Ok(())
    }
    fn norm(
        &self,
        x: &Vec<f32>,
        channels: usize,
        len: usize,
        gamma: &Vec<f32>,
        beta: &Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<(), VitsError> {
        assert!(x.len() >= channels * len && out.len() >= channels * len);
        // SAFETY: the emulated `ln_channels` reads x and writes out, [channels, len] each,
        // and gamma / beta [channels] (checked by construction).
        unsafe {
            let f: Symbol<'_, LnFn> = self.base.get(b"emu_ln").unwrap();
            f(
                x.as_ptr(),
                gamma.as_ptr(),
                beta.as_ptr(),
                out.as_mut_ptr(),
                channels as i32,
                len as i32,
                LN_EPS,
            );
        }
        Ok(())
    }
    fn gelu(&self, x: &mut Vec<f32>, n: usize) -> Result<(), VitsError> {
        assert!(x.len() >= n);
        // SAFETY: x holds n values.
        unsafe {
            let f: Symbol<'_, GeluFn> = self.dp.get(b"emu_gelu").unwrap();
            f(x.as_mut_ptr(), n as i64);
        }
        Ok(())
    }
    fn gelu_add(&self, acc: &mut Vec<f32>, y: &Vec<f32>, n: usize) -> Result<(), VitsError> {
        assert!(acc.len() >= n && y.len() >= n);
        // SAFETY: acc and y hold n values.
        unsafe {
            let f: Symbol<'_, GeluAddFn> = self.dp.get(b"emu_gelu_add").unwrap();
            f(acc.as_mut_ptr(), y.as_ptr(), n as i64);
        }
        Ok(())
    }
    fn spline(
        &self,
        z: &mut Vec<f32>,
        p: &Vec<f32>,
        len: usize,
        bins: usize,
        scale: f32,
        bound: f32,
    ) -> Result<(), VitsError> {
        assert!(z.len() >= len && p.len() >= (3 * bins - 1) * len);
        // SAFETY: z holds len values, p (3·bins − 1)·len.
        unsafe {
            let f: Symbol<'_, SplineFn> = self.dp.get(b"emu_spline").unwrap();
            f(
                z.as_mut_ptr(),
                p.as_ptr(),
                len as i32,
                bins as i32,
                scale,
                bound,
            );
        }
        Ok(())
    }
}

#[test]
fn dp_kernels_emulated_on_host_match_cpu() {
    let Some(path) = std::env::var_os("FAVLO_TEST_PIPER_ONNX") else {
        eprintln!("skipped: set FAVLO_TEST_PIPER_ONNX to the en_US-joe-medium.onnx path");
        return;
    };
    let Some(emu) = Emu::open() else {
        eprintln!("skipped: g++ could not build tools/cuda_host_emulate");
        return;
    };
    let ledger: Arc<Ledger> = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("vits-dp-emulated");
    let l = Loader::open(Path::new(&path), &ledger, &owner).unwrap();
    let enc = TextEncoder::load(&l).unwrap();
    let dp = DurationPredictor::load(&l).unwrap();
    let ws = Workspace::new(&ledger, &owner);
    let w = DpWeights::build(&dp, &mut econv, &mut econv, &mut |v: &[f32]| Ok(v.to_vec())).unwrap();
    let mut s = 0x9E37_79B9u32;
    for t in [23usize, 70] {
        let ids: Vec<i64> = (0..t).map(|i| 1 + (i as i64 * 53) % 130).collect();
        let e = enc.run(&ws, &ids).unwrap();
        let noise = noise(&mut s, 2 * t);
        let want = dp.run(&ws, &e.x, t, &noise).unwrap();
        let got = run(&emu, &w, &e.x.to_vec(), t, &noise).unwrap();
        let (err, max) = max_err(&got, &want);
        println!(
            "dp kernels emulated (f32) vs CPU, {t} phonemes: max |Δlogw| / max |logw| {:.3e} \
             (bound 1e-4)",
            err / max
        );
        assert!(err <= 1e-4 * max, "{t} phonemes: {err:e} vs max {max}");
        assert_eq!(
            Vits::frames_of(&got, 1.0),
            Vits::frames_of(&want, 1.0),
            "{t} phonemes: frames"
        );
    }
}
