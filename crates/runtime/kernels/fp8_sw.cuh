// Favlo CUDA: E4M3 -> f16 without the FP8 conversion instruction (sm_80/sm_86/sm_87:
// Ampere has none; sm_89 and later use `cvt.rn.f16x2.e4m3x2`).
//
// t holds two E4M3 codes s|eeee|mmm as its bytes 1 and 3 (bits 15..8 and 31..24),
// bytes 0 and 2 zero. Moving each code's eeee|mmm one bit down puts it at f16 bits
// 13..10 | 9..7 beside its sign at bit 15, and that f16 is the code's value x 2^-8
// exactly: for e > 0 it is (1 + m/8) 2^(e-15) against (1 + m/8) 2^(e-7); for e = 0 the
// f16 subnormal m 2^-17 against the E4M3 subnormal m 2^-9. One f16x2 multiply by 2^8
// (exact: a power of two, results within +-448) gives the value. Codes 0x7f/0xff
// (E4M3's NaN) come out as +-480 instead; MX weights never hold them.
__device__ __forceinline__ unsigned e4m3_sw(unsigned t) {
    const unsigned h = ((t >> 1) & 0x3F803F80u) | (t & 0x80008000u);
    unsigned r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(0x5C005C00u));
    return r;
}
