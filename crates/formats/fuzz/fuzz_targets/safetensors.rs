//! Fuzzes `SafeTensors::open` (file path entry) and decoding every small tensor.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let Some(path) = common::scratch_file(data, "safetensors") else { return };
    if let Ok(st) = favlo_formats::safetensors::SafeTensors::open(&path) {
        for name in st.names() {
            let small = st
                .info(name)
                .is_some_and(|i| i.shape.iter().product::<usize>() as u64 <= common::MAX_DECODE_ELEMS);
            let _ = st.tensor_bytes(name);
            if small {
                let _ = st.tensor_f32(name);
            }
        }
    }
});
