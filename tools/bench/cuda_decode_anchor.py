"""PyTorch bf16 anchor for `favlo bench decode --device cuda --anchor`: batch-1 decode of a Qwen3-8B-shaped
model written as plain torch ops (no `transformers`), same shapes and steps.

Per token and layer: RMSNorm -> fused q|k|v matmul -> q/k RMSNorm -> NeoX RoPE ->
KV-cache store (bf16, [kv_heads, cap, 128]) -> SDPA over the cache (GQA by repeating kv
heads) -> o matmul + residual -> RMSNorm -> fused gate|up matmul -> SiLU * up -> down
matmul + residual; then final RMSNorm and lm_head. Random bf16 weights (std
1/sqrt(in)). Timed as eager launches and as a captured CUDA graph (torch.cuda.graphs),
median of CUDA-event timings, beside the bf16 roofline (weights + KV bytes over the
device-to-device copy bandwidth measured here).

Run on the GPU machine: python3 tools/bench/cuda_decode_anchor.py [--layers 36]
[--ctx 1024] [--steps 32] [--device N] [--json] (`favlo bench decode --anchor` runs it
with `--json` and prints its figures beside its own: one JSON object on stdout).
"""

import argparse
import json
import statistics

import torch

HIDDEN, NH, NKV, HD, INTER, VOCAB, EPS = 4096, 32, 8, 128, 12288, 151936, 1e-6


def rms(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + EPS)).to(x.dtype) * w


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.cuda.set_device(a.device)
    dev, dt = f"cuda:{a.device}", torch.bfloat16
    torch.manual_seed(0)
    cap = a.ctx + 8 * a.steps + 16

    def w(o, i):
        return (torch.randn(o, i, device=dev, dtype=torch.float32) / i**0.5).to(dt)

    layers = []
    for _ in range(a.layers):
        layers.append(
            dict(
                qkv=w((NH + 2 * NKV) * HD, HIDDEN),
                o=w(HIDDEN, NH * HD),
                gu=w(2 * INTER, HIDDEN),
                down=w(HIDDEN, INTER),
                n1=torch.ones(HIDDEN, device=dev, dtype=dt),
                n2=torch.ones(HIDDEN, device=dev, dtype=dt),
                qn=torch.ones(HD, device=dev, dtype=dt),
                kn=torch.ones(HD, device=dev, dtype=dt),
                k=torch.randn(NKV, cap, HD, device=dev, dtype=dt),
                v=torch.randn(NKV, cap, HD, device=dev, dtype=dt),
            )
        )
    lm = w(VOCAB, HIDDEN)
    fn = torch.ones(HIDDEN, device=dev, dtype=dt)
    inv = 1.0 / (1e6 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float64) / HD))
    ang = torch.arange(cap, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
    cos_t, sin_t = ang.cos().to(dt), ang.sin().to(dt)
    pos = torch.tensor([a.ctx], device=dev, dtype=torch.long)
    keys = torch.arange(cap, device=dev)
    h = torch.randn(1, HIDDEN, device=dev, dtype=dt)
    logits = torch.empty(1, VOCAB, device=dev, dtype=dt)

    def step():
        x = h
        c, s = cos_t[pos], sin_t[pos]  # [1, 64]
        mask = (keys <= pos).view(1, 1, 1, cap)
        for L in layers:
            xn = rms(x, L["n1"])
            qkv = xn @ L["qkv"].T
            q = qkv[:, : NH * HD].view(NH, HD)
            k = qkv[:, NH * HD : (NH + NKV) * HD].view(NKV, HD)
            v = qkv[:, (NH + NKV) * HD :].view(NKV, HD)
            q = rope(rms(q, L["qn"]), c, s)
            k = rope(rms(k, L["kn"]), c, s)
            L["k"].index_copy_(1, pos, k.view(NKV, 1, HD))
            L["v"].index_copy_(1, pos, v.view(NKV, 1, HD))
            kk = L["k"].repeat_interleave(NH // NKV, 0).unsqueeze(0)
            vv = L["v"].repeat_interleave(NH // NKV, 0).unsqueeze(0)
            o = torch.nn.functional.scaled_dot_product_attention(
                q.view(1, NH, 1, HD), kk, vv, attn_mask=mask
            )
            x = x + o.view(1, NH * HD) @ L["o"].T
            xn = rms(x, L["n2"])
            gu = xn @ L["gu"].T
            x = x + (torch.nn.functional.silu(gu[:, :INTER]) * gu[:, INTER:]) @ L["down"].T
        logits.copy_(rms(x, fn) @ lm.T)
        pos.add_(1)

    def timed(f, reps):
        ts = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            f()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        return statistics.median(ts)

    # Copy bandwidth (read + write) in this process.
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    src.random_(0, 255)
    dst.copy_(src)
    copy_ms = timed(lambda: dst.copy_(src), 20)
    copy = 2 * src.numel() / (copy_ms * 1e-3) / 1e9
    del src, dst

    with torch.no_grad():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        pos.fill_(a.ctx)
        eager = timed(step, a.steps)
        pos.fill_(a.ctx)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        pos.fill_(a.ctx)
        graph = timed(g.replay, a.steps)
    wbytes = 2 * (
        a.layers * ((NH + 2 * NKV) * HD * HIDDEN + HIDDEN * NH * HD + 2 * INTER * HIDDEN + HIDDEN * INTER)
        + VOCAB * HIDDEN
    )
    # SDPA over the whole (masked) cache reads every row of k and v.
    kvbytes = a.layers * 2 * NKV * cap * HD * 2
    roof = (wbytes + kvbytes) / (copy * 1e9) * 1e3
    if a.json:
        out = dict(
            torch=torch.__version__,
            device=torch.cuda.get_device_name(),
            copy_gbps=copy,
            bytes_per_token=wbytes + kvbytes,
            roofline_ms=roof,
            graph_ms=graph,
            eager_ms=eager,
            finite=bool(torch.isfinite(logits).all()),
        )
        print(json.dumps(out))
        return
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, copy {copy:.0f} GB/s")
    print(f"finite logits: {bool(torch.isfinite(logits).all())}")
    print("| PyTorch bf16 decode | ms/token | tokens/s | % of its roofline |")
    print("|---|---:|---:|---:|")
    print(f"| roofline ({(wbytes + kvbytes) / 1e9:.2f} GB/token) | {roof:.3f} | {1e3 / roof:.0f} | 100% |")
    print(f"| CUDA graph | {graph:.3f} | {1e3 / graph:.0f} | {100 * roof / graph:.0f}% |")
    print(f"| eager | {eager:.3f} | {1e3 / eager:.0f} | {100 * roof / eager:.0f}% |")


if __name__ == "__main__":
    main()
