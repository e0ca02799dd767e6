// Small helpers shared by the nn tests: random inputs and element-wise comparison (and,
// through tests/graph_has.h, whether an autograd graph holds a node).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <strata/tensor/ops.h>
#include "tests/graph_has.h"

namespace strata::testing {

inline Tensor randn(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Generator g(seed);
  return ops::normal(s, 0.0, 1.0, g, dt);
}

inline void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol,
                         const char* what = "") {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1.0 + std::abs(b[i]))) << what << " element " << i;
}

inline void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what = "") {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  expect_close(a.to_vector<float>(), b.to_vector<float>(), tol, what);
}

}  // namespace strata::testing
