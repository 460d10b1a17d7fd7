//! Kernel benchmark: `cargo run --release -p favlo-runtime --example kernels_bench [-- quick] [gemv|gemm|attn|gguf|norm]`
//! (the same table as `favlo bench kernels`).

fn main() -> Result<(), favlo_mx::MxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "quick");
    let sections: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "quick")
        .collect();
    favlo_runtime::bench::kernels(quick, &sections)
}
