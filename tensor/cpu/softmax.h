// CPU kernels for softmax / log_softmax and their backward over one dim of a
// contiguous tensor viewed as (outer, n, inner), plus the vectorisable exp they
// (and the cross-entropy kernel) use.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <strata/tensor/cpu/exp_poly.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// exp that the compiler can vectorise: std::exp for double (full precision, used by
/// gradcheck); for float a Cephes-style range reduction + degree-6 polynomial with
/// no branches or libm calls: ~1e-7 relative error, 0 below -86 (true value < 5e-38),
/// +inf above ln(FLT_MAX), NaN propagates.
template <class T>
inline T vexp(T x) {
  if constexpr (sizeof(T) == 8) {
    return std::exp(x);
  } else {
    constexpr float kLo = -86.0f, kHi = 88.72283f;
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float v = x < kLo ? kLo : x;
    v = v > kHi ? kHi : v;
    const float t = v * 1.44269504088896341f + kRound;
    const float n = t - kRound;                                                // round(v / ln2)
    const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);  // the same, as int
    const float r = v - n * 0.693359375f + n * 2.12194440e-4f;                 // v - n ln2, in two parts
    const float p = detail::exp_poly_f32(r);
    const float half_scale = std::bit_cast<float>((ni + 126) << 23);  // 2^(n-1), n in [-124, 128]
    const float e = p * half_scale * 2.0f;
    return x < kLo ? 0.0f : (x > kHi ? std::numeric_limits<float>::infinity() : e);
  }
}

/// y = softmax(x) (log_softmax when `log`) over the middle dim of (outer, n, inner).
/// x, y contiguous, same shape and dtype (f32/f64, or f16/bf16 computed in f32).
void softmax_kernel(const Tensor& x, Tensor& y, int64_t outer, int64_t n, int64_t inner, bool log);
/// softmax:     dx = y * (dy - sum(dy * y))
/// log_softmax: dx = dy - exp(y) * sum(dy)      (sums over the middle dim)
void softmax_backward_kernel(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t outer, int64_t n,
                             int64_t inner, bool log);

/// The row max and sum of exp(x - max) softmax_row computed; cross-entropy's loss is
/// log(sum) + max - x[target].
template <class T>
struct SoftmaxRowStats {
  T max;
  T sum;
};

/// y = softmax(x) (or log_softmax when `log`) over one contiguous row of n. TI and TO are
/// storage types (f16/bf16 widened through ld, results rounded once through st); the math
/// runs in acc_t<TI>. A 16-bit y is written in a final pass that recomputes exp, so each
/// probability is rounded once.
template <class TI, class TO = TI, class A = acc_t<TI>>
SoftmaxRowStats<A> softmax_row(const TI* x, TO* y, int64_t n, bool log) {
  A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = ld(x[i]) > mx ? ld(x[i]) : mx;
  A s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += vexp(ld(x[i]) - mx);
    const A lse = mx + std::log(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = st<TO>(ld(x[i]) - lse);
  } else if constexpr (kIs16<TO>) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += vexp(ld(x[i]) - mx);
    const A inv = A(1) / s;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = st<TO>(vexp(ld(x[i]) - mx) * inv);
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      const A e = vexp(ld(x[i]) - mx);
      y[i] = e;
      s += e;
    }
    const A inv = A(1) / s;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
  return {mx, s};
}

}  // namespace strata::cpu
