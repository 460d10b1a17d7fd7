"""PyTorch anchor of `favlo bench prefill --device cuda --anchor` (and of the
`cuda_prefill_bench` example): the same four Qwen3-8B GEMM shapes at a 2048-token
prefill over 36 layers of distinct weights, timed with CUDA events (median of 7 after
2 warm-ups), as

* bf16 `torch.matmul(x, w.T)` (the PyTorch prefill path), and
* FP8 E4M3 `torch._scaled_mm` with per-tensor scales and with row-wise scales
  (cuBLASLt's FP8 GEMM: the FP8 ceiling on these shapes),

plus a large square bf16 and FP8 product for the chip's ceilings. Inputs are random
normal (not zeros). With --json the last line is one JSON object of the totals.
Usage: python3 cuda_prefill_anchor.py [--tokens 2048] [--layers 36] [--device 0] [--json]
"""

import argparse
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=2048)
ap.add_argument("--layers", type=int, default=36)
ap.add_argument("--device", type=int, default=0)
ap.add_argument("--json", action="store_true")
ARGS = ap.parse_args()
M = ARGS.tokens
LAYERS = ARGS.layers
SHAPES = [("q|k|v", 6144, 4096), ("o", 4096, 4096), ("gate|up", 24576, 4096), ("down", 4096, 12288)]
FP8_PEAK = 1979.0
dev = f"cuda:{ARGS.device}"
torch.cuda.set_device(ARGS.device)
torch.manual_seed(0)


def median_ms(fn, warm=2, reps=7):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {M} tokens, {LAYERS} layers")
    rows = []
    total = {"bf16": 0.0, "fp8 tensor": 0.0, "fp8 rowwise": 0.0}
    flops_all = 0.0
    for name, n, k in SHAPES:
        flop = 2.0 * M * n * k * LAYERS
        flops_all += flop
        x = torch.randn(M, k, device=dev, dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
        t_bf16 = median_ms(lambda: [torch.matmul(x, w.T) for w in ws])
        x8 = x.to(torch.float8_e4m3fn)
        w8 = [w.mul(50).to(torch.float8_e4m3fn) for w in ws]
        del ws
        one = torch.tensor(1.0, device=dev)
        t_fp8 = median_ms(
            lambda: [torch._scaled_mm(x8, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16) for w in w8]
        )
        sa = torch.ones(M, 1, device=dev, dtype=torch.float32)
        sb = torch.ones(1, n, device=dev, dtype=torch.float32)
        try:
            t_row = median_ms(
                lambda: [torch._scaled_mm(x8, w.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16) for w in w8]
            )
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"row-wise _scaled_mm failed: {e}")
            t_row = float("nan")
        del w8
        torch.cuda.empty_cache()
        total["bf16"] += t_bf16
        total["fp8 tensor"] += t_fp8
        total["fp8 rowwise"] += t_row
        rows.append((name, n, k, flop, t_bf16, t_fp8, t_row))

    def tf(flop, ms):
        return flop / (ms * 1e-3) / 1e12

    print("\n| GEMM | n×k | bf16 matmul ms | TFLOP/s | FP8 _scaled_mm per-tensor ms | TFLOP/s | % of FP8 peak | FP8 row-wise ms | TFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, k, flop, a, b, c in rows:
        print(
            f"| {name} | {n}×{k} | {a:.3f} | {tf(flop, a):.0f} | {b:.3f} | {tf(flop, b):.0f} | "
            f"{100 * tf(flop, b) / FP8_PEAK:.1f}% | {c:.3f} | {tf(flop, c):.0f} |"
        )
    a, b, c = total["bf16"], total["fp8 tensor"], total["fp8 rowwise"]
    print(
        f"| **all** | | {a:.3f} | {tf(flops_all, a):.0f} | {b:.3f} | {tf(flops_all, b):.0f} | "
        f"{100 * tf(flops_all, b) / FP8_PEAK:.1f}% | {c:.3f} | {tf(flops_all, c):.0f} |"
    )

    # Chip ceilings: 8192^3 products on random data.
    s = 8192
    a16 = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    t = median_ms(lambda: torch.matmul(a16, b16), reps=10)
    print(f"\nceiling bf16 8192^3: {tf(2.0 * s**3, t):.0f} TFLOP/s")
    a8 = a16.to(torch.float8_e4m3fn)
    b8 = b16.to(torch.float8_e4m3fn).T.contiguous().T
    one = torch.tensor(1.0, device=dev)
    t = median_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), reps=10)
    fp8_ceiling = tf(2.0 * s**3, t)
    print(f"ceiling FP8 _scaled_mm 8192^3: {fp8_ceiling:.0f} TFLOP/s ({100 * fp8_ceiling / FP8_PEAK:.1f}% of {FP8_PEAK:.0f})")
    if ARGS.json:
        print(json.dumps({
            "torch": torch.__version__, "flop": flops_all, "bf16_ms": a,
            "fp8_ms": b, "fp8_rowwise_ms": c, "fp8_ceiling_tflops": fp8_ceiling,
        }))


if __name__ == "__main__":
    main()
