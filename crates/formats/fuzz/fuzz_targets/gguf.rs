//! Fuzzes `GgufFile::open` (file path entry) and decoding every small tensor.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Some(path) = common::scratch_file(data, "gguf") else { return };
    if let Ok(f) = favlo_formats::gguf::GgufFile::open(&path) {
        let _ = f.get_string_array("tokenizer.ggml.tokens");
        for t in f.tensors() {
            let _ = f.tensor_bytes(t);
            if t.n_elems <= common::MAX_DECODE_ELEMS {
                let _ = f.tensor_f32(&t.name);
            }
        }
    }
});
