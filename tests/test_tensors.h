// Small tensor factories shared by the unit tests of several layers.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/ops.h"

namespace strata::testing {

/// Normal(0, scale^2) values of dtype dt drawn from its own generator seeded with `seed`.
inline Tensor rnd(const Shape& s, DType dt, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return ops::normal(s, 0, scale, g, dt);
}

/// An f32 leaf that requires grad, holding `v` (row-major) in shape `s`.
inline Tensor leaf(const std::vector<float>& v, const Shape& s) {
  Tensor t = ops::from_vector<float>(v, s);
  t.set_requires_grad(true);
  return t;
}

}  // namespace strata::testing
