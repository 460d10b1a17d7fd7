// Favlo CUDA: one 4 KB weight chunk of the tensor-core GEMV on the mma (`chunk_mma`), shared
// by the ping-pong kernel (gemv_pp.cu), the one-launch chain (gemv_chain.cu) and the
// attention + o projection kernel (attn_o.cu). Needs gemv_common.cuh in front.

// The partial sums of one chunk (pieces q, scales sc, x slice xb) into acc. MODE
// (timing probes only, results meaningless unless 0): 1 = raw words as A fragments (no
// decode), 2 = decode but fragments folded by XOR instead of the mma.
template <int FMT, int MODE = 0>
__device__ __forceinline__ void chunk_mma(const uint4 (&q)[8], uint2 sc,
                                          const unsigned char* xb, int t, int h, bool act,
                                          float (&acc)[4]) {
    constexpr int STEPS = (FMT == 4) ? 8 : 4;
    constexpr int XB = (FMT == 4) ? 8 : 4;
    const float unbias = (FMT == 4) ? 16384.0f : 1.0f;  // FP4 fragments are value x 2^-14
    const float* xf = reinterpret_cast<const float*>(xb + XB * 128);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int bl = FMT == 4 ? 4 * j + t : 2 * j + (t >> 1);
        const float f = xf[bl] * unbias;
        uint4 bx[STEPS / 2];
        const uint4* xp = reinterpret_cast<const uint4*>(
            xb + bl * 128 + h * 64 + (FMT == 8 ? (t & 1) * 32 : 0));
#pragma unroll
        for (int v = 0; v < STEPS / 2; ++v) bx[v] = act ? xp[v] : make_uint4(0u, 0u, 0u, 0u);
        const unsigned* bw = reinterpret_cast<const unsigned*>(bx);
        float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int st = 0; st < STEPS; ++st) {
            unsigned a0, a2, a1, a3, e0, e2, e1, e3;
            if (MODE == 1) {
                const unsigned* r0 = reinterpret_cast<const unsigned*>(&q[0 * 2 + j]);
                const unsigned* r1 = reinterpret_cast<const unsigned*>(&q[1 * 2 + j]);
                const unsigned* r2 = reinterpret_cast<const unsigned*>(&q[2 * 2 + j]);
                const unsigned* r3 = reinterpret_cast<const unsigned*>(&q[3 * 2 + j]);
                a0 = r0[st & 3]; a2 = r0[(st + 1) & 3];
                a1 = r1[st & 3]; a3 = r1[(st + 1) & 3];
                e0 = r2[st & 3]; e2 = r2[(st + 1) & 3];
                e1 = r3[st & 3]; e3 = r3[(st + 1) & 3];
            } else {
                a_frag<FMT>(q[0 * 2 + j], st, a0, a2);
                a_frag<FMT>(q[1 * 2 + j], st, a1, a3);
                a_frag<FMT>(q[2 * 2 + j], st, e0, e2);
                a_frag<FMT>(q[3 * 2 + j], st, e1, e3);
            }
            if (MODE == 2) {
                d0[st & 3] = __uint_as_float(__float_as_uint(d0[st & 3]) ^ a0 ^ a1 ^ a2 ^ a3 ^ bw[2 * st]);
                d1[st & 3] = __uint_as_float(__float_as_uint(d1[st & 3]) ^ e0 ^ e1 ^ e2 ^ e3 ^ bw[2 * st + 1]);
            } else {
                mma16816(d0, a0, a1, a2, a3, bw[2 * st], bw[2 * st + 1]);
                mma16816(d1, e0, e1, e2, e3, bw[2 * st], bw[2 * st + 1]);
            }
        }
        const unsigned lo = sc.x, hi = sc.y;
        acc[0] = fmaf(d0[0] + d0[1], e8m0_sel((lo >> (8 * j)) & 0xffu) * f, acc[0]);
        acc[1] = fmaf(d0[2] + d0[3], e8m0_sel((lo >> (16 + 8 * j)) & 0xffu) * f, acc[1]);
        acc[2] = fmaf(d1[0] + d1[1], e8m0_sel((hi >> (8 * j)) & 0xffu) * f, acc[2]);
        acc[3] = fmaf(d1[2] + d1[3], e8m0_sel((hi >> (16 + 8 * j)) & 0xffu) * f, acc[3]);
    }
}
