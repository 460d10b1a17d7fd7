#!/usr/bin/env python3
"""A numpy model of the one-pass attention's tensor-core loop (`a1_tc_run` in
crates/runtime/kernels/attention_onepass.cu), lane by lane, checked against a float64
softmax attention.

It reproduces what each of a warp's 32 lanes loads (16-byte pieces of K and V rows),
the mma.m16n8k16 fragment layouts of the PTX ISA (A row-major 16x16, B column-major
16x8, C 16x8; groupID = lane / 4, threadID_in_group = lane % 4), the f16 hi/lo splits
of q and p, the `prmt` pairing of V rows, the per-tile online softmax with masked keys
and the block's merge of its 8 warps. A change to the kernel's lane mapping can be
tried here first, without a GPU: `python3 tools/cuda/onepass_tc_model.py` prints the
error of each case (f16 inputs, float64 reference; expect ~1e-7, fails above 1e-5).
"""
import sys

import numpy as np

NEG = -np.inf
PSCALE = 16384.0  # A1_PSCALE


def words(row, start):
    """One lane's 16-byte load of an f16 row: 4 words of (low, high) halves."""
    seg = row[start:start + 8]
    return [(seg[2 * w], seg[2 * w + 1]) for w in range(4)]


def mma(afr, bfr):
    """m16n8k16: the 32 lanes' A and B fragments in, their C fragments out (f32 sums)."""
    a = np.zeros((16, 16))
    b = np.zeros((16, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        f = afr[lane]
        a[g, 2 * c], a[g, 2 * c + 1] = f[0]
        a[g + 8, 2 * c], a[g + 8, 2 * c + 1] = f[1]
        a[g, 2 * c + 8], a[g, 2 * c + 9] = f[2]
        a[g + 8, 2 * c + 8], a[g + 8, 2 * c + 9] = f[3]
        b[2 * c, g], b[2 * c + 1, g] = bfr[lane][0]
        b[2 * c + 8, g], b[2 * c + 9, g] = bfr[lane][1]
    c = a.astype(np.float32) @ b.astype(np.float32)
    return np.array([(c[l >> 2, 2 * (l & 3)], c[l >> 2, 2 * (l & 3) + 1],
                      c[(l >> 2) + 8, 2 * (l & 3)], c[(l >> 2) + 8, 2 * (l & 3) + 1])
                     for l in range(32)])


def split(x0, x1):
    """a1_split: (hi pair, lo pair) with x = hi + lo."""
    h0, h1 = np.float16(x0), np.float16(x1)
    return (h0, h1), (np.float16(np.float32(x0) - np.float32(h0)),
                      np.float16(np.float32(x1) - np.float32(h1)))


def warp_state(q, k, v, k0, kend, kt, g_heads, hd, nw):
    """One warp's (max, sum, out) per head over its tiles kt, kt + 16 nw, ..."""
    qa = []
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        fr = []
        for s in range(hd // 16):
            d = 32 * (s >> 1) + 8 * c + 4 * (s & 1)
            x = [np.float32(q[g, d + e]) if g < g_heads else np.float32(0) for e in range(4)]
            h01, l01 = split(x[0], x[1])
            h23, l23 = split(x[2], x[3])
            fr.append((h01, l01, h23, l23))
        qa.append(fr)
    o = np.zeros((32, hd // 8, 4))
    m = np.full(32, NEG)
    lsum = np.zeros(32)

    def row(j):
        return k0 if j >= kend else j

    while kt < kend:
        kf = [[[words(k[row(kt + 8 * n + (ln >> 2))], 32 * t + 8 * (ln & 3))
                for t in range(hd // 32)] for n in range(2)] for ln in range(32)]
        vf = [[[words(v[row(kt + 2 * (ln & 3) + (kk & 1) + 8 * (kk >> 1))], 64 * h + 8 * (ln >> 2))
                for h in range(hd // 64)] for kk in range(4)] for ln in range(32)]
        sa = np.zeros((2, 32, 4))
        for n in range(2):
            for s in range(hd // 16):
                bfr = [(kf[ln][n][s >> 1][2 * (s & 1)], kf[ln][n][s >> 1][2 * (s & 1) + 1])
                       for ln in range(32)]
                sa[n] += mma([qa[ln][s] for ln in range(32)], bfr)
        sc = np.full((32, 4), NEG)
        for ln in range(32):
            c = ln & 3
            for e in range(4):
                n, i = e >> 1, e & 1
                if kt + 8 * n + 2 * c + i < kend:
                    sc[ln, e] = sa[n][ln][i] + sa[n][ln][i + 2]
        mt = sc.max(axis=1)
        mt = np.array([max(mt[(ln & ~3) + r] for r in range(4)) for ln in range(32)])
        mn = np.maximum(m, mt)
        corr = np.exp2(m - mn)
        p = np.exp2(sc - mn[:, None])
        lsum = lsum * corr + p.sum(axis=1)
        m = mn
        o *= corr[:, None, None]
        pa = []
        for ln in range(32):
            h01, l01 = split(p[ln, 0] * PSCALE, p[ln, 1] * PSCALE)
            h23, l23 = split(p[ln, 2] * PSCALE, p[ln, 3] * PSCALE)
            pa.append((h01, l01, h23, l23))
        for j in range(hd // 8):
            h, w, half = j >> 3, (j & 7) >> 1, j & 1
            bfr = [((vf[ln][0][h][w][half], vf[ln][1][h][w][half]),
                    (vf[ln][2][h][w][half], vf[ln][3][h][w][half])) for ln in range(32)]
            o[:, j, :] += mma(pa, bfr)
        kt += 16 * nw
    total = np.array([sum(lsum[(ln & ~3) + r] for r in range(4)) for ln in range(32)])
    wo = np.zeros((g_heads, hd))
    wm = np.full(g_heads, NEG)
    wl = np.zeros(g_heads)
    for ln in range(32):
        g, c = ln >> 2, ln & 3
        if g < g_heads:
            for j in range(hd // 8):
                d = 64 * (j >> 3) + (j & 7) + 16 * c
                wo[g, d] = (o[ln, j, 0] + o[ln, j, 2]) / PSCALE
                wo[g, d + 8] = (o[ln, j, 1] + o[ln, j, 3]) / PSCALE
            if c == 0:
                wm[g], wl[g] = m[ln], total[ln]
    return wm, wl, wo


def block(q, k, v, k0, kend, g_heads, hd, nw=8):
    """The block's merged attention over keys k0..kend (warp w starts at k0 + 16 w)."""
    st = [warp_state(q, k, v, k0, kend, k0 + 16 * w, g_heads, hd, nw) for w in range(nw)]
    big = np.max([s[0] for s in st], axis=0)
    den = sum(s[1] * np.exp2(s[0] - big) for s in st)
    num = sum(s[2] * np.exp2(s[0] - big)[:, None] for s in st)
    return num / den[:, None]


def main():
    rng = np.random.default_rng(3)
    worst = 0.0
    for hd, g, n, k0, kend in [(128, 4, 300, 0, 300), (128, 4, 300, 37, 171), (64, 8, 200, 5, 38),
                               (128, 1, 100, 16, 17), (64, 3, 500, 100, 489)]:
        k = rng.standard_normal((n, hd)).astype(np.float16)
        v = (2 * rng.standard_normal((n, hd))).astype(np.float16)
        q = (rng.standard_normal((g, hd)) * 0.3).astype(np.float32)
        out = block(q, k, v, k0, kend, g, hd)
        s = q.astype(np.float64) @ k[k0:kend].astype(np.float64).T
        w = np.exp2(s - s.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        want = w @ v[k0:kend].astype(np.float64)
        err = np.abs(out - want).max() / (1 + np.abs(want).max())
        worst = max(worst, err)
        print(f"hd {hd} group {g} keys {k0}..{kend}: max|err|/(1+max|ref|) {err:.2e}")
    print(f"worst {worst:.2e} (tolerance 1e-5)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
