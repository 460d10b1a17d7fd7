#!/usr/bin/env python3
"""Where a kernel's warps wait, by region, from Nsight Compute's per-instruction page.

Input: the CSV that `ncu -i REPORT.ncu-rep --page source --csv --print-source sass`
prints for a report taken with `--set full` (one or more kernels; no -lineinfo needed).
Every SASS instruction carries its warp-stall samples, the stall reasons and the times it
was executed. Instructions executed the same number of times belong together: in a
persistent GEMM the main loop's instructions run once per k step and warp, the epilogue's
once per tile and warp, a called subroutine as often as it is called. So this prints, per
kernel, the groups of equal execution counts that hold the most samples, each with its
share of all samples and its main stall reasons, then the instructions with the most
samples.

    python3 tools/bench/ncu_source_regions.py source.csv [--groups 8] [--top 12]
"""

import argparse
import csv
import collections
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(path):
    """Yields (kernel name, header, rows) for each kernel section of the CSV."""
    name, header, rows = None, None, []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "Kernel Name":
                if header is not None:
                    yield name, header, rows
                name, header, rows = rec[1] if len(rec) > 1 else "?", None, []
            elif header is None and "Address" in rec and "Source" in rec:
                header = rec
            elif header is not None and len(rec) >= len(header) - 1:
                rows.append(dict(zip(header, rec)))
    if header is not None:
        yield name, header, rows


def report(name, header, rows, groups, top, out):
    samples_key = "Warp Stall Sampling (All Samples)"
    stalls = [k for k in header if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(number(r.get(samples_key, "0")) for r in rows) or 1.0
    executed = sum(number(r.get("Instructions Executed", "0")) for r in rows)
    print(f"{name}: {len(rows)} instructions, {executed:.0f} executed (warp level), "
          f"{total:.0f} stall samples", file=out)
    by_count = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
    for r in rows:
        g = by_count[int(number(r.get("Instructions Executed", "0")))]
        g[0] += 1
        g[1] += number(r.get(samples_key, "0"))
        for k in stalls:
            g[2][k[len("stall_"):]] += number(r.get(k, "0"))
    print(f"  {'executed':>10} {'instrs':>7} {'samples':>8} {'share':>6}  main stalls", file=out)
    for count, (n, s, why) in sorted(by_count.items(), key=lambda kv: -kv[1][1])[:groups]:
        main = ", ".join(f"{k} {v / max(s, 1):.0%}" for k, v in why.most_common(3) if v)
        print(f"  {count:>10} {n:>7} {s:>8.0f} {s / total:>6.1%}  {main}", file=out)
    print("  top instructions:", file=out)
    for r in sorted(rows, key=lambda r: -number(r.get(samples_key, "0")))[:top]:
        s = number(r.get(samples_key, "0"))
        why = max(stalls, key=lambda k: number(r.get(k, "0")), default="")
        print(f"  {r.get('Address', '')[-6:]:>6} {s:>6.0f} {s / total:>6.1%} "
              f"x{number(r.get('Instructions Executed', '0')):<9.0f} "
              f"{r.get('Source', '').strip()[:56]:56} {why[len('stall_'):]}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--groups", type=int, default=8, help="execution-count groups shown")
    ap.add_argument("--top", type=int, default=12, help="instructions shown")
    args = ap.parse_args()
    found = False
    for name, header, rows in kernels(args.csv):
        found = True
        report(name, header, rows, args.groups, args.top, sys.stdout)
    if not found:
        sys.exit(f"{args.csv}: no kernel section (expected `ncu --page source --csv` output)")


if __name__ == "__main__":
    main()
