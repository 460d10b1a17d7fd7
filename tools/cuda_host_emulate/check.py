"""Runs the VITS flow / text-encoder CUDA kernels (conv1d.cu: gate_f32, copy_rows_f32,
conv1d; rel_encoder.cu) on the host through shim.h and compares them with float64
numpy references written from the definitions, on seeded random non-zero inputs.

Why: the helper that wrote these kernels had no GPU; this executes the kernels' own
index arithmetic (with the Rust wrappers' launch geometry) so a wrong index shows up
before the device tests run. It does not check the Rust argument order (read it) nor
GPU math-library accuracy. Usage: python3 tools/cuda_host_emulate/check.py
(needs g++ and numpy)."""
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SO = os.path.join(tempfile.gettempdir(), "favlo_cuda_emu.so")
subprocess.run(
    ["g++", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-Wno-unknown-pragmas",
     "-o", SO, os.path.join(HERE, "emu.cpp")],
    check=True,
)
lib = ctypes.CDLL(SO)
F = ctypes.POINTER(ctypes.c_float)
rng = np.random.default_rng(1234)


def rand(n, scale):
    return ((rng.uniform(-1, 1, n) + 0.01) * scale).astype(np.float32)


def p(a):
    return a.ctypes.data_as(F)


def check(name, got, want, bound):
    err = np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30)
    print(f"{name}: rel err {err:.2e} (bound {bound:.0e})")
    if not err <= bound:
        sys.exit(f"FAILED: {name}")


# gate
for c, t in [(192, 200), (5, 3), (1, 1)]:
    n = c * t
    a = rand(2 * n, 6.0)
    out = np.full(n + 3, np.nan, np.float32)
    lib.emu_gate(p(a), p(out), ctypes.c_longlong(n))
    assert np.all(np.isnan(out[n:]))
    a64 = a.astype(np.float64)
    check(f"gate [{c},{t}]", out[:n], np.tanh(a64[:n]) / (1 + np.exp(-a64[n:])), 1e-6)

# copy_rows
for rows, ln, drows, r0 in [(96, 200, 192, 96), (96, 200, 192, 0), (3, 5, 7, 2)]:
    src = rand(rows * ln, 3.0)
    for rev in (0, 1):
        dst = rand(drows * ln, 3.0)
        want = dst.copy().reshape(drows, ln)
        s2 = src.reshape(rows, ln)
        want[r0:r0 + rows] = s2[::-1] if rev else s2
        lib.emu_copy_rows(p(src), p(dst), rows, ln, r0, rev)
        assert np.array_equal(dst.reshape(drows, ln), want), (rows, ln, r0, rev)
print("copy_rows: exact")

# conv1d (the flow's shapes: k5 in-layers, 1x1 res/skip, accumulate; ffn with slope 0)
for cin, cout, k, d, pad, t, slope, acc, res in [
    (192, 384, 5, 1, 2, 37, None, False, False),
    (96, 192, 1, 1, 0, 50, None, False, False),
    (192, 96, 1, 1, 0, 50, None, True, False),
    (768, 192, 3, 1, 1, 20, 0.0, False, True),
    (5, 7, 3, 2, 2, 9, 0.1, True, True),
]:
    x = rand(cin * t, 2.0)
    w = rand(cout * cin * k, 0.2)
    b = rand(cout, 0.5)
    r = rand(cout * t, 1.0)
    y = rand(cout * t, 1.0) if acc else np.full(cout * t, np.nan, np.float32)
    old = y.astype(np.float64).copy()
    lib.emu_conv1d(p(x), p(w), p(b), p(r), p(y), 1, int(res), int(acc), int(slope is not None),
                   ctypes.c_float(slope or 0.0), cin, cout, t, t, k, d, pad)
    xa = x.astype(np.float64).reshape(cin, t)
    if slope is not None:
        xa = np.where(xa < 0, xa * slope, xa)
    xp = np.pad(xa, ((0, 0), (pad, pad)))
    W = w.astype(np.float64).reshape(cout, cin, k)
    want = np.zeros((cout, t))
    for kk in range(k):
        want += W[:, :, kk] @ xp[:, kk * d:kk * d + t]
    want += b.astype(np.float64)[:, None]
    want = want.reshape(-1)
    if res:
        want += r
    if acc:
        want += old
    check(f"conv1d {cin}->{cout} k{k} d{d} slope {slope} acc {acc} res {res}", y, want, 1e-5)

# relative attention
for h, d, t, w in [(2, 96, 75, 4), (3, 5, 7, 4), (2, 8, 1, 4), (1, 16, 13, 2)]:
    n = h * d * t
    q, k_, v = rand(n, 1.0), rand(n, 1.0), rand(n, 1.0)
    ek, ev = rand((2 * w + 1) * d, 0.5), rand((2 * w + 1) * d, 0.5)
    scores = np.full(h * t * t, np.nan, np.float32)
    out = np.full(n, np.nan, np.float32)
    lib.emu_rel_attention(p(q), p(k_), p(v), p(ek), p(ev), p(scores), p(out), h, d, t, w)
    Q, K, V = (m.astype(np.float64).reshape(h, d, t) for m in (q, k_, v))
    EK, EV = ek.astype(np.float64).reshape(-1, d), ev.astype(np.float64).reshape(-1, d)
    want = np.zeros((h, d, t))
    for hh in range(h):
        for i in range(t):
            kk = K[hh].copy()
            vv = V[hh].copy()
            for j in range(t):
                rr = j - i + w
                if 0 <= rr <= 2 * w:
                    kk[:, j] += EK[rr]
                    vv[:, j] += EV[rr]
            lg = Q[hh][:, i] @ kk / np.sqrt(d)
            e = np.exp(lg - lg.max())
            want[hh, :, i] = vv @ (e / e.sum())
    check(f"rel_attention h{h} d{d} t{t} w{w}", out, want.reshape(-1), 1e-5)

# layer norm over channels
for c, t, off in [(192, 75, 0.0), (192, 20, 30.0), (5, 3, 0.0), (7, 1, -4.0)]:
    x = rand(c * t, 3.0) + np.float32(off)
    g, b = rand(c, 1.5), rand(c, 0.5)
    y = np.full(c * t, np.nan, np.float32)
    lib.emu_ln(p(x), p(g), p(b), p(y), c, t, ctypes.c_float(1e-5))
    X = x.astype(np.float64).reshape(c, t)
    m, var = X.mean(0), X.var(0)
    want = (X - m) / np.sqrt(var + 1e-5) * g.astype(np.float64)[:, None] + b.astype(np.float64)[:, None]
    check(f"layer norm [{c},{t}] offset {off}", y, want.reshape(-1), 1e-5)
print("all kernels match")
