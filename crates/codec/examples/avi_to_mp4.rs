//! Converts one file: `cargo run -p favlo-codec --example avi_to_mp4 -- in.avi out.mp4`.
//!
//! Key design choice: a thin shell over `mp4_from_avi` for manual checks of
//! real pipeline output (e.g. with `tools/fixtures/codec_check_mp4.py`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: avi_to_mp4 IN.avi OUT.mp4");
        return ExitCode::from(2);
    };
    let result = std::fs::read(input)
        .map_err(|e| e.to_string())
        .and_then(|avi| favlo_codec::mp4_from_avi(&avi).map_err(|e| e.to_string()))
        .and_then(|mp4| std::fs::write(output, mp4).map_err(|e| e.to_string()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{input}: {e}");
            ExitCode::FAILURE
        }
    }
}
