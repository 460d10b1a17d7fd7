//! Fuzzes `OnnxModel::from_bytes` and decoding every initializer and tensor attribute.
#![no_main]

use favlo_formats::onnx::{OnnxAttrValue, OnnxModel};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = OnnxModel::from_bytes(data.to_vec(), None) {
        for t in m.initializers() {
            if t.n_elems() as u64 <= common::MAX_DECODE_ELEMS {
                let _ = m.decode_f32(t);
            }
        }
        for n in m.nodes() {
            for a in &n.attributes {
                if let OnnxAttrValue::Tensor(t) = &a.value
                    && t.n_elems() as u64 <= common::MAX_DECODE_ELEMS
                {
                    let _ = m.decode_f32(t);
                }
            }
            if let Some(o) = n.outputs.first() {
                let _ = m.tensor_f32(o);
            }
        }
    }
});
