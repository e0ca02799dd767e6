// The derivative of GPT-2's tanh GELU in f32 with AVX-512 intrinsics, at SIMD level
// x86-64-v4, for the fused bias + GELU backward pass (bias_act.cpp) and the unfused GELU
// gradient (elementwise.cpp). The generic loop computes s = 1 / (1 + exp(z)) with a
// vdivps; here the reciprocal is vrcp14ps plus two Newton steps (~0.5 ulp), 16-20% less
// time per element on this host. The exp is the same clamped Cephes polynomial
// (cpu/exp_poly.h), scaled by vscalefps. The forward stays the generic loop: the same
// reciprocal there (with one more correction of the quotient) measured 5% slower than
// the division, which overlaps with the forward's other arithmetic.
#pragma once
#include <cstdint>

namespace strata::cpu {

/// Whether this build has the AVX-512 GELU gradient rows (GCC or clang on x86-64). Call them only
/// when simd_level() == SimdLevel::v4.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
inline constexpr bool kHaveGeluAvx512 = true;
#else
inline constexpr bool kHaveGeluAvx512 = false;
#endif

/// d[j] = g[j] * gelu_tanh'(y[j] + b[j]) for j < n (b null: no bias); p[j] += d[j] when
/// p is not null (the bias-gradient partial of a row block).
void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p, int64_t n);

}  // namespace strata::cpu
