// GPT-2's tanh GELU in f32 with AVX-512 intrinsics, for the fused bias + GELU passes
// (bias_act.cpp) at SIMD level x86-64-v4. The generic loops compute x / (1 + exp(z)) with
// a vdivps, which alone took a third of the pass; here the reciprocal is vrcp14ps plus a
// Newton step, and the quotient gets one more correction (y0 + r (x - d y0)), so the
// result is within ~1 ulp of the division's. The exp is the same clamped Cephes
// polynomial (cpu/exp_poly.h), scaled by vscalefps.
#pragma once
#include <cstdint>

namespace strata::cpu {

/// Whether this build has the AVX-512 GELU rows (GCC or clang on x86-64). Call them only
/// when simd_level() == SimdLevel::v4.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
inline constexpr bool kHaveGeluAvx512 = true;
#else
inline constexpr bool kHaveGeluAvx512 = false;
#endif

/// o[j] = gelu_tanh(y[j] + b[j]) for j < n (b null: no bias).
void gelu_tanh_row_avx512(const float* y, const float* b, float* o, int64_t n);
/// d[j] = g[j] * gelu_tanh'(y[j] + b[j]) for j < n (b null: no bias); p[j] += d[j] when
/// p is not null (the bias-gradient partial of a row block).
void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p, int64_t n);

}  // namespace strata::cpu
