// Small tensor factories shared by the unit tests of several layers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <strata/tensor/ops.h>

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

/// An f64 leaf that requires grad, uniform in [lo, hi) from a generator seeded with `seed`
/// (gradcheck inputs).
inline Tensor leaf64(const Shape& s, uint64_t seed, double lo = -2, double hi = 2) {
  Generator g(seed);
  Tensor t = ops::uniform(s, lo, hi, g, DType::f64);
  t.set_requires_grad(true);
  return t;
}

/// (shape s) i64 token ids uniform in [0, vocab), from a generator seeded with `seed`.
inline Tensor random_tokens(const Shape& s, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  auto u = ops::uniform(s, 0.0, double(vocab), g, DType::f64).to_vector<double>();
  std::vector<int64_t> ids;
  for (double v : u) ids.push_back(std::min<int64_t>(int64_t(v), vocab - 1));
  return ops::from_vector<int64_t>(ids, s);
}

}  // namespace strata::testing
