"""Runs the VITS duration-predictor CUDA kernels (crates/runtime/kernels/vits_dp.cu:
dw_conv1d, gelu_f32, gelu_add_f32, rq_spline_inverse) on the host through shim.h with
their Rust wrapper's launch geometry, against float64 numpy references written from the
definitions, on seeded random non-zero inputs.

Why: written without a GPU; this executes the kernels' own index arithmetic and the
spline's bin search / tails before the device tests run. It does not check the Rust
argument order (read it) nor GPU math-library accuracy (glibc's expf/erff/log1pf stand
in). Usage: python3 tools/cuda_host_emulate/check_vits_dp.py (needs g++ and numpy)."""
import ctypes
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SO = os.path.join(tempfile.gettempdir(), "favlo_cuda_emu_vits_dp.so")
subprocess.run(
    ["g++", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-Wno-unknown-pragmas",
     "-o", SO, os.path.join(HERE, "emu_vits_dp.cpp")],
    check=True,
)
lib = ctypes.CDLL(SO)
F = ctypes.POINTER(ctypes.c_float)
rng = np.random.default_rng(4321)


def rand(n, scale):
    return ((rng.uniform(-1, 1, n) + 0.01) * scale).astype(np.float32)


def p(a):
    return a.ctypes.data_as(F)


def check(name, got, want, bound):
    err = np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30)
    print(f"{name}: rel err {err:.2e} (bound {bound:.0e})")
    if not err <= bound:
        sys.exit(f"FAILED: {name}")


# depthwise dilated convolution (DDSConv: k3, dilations 1, 3, 9, padding d)
for c, t, k, d, pad, bias in [(192, 75, 3, 1, 1, True), (192, 75, 3, 9, 9, True),
                              (5, 4, 3, 3, 3, False), (3, 11, 5, 2, 1, True)]:
    lout = t + 2 * pad - d * (k - 1)
    x, w, b = rand(c * t, 2.0), rand(c * k, 0.5), rand(c, 0.5)
    y = np.full(c * lout + 3, np.nan, np.float32)
    lib.emu_dw_conv1d(p(x), p(w), p(b), p(y), int(bias), c, t, lout, k, d, pad)
    assert np.all(np.isnan(y[c * lout:]))
    xp = np.pad(x.astype(np.float64).reshape(c, t), ((0, 0), (pad, pad)))
    W = w.astype(np.float64).reshape(c, k)
    want = sum(W[:, kk:kk + 1] * xp[:, kk * d:kk * d + lout] for kk in range(k))
    if bias:
        want = want + b.astype(np.float64)[:, None]
    check(f"dw_conv1d c{c} t{t} k{k} d{d} p{pad} bias {bias}", y[:c * lout], want.reshape(-1), 1e-6)

# GELU (exact erf), in place and added into a residual
gelu64 = np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))))
for n in [192 * 75, 7, 1]:
    x = rand(n, 6.0)
    want = gelu64(x.astype(np.float64))
    g = x.copy()
    lib.emu_gelu(p(g), ctypes.c_longlong(n))
    check(f"gelu n{n}", g, want, 1e-6)
    acc = rand(n, 3.0)
    old = acc.astype(np.float64)
    lib.emu_gelu_add(p(acc), p(x), ctypes.c_longlong(n))
    check(f"gelu_add n{n}", acc, old + want, 1e-6)

# inverse rational-quadratic spline with linear tails
MIN = 1e-3


def knots64(u, bound):
    e = np.exp(u - u.max())
    sz = MIN + (1 - MIN * len(u)) * e / e.sum()
    k = np.concatenate([[-bound], 2 * bound * np.cumsum(sz) - bound])
    k[-1] = bound
    return k


def derivs64(u):
    edge = math.log(math.exp(1 - MIN) - 1)
    uu = np.concatenate([[edge], u, [edge]])
    return MIN + np.log1p(np.exp(uu))


def forward64(x, cw, ch, dd):
    i = max(0, min(len(cw) - 2, int(np.searchsorted(cw, x, side="right")) - 1))
    w, h = cw[i + 1] - cw[i], ch[i + 1] - ch[i]
    delta = h / w
    th = (x - cw[i]) / w
    num = h * (delta * th * th + dd[i] * th * (1 - th))
    den = delta + (dd[i + 1] + dd[i] - 2 * delta) * th * (1 - th)
    return ch[i] + num / den


def inverse64(y, cw, ch, dd):
    i = max(0, min(len(cw) - 2, int(np.searchsorted(ch, y, side="right")) - 1))
    w, h = cw[i + 1] - cw[i], ch[i + 1] - ch[i]
    delta = h / w
    dy = y - ch[i]
    s = dd[i] + dd[i + 1] - 2 * delta
    a = dy * s + h * (delta - dd[i])
    b = h * dd[i] - dy * s
    c = -delta * dy
    root = 2 * c / (-b - math.sqrt(max(b * b - 4 * a * c, 0.0)))
    return root * w + cw[i]


worst = 0.0
for bins, t, bound in [(10, 300, 5.0), (10, 7, 5.0), (3, 50, 2.0), (1, 5, 5.0), (32, 40, 5.0)]:
    scale = np.float32(1.0 / math.sqrt(192.0))
    prm = rand((3 * bins - 1) * t, 25.0)
    prm[2 * bins * t:] = rand((bins - 1) * t, 3.0)
    z = rand(t, bound * 1.3)  # about a quarter in the tails
    z[0], z[-1] = np.float32(bound), np.float32(-bound)
    zin = z.copy()
    lib.emu_spline(p(z), p(prm), t, bins, ctypes.c_float(scale), ctypes.c_float(bound))
    P = prm.astype(np.float64).reshape(3 * bins - 1, t)
    for j in range(t):
        y = float(zin[j])
        if not -bound <= y <= bound:
            assert z[j] == zin[j], ("tail", bins, j)
            continue
        cw = knots64(P[:bins, j] * float(scale), bound)
        ch = knots64(P[bins:2 * bins, j] * float(scale), bound)
        dd = derivs64(P[2 * bins:, j])
        x = inverse64(y, cw, ch, dd)
        ex = abs(float(z[j]) - x) / (1 + abs(x))
        ey = abs(forward64(float(z[j]), cw, ch, dd) - y) / bound
        e = min(ex, ey)
        worst = max(worst, e)
        if not e <= 1e-5:
            sys.exit(f"FAILED: spline bins {bins} t {j}: y {y} got {z[j]} want {x}")
print(f"rq_spline_inverse: min(|Δx|/(1+|x|), |f(x̂)−y|/B) ≤ {worst:.2e} (bound 1e-5); tails exact")
print("all kernels match")
