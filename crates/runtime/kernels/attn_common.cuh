// Favlo CUDA: helpers shared by the two attention-decode modules (attention.cu,
// attention_onepass.cu), prepended to each.

// Two f16 values (low half first) of a 32-bit word, widened to f32.
__device__ __forceinline__ void h2f2(unsigned u, float& a, float& b) {
    asm("{.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;}"
        : "=f"(a), "=f"(b) : "r"(u));
}
