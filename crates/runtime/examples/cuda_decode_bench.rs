//! Batch-1 decode of a Qwen3-8B-shaped model with random MX weights on CUDA, with the
//! knobs of kernel development and the split of the step's time
//! (`favlo bench decode --device cuda` prints the default configuration's figures).
//!
//! Run: `cuda_decode_bench [--layers 36] [--ctx 1024] [--steps 32] [--f32-kv] [--mxfp8]
//! [--pdl] [--kernel regs|pp|ring|tma] [--ring W] [--pp-prefetch 2|3]
//! [--attn auto|two|one|fused|light] [--compare-attn] [--min-keys N] [--attn-fma] [--unfused]
//! [--no-persist] [--warps-cap W] [--capacity N] [--no-parts]
//! [--skip qkv,attn,o,gate_up,down,head,rope,split,combine,score,merge,merge_math]
//! [--alt qkv,o,gate_up,down,head|none [--alt-kernel regs|pp|ring|tma] [--alt-first late|half]
//! [--alt-l2 evict-first|normal]] [--attn-l2 evict-first|normal]
//! [--pad-mib N] [--late-module] [--pad code|global:KIB[@first|@mid],…]`
//! (`--no-parts`: only the whole step, not each part apart; `--unfused`: the RMSNorm
//! and SwiGLU preparations as kernels of their own;
//! `--attn-fma`: the one-pass attention's FMA loop over the f16 cache instead of its
//! tensor-core loop;
//! `--capacity`: a KV capacity above what the timed steps need, as a chat's attention
//! bucket; `--skip`: leave parts out of the fused step, to see what each costs on the
//! step's critical path; the logits are then meaningless; `--alt`: other settings for
//! some GEMVs, a probe of which kernel suits each where it sits in the step:
//! `--alt-kernel` its kernel (default `auto`), `--alt-first` the ping-pong kernel with
//! its first chunk requested after the PDL wait by every warp (`late`) or by the odd
//! warps (`half`), `--alt-l2 evict-first` its weight and scale loads evict-first in L2
//! (the register and ring kernels'); `--attn-l2` the two-pass attention from a copy of its module
//! under another cache name, as shipped (`normal`) or with the split's K/V row loads
//! evict-first in L2 (`evict-first`), so the two load the same code at the same place;
//! the "GEMV kernels" line names what each GEMV ran; `--alt none`
//! loads the second kernel set and uses it for nothing, which moves the step by ~1%
//! (placement); `--pad-mib` and `--late-module` are placement probes too: pool memory
//! taken before the model, one more module loaded after the attention's; `--pad`
//! loads modules of code alone (`code:KIB`) or of a `__device__` array alone
//! (`global:KIB`) before the step's modules (`@first`) or between its GEMV and
//! attention modules (`@mid`, the default), to tell code placement from data
//! placement. Compare two settings at more than one placement when they differ by
//! ~1%).

use favlo_mx::ElementFormat;
use favlo_runtime::cuda::CudaContext;
use favlo_runtime::cuda::GemvKernel;
use favlo_runtime::cuda::bench::{
    AltGemv, AttnMode, DecodeBenchOptions, Pad, PartSet, decode_bench, parse_parts,
};

fn arg(argv: &[String], name: &str) -> Option<String> {
    argv.iter()
        .position(|x| x == name)
        .and_then(|i| argv.get(i + 1))
        .cloned()
}

fn num(argv: &[String], name: &str, default: usize) -> usize {
    arg(argv, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kernel(name: Option<&str>) -> GemvKernel {
    match name {
        Some("regs") => GemvKernel::Regs,
        Some("pp") => GemvKernel::PingPong,
        Some("ring") => GemvKernel::Ring,
        Some("tma") => GemvKernel::Tma,
        _ => GemvKernel::Auto,
    }
}

/// `parse_parts` for `option`; exits with status 2 on a name it refuses.
fn parts(option: &str, list: &str, set: PartSet) -> u16 {
    parse_parts(list, set).unwrap_or_else(|e| {
        eprintln!("cuda_decode_bench: {option}: {e}");
        std::process::exit(2);
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().collect();
    let flag = |f: &str| argv.iter().any(|a| a == f);
    let opts = DecodeBenchOptions {
        layers: num(&argv, "--layers", 36),
        context: num(&argv, "--ctx", 1024),
        steps: num(&argv, "--steps", 32),
        format: if flag("--mxfp8") {
            ElementFormat::Fp8E4M3
        } else {
            ElementFormat::Fp4E2M1
        },
        f16_kv: !flag("--f32-kv"),
        pdl: flag("--pdl"),
        kernel: kernel(arg(&argv, "--kernel").as_deref()),
        ring: flag("--ring").then(|| (num(&argv, "--ring", 8), 2)),
        pp_prefetch: num(&argv, "--pp-prefetch", 0).min(3) as u8,
        parts: !flag("--no-parts"),
        attn: match arg(&argv, "--attn").as_deref() {
            Some("two") => AttnMode::TwoPass,
            Some("one") => AttnMode::OnePass,
            Some("fused") => AttnMode::Fused,
            Some("light") => AttnMode::FusedLight,
            _ => AttnMode::Auto,
        },
        compare_attn: flag("--compare-attn"),
        attn_min_keys: arg(&argv, "--min-keys").and_then(|v| v.parse().ok()),
        attn_tc: !flag("--attn-fma"),
        fused: !flag("--unfused"),
        persistent: !flag("--no-persist"),
        warps_cap: arg(&argv, "--warps-cap").and_then(|v| v.parse().ok()),
        capacity: arg(&argv, "--capacity").and_then(|v| v.parse().ok()),
        skip: arg(&argv, "--skip").map_or(0, |list| parts("--skip", &list, PartSet::All)),
        alt: arg(&argv, "--alt").map(|list| AltGemv {
            parts: parts("--alt", &list, PartSet::Gemvs),
            kernel: kernel(arg(&argv, "--alt-kernel").as_deref()),
            first_loads: match arg(&argv, "--alt-first").as_deref() {
                Some("late") => 1,
                Some("half") => 2,
                _ => 0,
            },
            evict_first: match arg(&argv, "--alt-l2").as_deref() {
                Some("evict-first") => true,
                Some("normal") | None => false,
                Some(other) => {
                    eprintln!(
                        "cuda_decode_bench: --alt-l2 {other}: expected evict-first or normal"
                    );
                    std::process::exit(2);
                }
            },
        }),
        attn_l2: match arg(&argv, "--attn-l2").as_deref() {
            Some("evict-first") => Some(true),
            Some("normal") => Some(false),
            None => None,
            Some(other) => {
                eprintln!("cuda_decode_bench: --attn-l2 {other}: expected evict-first or normal");
                std::process::exit(2);
            }
        },
        pad_mib: num(&argv, "--pad-mib", 0),
        late_module: flag("--late-module"),
        pads: arg(&argv, "--pad").map_or_else(Vec::new, |list| {
            list.split(',')
                .map(|p| {
                    Pad::parse(p).unwrap_or_else(|e| {
                        eprintln!("cuda_decode_bench: --pad: {e}");
                        std::process::exit(2);
                    })
                })
                .collect()
        }),
    };
    let ctx = match CudaContext::open(0, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cuda_decode_bench: {e}");
            std::process::exit(2);
        }
    };
    let d = decode_bench(&ctx, &opts)?;
    for p in &opts.pads {
        println!("pad module: {:?} {} KiB at {:?}", p.kind, p.kib, p.at);
    }
    println!(
        "device {}; GEMV kernels: {}; PDL {}; attention {:?}",
        d.device, d.kernels, d.pdl, d.attn
    );
    if let Some((diff, max)) = d.fused_check {
        println!(
            "fused norms/SwiGLU: one step's logits vs separate kernels: max |diff| {diff:.3e} (max |logit| {max:.3e})"
        );
    }
    if let Some((diff, max)) = d.pdl_check {
        println!(
            "PDL on: one step's logits vs PDL off: max |diff| {diff:.3e} (max |logit| {max:.3e})"
        );
    }
    println!(
        "setup {:.1} s, {:.2} GB live; copy bandwidth {:.0} GB/s; KV cache {}; context {} tokens; {} layers",
        d.setup_s,
        d.live_bytes as f64 / 1e9,
        d.copy_gbps,
        if opts.f16_kv { "f16" } else { "f32" },
        opts.context,
        opts.layers
    );
    println!(
        "logits finite: {}; max |h| after the timed steps {:.3}",
        d.logits_finite, d.max_h
    );
    if let Some(p) = &d.parts {
        println!("| part (all layers) | bytes | time | GB/s | % of copy |");
        println!("|---|---:|---:|---:|---:|");
        for r in &p.rows {
            let g = r.bytes / (r.us * 1e-6) / 1e9;
            println!(
                "| {} | {:.1} MB | {:.1} µs | {g:.0} | {:.0}% |",
                r.name,
                r.bytes / 1e6,
                r.us,
                100.0 * g / d.copy_gbps
            );
        }
        let g = d.weight_bytes / (p.graph_gemv_ms * 1e-3) / 1e9;
        println!(
            "\nper token, as CUDA graphs: all GEMVs {:.3} ms ({g:.0} GB/s, {:.0}% of copy); attention {:.3} ms; norms/prep/rope/swiglu {:.3} ms; sum {:.3} ms",
            p.graph_gemv_ms,
            100.0 * g / d.copy_gbps,
            p.graph_attn_ms,
            p.graph_small_ms,
            p.graph_gemv_ms + p.graph_attn_ms + p.graph_small_ms
        );
        for (mode, ms) in &p.graph_attn_modes {
            println!("attention step {mode:?} as a graph: {ms:.3} ms per token");
        }
    }
    println!("\n| decode | ms/token | tokens/s | % of roofline |");
    println!("|---|---:|---:|---:|");
    println!(
        "| roofline ({:.2} GB/token at {:.0} GB/s) | {:.3} | {:.0} | 100% |",
        d.bytes_per_token() / 1e9,
        d.copy_gbps,
        d.roofline_ms,
        d.roofline_tok_s()
    );
    for (name, ms) in [("CUDA graph", d.graph_ms), ("plain launches", d.plain_ms)] {
        println!(
            "| {name} | {ms:.3} | {:.0} | {:.0}% |",
            1e3 / ms,
            100.0 * d.roofline_ms / ms
        );
    }
    for (mode, ms) in &d.attn_modes {
        println!(
            "| CUDA graph, attention {mode:?} | {ms:.3} | {:.0} | {:.0}% |",
            1e3 / ms,
            100.0 * d.roofline_ms / ms
        );
    }
    Ok(())
}
