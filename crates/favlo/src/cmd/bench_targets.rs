//! `favlo bench targets --device cuda[:N] [--anchor]`: the CUDA backend's performance
//! targets in one table (the MX GEMV against the copy bandwidth, batch-1 decode against
//! its roofline, the 2048-token prefill GEMMs against the FP8 tensor-core peak), each
//! figure beside the target, its ceiling measured in the same run and, with `--anchor`,
//! PyTorch on the same shapes.
//!
//! Key design choice: the figures come from the library benches that `favlo bench
//! kernels|decode|prefill --device cuda` print in full, run with those commands'
//! defaults, so a row here is the same measurement as the line there; turning figures
//! into rows and verdicts is plain data to text ([`render`]), tested without a GPU.

use std::fmt::Write as _;
use std::process::ExitCode;

#[cfg(feature = "cuda")]
pub use with_cuda::targets;

/// One target: what is measured, the figure as a percentage of its ceiling, the goal
/// in the same unit, and what was measured beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetRow {
    pub what: String,
    /// Percent of the reference the target names (copy bandwidth, roofline, FP8 peak).
    pub figure: f64,
    /// The absolute figure behind the percentage (µs, ms per token, TFLOP/s).
    pub absolute: String,
    /// The goal, in percent of the same reference.
    pub goal: f64,
    /// Ceilings and anchors measured in the same run.
    pub beside: String,
}

impl TargetRow {
    /// Whether the figure reaches the goal (a figure that is not finite, e.g. from a
    /// timing that failed, never does).
    pub fn met(&self) -> bool {
        self.figure.is_finite() && self.figure >= self.goal
    }

    /// `met`, or how many points it is short by.
    pub fn verdict(&self) -> String {
        if self.met() {
            "met".into()
        } else if self.figure.is_finite() {
            let short = self.goal - self.figure;
            if short < 0.05 {
                "< 0.1 points short".into()
            } else {
                format!("{short:.1} points short")
            }
        } else {
            "no figure".into()
        }
    }
}

/// The table: a header naming the device, one line per target, and a count of those
/// met.
pub fn render(device: &str, rows: &[TargetRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "device {device}");
    let _ = writeln!(
        out,
        "{:<48} {:>8} {:>7}  {:<20} {:<26} beside it (same run)",
        "target", "figure", "goal", "verdict", "measured"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<48} {:>7.1}% {:>6.0}%  {:<20} {:<26} {}",
            r.what,
            r.figure,
            r.goal,
            r.verdict(),
            r.absolute,
            r.beside
        );
    }
    let met = rows.iter().filter(|r| r.met()).count();
    let _ = writeln!(out, "{met} of {} targets met", rows.len());
    out
}

#[cfg(not(feature = "cuda"))]
pub fn targets(_ordinal: u32, _anchor: bool) -> anyhow::Result<ExitCode> {
    Err(crate::cmd::bench_cuda::without_cuda())
}

#[cfg(feature = "cuda")]
mod with_cuda {
    use super::{ExitCode, TargetRow, render};
    use crate::cmd::bench_cuda::{check_anchor, decode_anchor, open, prefill_anchor};
    use favlo_runtime::cuda::bench::{
        DecodeBenchOptions, FP8_PEAK_TFLOPS, GemvBenchOptions, GemvRow, PrefillBenchOptions,
        READ_CEILING, decode_bench, format_name, gemv_bench, prefill_bench, tflops,
    };

    /// The GEMV target's goal, % of copy.
    const GEMV_GOAL: f64 = 80.0;
    /// The decode target's goal, % of the roofline.
    const DECODE_GOAL: f64 = 70.0;
    /// The prefill target's goal, % of the FP8 peak.
    const PREFILL_GOAL: f64 = 50.0;

    /// The GEMV rows: the default kernel of each (format, shape) against its read
    /// ceiling and its chained figure.
    fn gemv_rows(rows: &[GemvRow], copy_gbps: f64) -> Vec<TargetRow> {
        let mut out = Vec::new();
        for r in rows.iter().filter(|r| r.kernel.is_some()) {
            let ceiling = rows
                .iter()
                .find(|c| {
                    c.name == READ_CEILING
                        && c.format == r.format
                        && (c.rows, c.cols) == (r.rows, r.cols)
                })
                .map_or("read ceiling -".to_string(), |c| {
                    format!("read ceiling {:.0}%", c.of_copy)
                });
            let chained = r
                .chained_of_copy(copy_gbps)
                .map_or("-".to_string(), |pct| format!("{pct:.0}%"));
            out.push(TargetRow {
                what: format!(
                    "GEMV {} {}×{}, % of copy",
                    format_name(r.format),
                    r.rows,
                    r.cols
                ),
                figure: r.of_copy,
                absolute: format!("{:.1} µs", r.us),
                goal: GEMV_GOAL,
                beside: format!("{ceiling}; chained under PDL {chained}; copy {copy_gbps:.0} GB/s"),
            });
        }
        out
    }

    /// Runs the three benches (then, with `anchor`, PyTorch's decode and prefill on the
    /// same shapes) and prints the targets' table.
    pub fn targets(ordinal: u32, anchor: bool) -> anyhow::Result<ExitCode> {
        if anchor {
            check_anchor()?;
        }
        let ctx = open(ordinal)?;
        eprintln!("favlo bench targets: the GEMV table…");
        let g = gemv_bench(&ctx, &GemvBenchOptions::default(), |_| {})?;
        eprintln!("favlo bench targets: batch-1 decode…");
        let d_opts = DecodeBenchOptions::default();
        let d = decode_bench(&ctx, &d_opts)?;
        eprintln!("favlo bench targets: the prefill GEMMs…");
        let p_opts = PrefillBenchOptions {
            // The decode benchmark's model (MXFP4, `favlo bench prefill`'s default too).
            format: d_opts.format,
            ..PrefillBenchOptions::default()
        };
        let p = prefill_bench(&ctx, &p_opts)?;
        drop(ctx);

        let mut rows = gemv_rows(&g.rows, g.copy_gbps);
        let mut decode_beside = format!(
            "roofline {:.3} ms ({:.2} GB/token at {:.0} GB/s)",
            d.roofline_ms,
            d.bytes_per_token() / 1e9,
            d.copy_gbps
        );
        let flop = p.flop();
        let t = tflops(flop, p.fp8_total_ms);
        let mut prefill_beside = format!(
            "tensor-core ceiling {:.0} TFLOP/s ({:.1}% of peak)",
            p.tc_ceiling_tflops,
            100.0 * p.tc_ceiling_tflops / FP8_PEAK_TFLOPS
        );
        if anchor {
            eprintln!("favlo bench targets: PyTorch anchors…");
            let a = decode_anchor(&d_opts, ordinal)?;
            let [graph] = a.nums(["graph_ms"])?;
            decode_beside.push_str(&format!(
                "; PyTorch {} bf16 CUDA graph {:.0} tok/s",
                a.torch(),
                1e3 / graph
            ));
            let a = prefill_anchor(p.tokens, p.layers, ordinal)?;
            let [fp8, row] = a.nums(["fp8_ms", "fp8_rowwise_ms"])?;
            let pct = |ms: f64| 100.0 * tflops(flop, ms) / FP8_PEAK_TFLOPS;
            prefill_beside.push_str(&format!(
                "; PyTorch FP8 _scaled_mm {:.1}% per-tensor, {:.1}% row-wise",
                pct(fp8),
                pct(row)
            ));
        }
        rows.push(TargetRow {
            what: format!(
                "batch-1 decode, Qwen3-8B {}, % of roofline",
                format_name(d_opts.format)
            ),
            figure: 100.0 * d.roofline_ms / d.graph_ms,
            absolute: format!("{:.3} ms = {:.0} tok/s", d.graph_ms, d.tok_s()),
            goal: DECODE_GOAL,
            beside: decode_beside,
        });
        rows.push(TargetRow {
            what: format!("prefill GEMMs, {} tokens, % of FP8 peak", p.tokens),
            figure: 100.0 * t / FP8_PEAK_TFLOPS,
            absolute: format!("{:.3} ms = {t:.0} TFLOP/s", p.fp8_total_ms),
            goal: PREFILL_GOAL,
            beside: prefill_beside,
        });
        print!("{}", render(&g.device, &rows));
        println!(
            "details: favlo bench kernels|decode|prefill --device cuda:{ordinal} (--anchor); FP8 peak {FP8_PEAK_TFLOPS:.0} TFLOP/s (datasheet, dense)"
        );
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::{TargetRow, render};

    fn row(figure: f64, goal: f64) -> TargetRow {
        TargetRow {
            what: "GEMV MXFP4 8192×8192, % of copy".into(),
            figure,
            absolute: "14.7 µs".into(),
            goal,
            beside: "read ceiling 73%".into(),
        }
    }

    #[test]
    fn verdicts_compare_the_figure_with_the_goal() {
        assert_eq!(row(80.0, 80.0).verdict(), "met");
        assert_eq!(row(88.4, 80.0).verdict(), "met");
        assert_eq!(row(57.25, 80.0).verdict(), "22.8 points short");
        assert_eq!(row(79.96, 80.0).verdict(), "< 0.1 points short");
        assert_eq!(row(f64::NAN, 80.0).verdict(), "no figure");
        assert_eq!(row(f64::INFINITY, 80.0).verdict(), "no figure");
        assert!(row(80.0, 80.0).met() && !row(79.96, 80.0).met() && !row(f64::NAN, 0.0).met());
    }

    #[test]
    fn the_table_names_the_device_every_row_and_the_count_met() {
        let text = render(
            "cuda:0 NVIDIA H200 (sm_90)",
            &[row(57.0, 80.0), row(51.2, 50.0)],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert_eq!(lines[0], "device cuda:0 NVIDIA H200 (sm_90)");
        assert!(lines[2].contains("57.0%") && lines[2].contains("23.0 points short"));
        assert!(lines[3].contains("51.2%") && lines[3].contains("met"));
        assert!(lines[3].contains("read ceiling 73%"));
        assert_eq!(lines[4], "1 of 2 targets met");
        // Every row's verdict starts where the header's does (in characters: "×" is
        // two bytes).
        let col = |line: &str, pat: &str| line.find(pat).map(|b| line[..b].chars().count());
        let verdict_col = col(lines[1], "verdict");
        assert!(verdict_col.is_some_and(|c| c > 0));
        assert_eq!(col(lines[2], "23.0 points short"), verdict_col);
        assert_eq!(col(lines[3], "met"), verdict_col);
    }
}
