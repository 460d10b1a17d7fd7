//! `FAVLO_LLAMA_DUMP=/tmp/favlo_dump cargo run --release -p favlo-llama --example dump_case --
//! model.gguf refs.json CASE [DECODE]`: runs one committed agreement prompt the way
//! llama-cpp-python does in `tools/fixtures/llama_cpp_dump.py` (the prompt as one batch with
//! every position's logits, then DECODE single-token steps on llama.cpp's greedy tokens), so
//! the forward's dump points (`call1` = prefill, `call2..` = decode steps) can be compared
//! bitwise with llama.cpp's graph nodes.

use std::path::PathBuf;

use favlo_llama::{OpenOptions, open};
use favlo_runtime::device::Device;
use favlo_runtime::ledger::{Ledger, Owner};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A JSON array of token ids.
fn ids(x: &serde_json::Value) -> Res<Vec<u32>> {
    x.as_array()
        .ok_or("token ids must be an array")?
        .iter()
        .map(|i| {
            i.as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| "a token id must be a u32".into())
        })
        .collect()
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: dump_case model.gguf refs.json CASE [DECODE]";
    let path = PathBuf::from(args.next().ok_or(usage)?);
    let refs = args.next().ok_or(usage)?;
    let case: usize = args.next().ok_or(usage)?.parse()?;
    let decode: usize = args.next().map_or(Ok(2), |d| d.parse())?;
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(refs)?)?;
    let c = &v["cases"][case];
    let (prompt, greedy) = (ids(&c["prompt_ids"])?, ids(&c["greedy"])?);
    let ledger = Ledger::new(Device::Cpu, None);
    let owner = Owner::mint("dump");
    let opts = OpenOptions {
        max_context: Some(512),
        ..OpenOptions::default()
    };
    let mut rt = open(&path, &ledger, &owner, &opts)?;
    let vocab = rt.config().vocab_size;
    let m = rt.model();
    let mut logits = vec![0.0; prompt.len() * vocab];
    m.forward(&prompt, 0, &mut logits, true)?;
    let mut one = vec![0.0; vocab];
    for (i, &t) in greedy.iter().take(decode).enumerate() {
        m.forward(&[t], prompt.len() + i, &mut one, false)?;
    }
    println!("ran {} prompt tokens + {decode} decode steps", prompt.len());
    Ok(())
}
