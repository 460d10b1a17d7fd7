//! Shared test helpers: a generator with seeded random weights (so preemption,
//! packing and determinism tests run without the checkpoint) and job drivers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use favlo_dcgan::noise::{Xoshiro256, normals};
use favlo_dcgan::{DcganError, Generator};
use favlo_pipeline::{Control, MediaError, MediaJob, MediaOutput, MediaPaused, MediaPipeline};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

/// A generator whose tensors are seeded random values of the real shapes
/// (conv weights N(0, 0.05²), BN γ≈1, β, mean small, var in [0.5, 1.5)).
pub fn random_generator(ledger: &Arc<Ledger>, owner: &Owner) -> Generator {
    Generator::load(ledger, owner, random_source()).unwrap()
}

/// The tensor source of [`random_generator`]: the k-th tensor asked for gets seed k,
/// so a loader asking in the state dict's order (as both generators do) gets the same
/// weights.
pub fn random_source() -> impl FnMut(&str) -> Result<(Vec<f32>, Vec<usize>), DcganError> {
    let mut k = 0u64;
    move |name| {
        k += 1;
        let shape: Vec<usize> = shape_of(name);
        let n: usize = shape.iter().product();
        let values: Vec<f32> = if name.ends_with("running_var") {
            let mut r = Xoshiro256::new(k);
            (0..n).map(|_| 0.5 + r.uniform() as f32).collect()
        } else {
            let scale = if name.contains("running_mean") || name.ends_with("bias") {
                0.1
            } else if shape.len() == 1 {
                -1.0 // γ: 1 + 0.1·N
            } else {
                0.05
            };
            normals(1000 + k, n)
                .into_iter()
                .map(|v| {
                    if scale < 0.0 {
                        1.0 + 0.1 * v as f32
                    } else {
                        scale * v as f32
                    }
                })
                .collect()
        };
        Ok((values, shape))
    }
}

fn shape_of(name: &str) -> Vec<usize> {
    let idx: usize = name.split('.').nth(1).unwrap().parse().unwrap();
    let l = idx / 3;
    let s = favlo_dcgan::generator::layer_shape(l);
    if idx.is_multiple_of(3) {
        vec![s.in_channels, s.out_channels, 4, 4]
    } else {
        vec![s.out_channels]
    }
}

pub fn ledger() -> (Arc<Ledger>, Owner) {
    (Ledger::new(Device::Cpu, None), Owner::mint("dcgan-test"))
}

/// Runs a job to the end, preempting after each of the first `preempts` stages
/// (the preempt flag stays raised for that many calls; a resuming call always
/// completes one stage). Returns the output and the number of holds taken.
pub fn run_with_preempts(
    p: &mut dyn MediaPipeline,
    job: &MediaJob,
    preempts: usize,
) -> (MediaOutput, usize) {
    let control = Control::new();
    let mut hold = None;
    let mut holds = 0;
    loop {
        if holds < preempts {
            control.preempt();
        } else {
            control.clear_preempt();
        }
        match p.generate(job, hold.take(), &control) {
            Ok(out) => return (out, holds),
            Err(MediaError::Paused(MediaPaused::Preempt(h))) => {
                holds += 1;
                assert_eq!(h.stage, holds, "one stage per resumed call");
                hold = Some(h);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}
