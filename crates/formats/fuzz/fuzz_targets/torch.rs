//! Fuzzes `TorchCheckpoint::from_bytes` (zip + restricted pickle) and decoding every tensor.
#![no_main]

use favlo_formats::torch::TorchCheckpoint;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(ck) = TorchCheckpoint::from_bytes(data.to_vec()) {
        for t in ck.all_tensors() {
            if t.shape.iter().product::<usize>() as u64 <= common::MAX_DECODE_ELEMS {
                let _ = ck.decode_f32(t);
            }
        }
    }
});
