// f64 references of the tanh-form GELU and its derivative, shared by the GELU tests:
// gelu_tanh(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
#pragma once
#include <cmath>

namespace strata::testing {

constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2/pi)

inline double gelu_z(double x) { return -2 * kGeluK * (x + 0.044715 * x * x * x); }
inline double gelu_tanh_ref(double x) { return x / (1 + std::exp(gelu_z(x))); }
inline double gelu_tanh_grad_ref(double x) {
  const double s = 1 / (1 + std::exp(gelu_z(x)));
  return s + x * s * (1 - s) * 2 * kGeluK * (1 + 3 * 0.044715 * x * x);
}

}  // namespace strata::testing
