//! Debug dump of the forward pass's intermediate tensors, for bitwise comparison with
//! llama.cpp (`tools/fixtures/llama_cpp_dump.py` writes the same names).
//!
//! Key design choice: off unless `FAVLO_LLAMA_DUMP=<dir>` is set when the first
//! forward runs (read once into a `OnceLock`); when off, each dump point costs one
//! `Option` test. Each forward call gets `<dir>/call<N>/`, each point a `.npy` file
//! (little-endian f32, C order) named like llama.cpp's graph node (`attn_norm-3`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The active dump directory and forward-call counter.
pub(crate) struct Dump {
    dir: PathBuf,
    call: AtomicUsize,
}

/// The dumper when `FAVLO_LLAMA_DUMP` is set, else `None`.
pub(crate) fn active() -> Option<&'static Dump> {
    static D: OnceLock<Option<Dump>> = OnceLock::new();
    D.get_or_init(|| {
        std::env::var_os("FAVLO_LLAMA_DUMP").map(|d| Dump {
            dir: PathBuf::from(d),
            call: AtomicUsize::new(0),
        })
    })
    .as_ref()
}

impl Dump {
    /// Start a forward call: later points go to a fresh `call<N>` directory.
    pub(crate) fn next_call(&self) {
        self.call.fetch_add(1, Ordering::SeqCst);
    }

    /// Write `data` with `shape` (C order) as `<name>.npy`; errors are printed, not raised
    /// (a debugging aid must not change the forward's result).
    pub(crate) fn save(&self, name: &str, shape: &[usize], data: &[f32]) {
        let dir = self
            .dir
            .join(format!("call{}", self.call.load(Ordering::SeqCst)));
        let res = std::fs::create_dir_all(&dir).and_then(|()| {
            let dims: Vec<String> = shape.iter().map(|s| s.to_string()).collect();
            let tuple = if dims.len() == 1 {
                format!("({},)", dims[0])
            } else {
                format!("({})", dims.join(", "))
            };
            let mut header =
                format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(' ');
            }
            header.push('\n');
            let mut buf = Vec::with_capacity(10 + header.len() + data.len() * 4);
            buf.extend_from_slice(b"\x93NUMPY\x01\x00");
            buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
            buf.extend_from_slice(header.as_bytes());
            for v in data {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            std::fs::File::create(dir.join(format!("{name}.npy")))?.write_all(&buf)
        });
        if let Err(e) = res {
            eprintln!("FAVLO_LLAMA_DUMP: {name}: {e}");
        }
    }
}
