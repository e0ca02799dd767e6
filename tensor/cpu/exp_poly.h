// The polynomial core shared by the CPU kernels' vectorisable float exps (vexp in
// softmax.h, exp_f32 and the sigmoid's exp in elementwise.h): each reduces x to
// n ln2 + r and scales this polynomial by 2^n in its own way.
#pragma once

namespace strata::cpu::detail {

/// exp(r) for r in [-ln2/2, ln2/2]: Cephes' degree-6 polynomial, ~1 ulp.
[[gnu::always_inline]] inline float exp_poly_f32(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

}  // namespace strata::cpu::detail
