// GPT-2's tanh GELU and its derivative in f32 with AVX-512 intrinsics, at SIMD level
// x86-64-v4, for the fused bias + GELU passes (bias_act.cpp) and the unfused GELU and its
// gradient (elementwise.cpp). The exp is the clamped Cephes polynomial (cpu/exp_poly.h)
// scaled by vscalefps, the sigmoid's reciprocal one vdivps (exact to 0.5 ulp). Against the
// generic loop compiled for the same level (the same formulas, whose clamps and NaN checks
// the compiler turns into masked blends), this takes 0.20 instead of 0.38 ns per element
// forward and 0.33 instead of 0.53 backward on this host (AMD EPYC); a division-free
// reciprocal (vrcp14ps and two Newton steps) measured 0.46 ns backward there, slower than
// the vdivps.
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

/// out[j] = gelu_tanh(y[j] + b[j]) for j < n (b null: no bias).
void gelu_tanh_row_avx512(const float* y, const float* b, float* out, int64_t n);

/// d[j] = g[j] * gelu_tanh'(y[j] + b[j]) for j < n (b null: no bias); p[j] += d[j] when
/// p is not null (the bias-gradient partial of a row block).
void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p, int64_t n);

}  // namespace strata::cpu
