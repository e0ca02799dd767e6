// Activations in f32 rows with AVX-512 intrinsics, at SIMD level x86-64-v4: GPT-2's tanh
// GELU and its derivative, for the fused bias + GELU passes (bias_act.cpp) and the unfused
// GELU and its gradient (elementwise.cpp), and the Llama MLP's SwiGLU, silu(g) * u, and its
// gradients (swiglu.cpp); and cross-entropy's softmax rows (loss.cpp). The exp is Cephes'
// reduction and polynomial (cpu/exp_avx512.h) scaled by vscalefps, the sigmoid's reciprocal
// one vdivps (exact to 0.5 ulp). The generic loops
// compiled for the same level (the same formulas) turn their clamps and NaN checks into
// masked blends; against them, per element on one core of this host (AMD EPYC):
//   ops::bias_gelu (2048 x 512)       0.38 -> 0.26 ns, its backward 0.53 -> 0.41 ns
//   ops::swiglu (2048 x 352)          0.38 -> 0.23 ns, its backward 0.48 -> 0.27 ns
// A division-free reciprocal (vrcp14ps and two Newton steps) measured slower than the
// vdivps here (the GELU gradient row alone: 0.46 against 0.33 ns).
#pragma once
#include <cstdint>

#include <strata/tensor/cpu/simd_level.h>

namespace strata::cpu {

/// Whether this build has the AVX-512 rows (GCC or clang on x86-64): these and
/// norm_avx512.h's, dropout_avx512.h's and pool_avx512.h's.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
inline constexpr bool kHaveActAvx512 = true;
#else
inline constexpr bool kHaveActAvx512 = false;
#endif

/// Whether the AVX-512 rows run now: built, and the SIMD level in effect is x86-64-v4. The
/// one test every caller of these rows and of the other *_avx512.h rows makes before
/// calling them.
inline bool avx512_rows() { return kHaveActAvx512 && simd_level() == SimdLevel::v4; }

/// out[j] = gelu_tanh(y[j] + b[j]) for j < n (b null: no bias).
void gelu_tanh_row_avx512(const float* y, const float* b, float* out, int64_t n);

/// d[j] = g[j] * gelu_tanh'(y[j] + b[j]) for j < n (b null: no bias); p[j] += d[j] when
/// p is not null (the bias-gradient partial of a row block).
void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p, int64_t n);

/// y[j] = silu(g[j]) * u[j] for j < n.
void swiglu_row_avx512(const float* g, const float* u, float* y, int64_t n);

/// dg[j] = dy[j] u[j] silu'(g[j]) and du[j] = dy[j] silu(g[j]) for j < n.
void swiglu_grad_row_avx512(const float* dy, const float* g, const float* u, float* dg, float* du, int64_t n);

/// p[j] = softmax(x)[j] for j < n (n >= 1), returning the row max in *mx and the sum of
/// exp(x - max) in *sum: softmax.h's softmax_row for f32 (exp 0 below -86, NaN kept).
void softmax_row_avx512(const float* x, float* p, int64_t n, float* mx, float* sum);

}  // namespace strata::cpu
