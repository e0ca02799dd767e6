// CPU kernels for the elementwise ops. Front ends (tensor/elementwise.cpp) check
// shapes and allocate `out`; inputs arrive already broadcast-compatible with out.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <strata/tensor/cpu/exp_poly.h>
#include <type_traits>

#include <strata/tensor/ops.h>

namespace strata::cpu {

// Branch-free f32 transcendentals that GCC vectorises inside plain loops (libm's
// scalar calls do not). exp: Cephes polynomial, ~1 ulp, 0 below -87, inf above
// 88.72. log: Cephes, ~1 ulp. tanh / erf: Eigen's rational approximations, a few ulp. NaN propagates.
[[gnu::always_inline]] inline float exp_f32(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.7f ? 88.7f : xc;
  xc = xc == xc ? xc : 0.0f;  // keep NaN out of the float->int conversion
  // n = round(x / ln2): adding 1.5*2^23 rounds to an integer (std::floor does not vectorise)
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;  // x - n ln2, ln2 split in two for accuracy
  r = r + n * 2.12194440e-4f;
  const float p = detail::exp_poly_f32(r);
  const float half_scale = std::bit_cast<float>((int32_t(n) + 126) << 23);  // 2^(n-1), n in [-125, 128]
  float y = p * half_scale * 2.0f;
  y = x > 88.72283f ? std::numeric_limits<float>::infinity() : y;
  y = x < -87.0f ? 0.0f : y;
  return x == x ? y : x;
}

[[gnu::always_inline]] inline float tanh_f32(float a) {
  float x = a > 7.99881172f ? 7.99881172f : a;
  x = x < -7.99881172f ? -7.99881172f : x;
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float r = std::abs(a) < 0.0004f ? a : p / q;
  r = a > 9.02f ? 1.0f : r;  // float tanh is exactly +-1 beyond 9.02
  return a < -9.02f ? -1.0f : r;
}

[[gnu::always_inline]] inline float erf_f32(float a) {
  float x = a > 4.0f ? 4.0f : a;
  x = x < -4.0f ? -4.0f : x;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

// Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by polynomial. ~1 ulp.
[[gnu::always_inline]] inline float log_f32(float a) {
  // subnormals are scaled by 2^23 into the normal range; the exponent of the scale
  // is subtracted again (one select: two on the same condition stop vectorisation)
  const float scale = a < 1.17549435e-38f ? 8388608.0f : 1.0f;
  const int32_t bits = std::bit_cast<int32_t>(a * scale);
  float e = float(((bits >> 23) & 0xff) - 126 - ((std::bit_cast<int32_t>(scale) >> 23) - 127));
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  e = m < 0.707106781186547524f ? e - 1.0f : e;
  m = m < 0.707106781186547524f ? m + m : m;
  const float f = m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f + -1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f + -1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f + -1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f + -2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p + e * -2.12194440e-4f - 0.5f * z;
  y = f + y + e * 0.693359375f;
  y = a < std::numeric_limits<float>::infinity() ? y : a;  // +inf (and NaN) pass through
  const float special = a == 0.0f ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  return a > 0.0f ? y : special;  // log(0) = -inf; negative or NaN -> NaN
}

/// exp / tanh / erf / log for kernels: the fast forms for f32, libm for f64 (gradcheck precision).
template <class T>
[[gnu::always_inline]] inline T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return std::exp(x);
}
template <class T>
[[gnu::always_inline]] inline T vtanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_f32(x);
  else return std::tanh(x);
}
template <class T>
[[gnu::always_inline]] inline T vlog(T x) {
  if constexpr (std::is_same_v<T, float>) return log_f32(x);
  else return std::log(x);
}
template <class T>
[[gnu::always_inline]] inline T verf(T x) {
  if constexpr (std::is_same_v<T, float>) return erf_f32(x);
  else return std::erf(x);
}

// GELU. The tanh form 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), is computed
// as x * sigmoid(2u) = x / (1 + exp(-2u)): the same function, without the cancellation of
// 1 + tanh u for x << 0 (there the tanh form loses every digit below x ~ -5; this keeps
// ~1e-7 relative, ~1e-5 at x ~ -9 where the f32 rounding of u itself is amplified by
// exp). One exp and one division, as Sleef's tanhf costs PyTorch. The derivative
// s + x s (1 - s) du/dx, s = sigmoid(2u), du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
inline constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCubic = 0.044715;
inline constexpr double kGeluSqrt1_2 = 0.70710678118654752440;
inline constexpr double kGeluInvSqrt2Pi = 0.39894228040143267794;

namespace detail {
// exp(z) for the sigmoid: z clamped to [-87, 89] (exp_f32's polynomial without its
// special cases; NaN maps to 0, the caller's x carries it). Above ~88.4 it returns inf
// (2^128), so x / (1 + e) is exactly -0 for x << 0, as the tanh form gives.
[[gnu::always_inline]] inline float exp_clamped_f32(float z) {
  z = z < -87.0f ? -87.0f : z;
  z = z > 89.0f ? 89.0f : z;
  z = z == z ? z : 0.0f;
  const float n = (z * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = z - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const float p = detail::exp_poly_f32(r);
  return p * std::bit_cast<float>((int32_t(n) + 127) << 23);  // n in [-126, 128]; 128: inf
}
template <class T>
[[gnu::always_inline]] inline T gelu_exp(T z) {
  if constexpr (std::is_same_v<T, float>) return exp_clamped_f32(z);
  else return std::exp(z);
}
}  // namespace detail

/// gelu(x), tanh approximation (GPT-2's): x * sigmoid(2u).
template <class T>
[[gnu::always_inline]] inline T gelu_tanh_of(T x) {
  const T z = T(-2 * kGeluSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);  // -2u
  return x / (T(1) + detail::gelu_exp(z));
}
/// d gelu_tanh / dx. x is clamped to +-30, beyond which the derivative is exactly 1 or 0
/// (without it, x s (1 - s) du would be 0 * inf for |x| > 1e19).
template <class T>
[[gnu::always_inline]] inline T gelu_tanh_grad_of(T x) {
  x = x > T(30) ? T(30) : x;
  x = x < T(-30) ? T(-30) : x;
  const T x2 = x * x;
  const T z = T(-2 * kGeluSqrt2OverPi) * (x + T(kGeluCubic) * x2 * x);
  const T s = T(1) / (T(1) + detail::gelu_exp(z));
  const T du2 = T(2 * kGeluSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x2);  // 2 du/dx
  return s + x * s * (T(1) - s) * du2;
}
/// gelu(x) = x Phi(x), exact (erf).
template <class T>
[[gnu::always_inline]] inline T gelu_erf_of(T x) {
  return T(0.5) * x * (T(1) + verf(x * T(kGeluSqrt1_2)));
}
/// d gelu_erf / dx = Phi(x) + x phi(x).
template <class T>
[[gnu::always_inline]] inline T gelu_erf_grad_of(T x) {
  const T cdf = T(0.5) * (T(1) + verf(x * T(kGeluSqrt1_2)));
  const T pdf = T(kGeluInvSqrt2Pi) * vexp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

/// Which activation derivative act_grad_kernel applies: out = grad * f'(x or y).
enum class ActGrad { gelu, gelu_tanh, relu, tanh, sigmoid };

void binary_kernel(ops::BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b);
void binary_scalar_kernel(ops::BinaryOp op, Tensor& out, const Tensor& a, double s, bool scalar_first);
/// out is u8.
void compare_kernel(ops::CompareOp op, Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar_kernel(ops::CompareOp op, Tensor& out, const Tensor& a, double s);
void unary_kernel(ops::UnaryOp op, Tensor& out, const Tensor& a);
void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void masked_fill_kernel(Tensor& out, const Tensor& t, const Tensor& mask, double value);
/// x is the forward input for gelu, the forward output for relu/tanh/sigmoid.
void act_grad_kernel(ActGrad kind, Tensor& out, const Tensor& grad, const Tensor& x);
/// dst += alpha * src (src broadcast to dst).
void add_kernel(Tensor& dst, const Tensor& src, double alpha);
/// t *= s.
void scale_kernel(Tensor& t, double s);

}  // namespace strata::cpu

