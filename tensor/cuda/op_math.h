// The per-element formulas of the elementwise ops (tensor/ops.h BinaryOp, CompareOp,
// UnaryOp and the activation gradients), written once for CUDA kernels and host tests.
// They follow tensor/cpu/elementwise.cpp's definitions; transcendental functions are
// the libm / CUDA math library ones (the CPU uses vectorised approximations within a
// few ulp). The op is a runtime argument: one kernel per dtype, uniform branch per call.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <strata/tensor/cuda/hd.h>
#include <strata/tensor/ops.h>

namespace strata::cuda {

/// Activation derivative kinds, in the order of cpu::ActGrad (gelu, gelu_tanh, relu, tanh, sigmoid).
enum class ActKind : int { gelu = 0, gelu_tanh = 1, relu = 2, tanh = 3, sigmoid = 4 };

namespace math {
STRATA_HD float exp_(float x) { return ::expf(x); }
STRATA_HD double exp_(double x) { return ::exp(x); }
STRATA_HD float log_(float x) { return ::logf(x); }
STRATA_HD double log_(double x) { return ::log(x); }
STRATA_HD float sqrt_(float x) { return ::sqrtf(x); }
STRATA_HD double sqrt_(double x) { return ::sqrt(x); }
STRATA_HD float tanh_(float x) { return ::tanhf(x); }
STRATA_HD double tanh_(double x) { return ::tanh(x); }
STRATA_HD float erf_(float x) { return ::erff(x); }
STRATA_HD double erf_(double x) { return ::erf(x); }
STRATA_HD float pow_(float x, float y) { return ::powf(x, y); }
STRATA_HD double pow_(double x, double y) { return ::pow(x, y); }
STRATA_HD float abs_(float x) { return ::fabsf(x); }
STRATA_HD double abs_(double x) { return ::fabs(x); }

template <class T>
STRATA_HD bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}
}  // namespace math

inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluC = 0.044715;

/// a (op) b. div and pow are for floating T only (callers reject integer dtypes).
template <class T>
STRATA_HD T apply_binary(ops::BinaryOp op, T x, T y) {
  switch (op) {
    case ops::BinaryOp::add: return T(x + y);
    case ops::BinaryOp::sub: return T(x - y);
    case ops::BinaryOp::mul: return T(x * y);
    case ops::BinaryOp::div:
      if constexpr (std::is_floating_point_v<T>) return x / y;
      else return T(0);
    case ops::BinaryOp::pow:
      if constexpr (std::is_floating_point_v<T>) return math::pow_(x, y);
      else return T(0);
    case ops::BinaryOp::maximum:
      if constexpr (std::is_floating_point_v<T>) return (x != x || x > y) ? x : y;  // NaN wins
      else return x > y ? x : y;
    case ops::BinaryOp::minimum:
      if constexpr (std::is_floating_point_v<T>) return (x != x || x < y) ? x : y;
      else return x < y ? x : y;
  }
  return T(0);
}

template <class T>
STRATA_HD uint8_t apply_compare(ops::CompareOp op, T x, T y) {
  switch (op) {
    case ops::CompareOp::eq: return uint8_t(x == y);
    case ops::CompareOp::ne: return uint8_t(x != y);
    case ops::CompareOp::lt: return uint8_t(x < y);
    case ops::CompareOp::le: return uint8_t(x <= y);
    case ops::CompareOp::gt: return uint8_t(x > y);
    case ops::CompareOp::ge: return uint8_t(x >= y);
  }
  return 0;
}

/// Floating T only.
template <class T>
STRATA_HD T apply_unary(ops::UnaryOp op, T x) {
  using ops::UnaryOp;
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return math::exp_(x);
    case UnaryOp::log: return math::log_(x);
    case UnaryOp::sqrt: return math::sqrt_(x);
    case UnaryOp::rsqrt: return T(1) / math::sqrt_(x);
    case UnaryOp::abs: return math::abs_(x);
    case UnaryOp::relu: return x > T(0) ? x : T(0);
    case UnaryOp::gelu: return T(0.5) * x * (T(1) + math::erf_(x * T(kSqrt1_2)));
    case UnaryOp::gelu_tanh: return T(0.5) * x * (T(1) + math::tanh_(T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x)));
    case UnaryOp::tanh: return math::tanh_(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + math::exp_(-x));
    case UnaryOp::sign: return T((x > T(0)) - (x < T(0)));
    case UnaryOp::square: return x * x;
    case UnaryOp::reciprocal: return T(1) / x;
  }
  return x;
}

/// grad * f'(x): x is the forward input for gelu, the forward output y for relu/tanh/sigmoid.
template <class T>
STRATA_HD T apply_act_grad(ActKind kind, T dy, T x) {
  switch (kind) {
    case ActKind::gelu: {
      const T cdf = T(0.5) * (T(1) + math::erf_(x * T(kSqrt1_2)));
      const T pdf = T(kInvSqrt2Pi) * math::exp_(T(-0.5) * x * x);
      return dy * (cdf + x * pdf);
    }
    case ActKind::gelu_tanh: {
      const T x2 = x * x;
      const T t = math::tanh_(T(kSqrt2OverPi) * (x + T(kGeluC) * x2 * x));
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * x2);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    }
    case ActKind::relu: return x > T(0) ? dy : T(0);
    case ActKind::tanh: return dy * (T(1) - x * x);
    case ActKind::sigmoid: return dy * x * (T(1) - x);
  }
  return dy;
}

/// a (op) s or s (op) a for binary_scalar, with the CPU kernel's special cases:
/// x^2 as x*x and x / s as x * (1/s) for floating T.
template <class T>
struct ScalarOp {
  ops::BinaryOp op;
  T s;
  T inv;  // T(1.0 / s) for the division fast path
  int mode;  // 0: f(x, s)  1: f(s, x)  2: x * x  3: x * inv
  STRATA_HD T operator()(T x) const {
    switch (mode) {
      case 1: return apply_binary(op, s, x);
      case 2: return T(x * x);
      case 3: return T(x * inv);
      default: return apply_binary(op, x, s);
    }
  }
};

template <class T>
ScalarOp<T> make_scalar_op(ops::BinaryOp op, double s, bool scalar_first) {
  ScalarOp<T> f{op, static_cast<T>(s), T(0), scalar_first ? 1 : 0};
  if constexpr (std::is_floating_point_v<T>) {
    if (!scalar_first && op == ops::BinaryOp::pow && s == 2.0) f.mode = 2;
    if (!scalar_first && op == ops::BinaryOp::div) {
      f.mode = 3;
      f.inv = T(1.0 / s);
    }
  }
  return f;
}

/// compare_scalar: floating x against T(s); integer x as double against s exactly.
template <class T>
STRATA_HD uint8_t apply_compare_scalar(ops::CompareOp op, T x, double s) {
  if constexpr (std::is_floating_point_v<T>) return apply_compare(op, x, T(s));
  else return apply_compare(op, double(x), s);
}

}  // namespace strata::cuda
