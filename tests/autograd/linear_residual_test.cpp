// residual + linear(x, w, b) as one fused autograd node (linear_residual): the
// bias and the residual added in one pass after a bias-free GEMM. Finite-difference
// gradients in f64 (every input, with and without bias), and the same values and
// gradients as the unfused add(residual, linear()) in f32 at 1 and 2 threads.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::leaf64;

}  // namespace

TEST(LinearResidual, GradcheckF64) {
  for (bool bias : {true, false}) {
    Tensor x = leaf64({2, 3, 4}, 1), w = leaf64({5, 4}, 2, -1, 1), r = leaf64({2, 3, 5}, 4);
    Tensor b = bias ? leaf64({5}, 3) : Tensor();
    std::vector<Tensor> in{x, w, r};
    if (bias) in.push_back(b);
    const auto res = gradcheck(
        [bias](const std::vector<Tensor>& t) { return linear_residual(t[0], t[1], bias ? t[3] : Tensor(), t[2]); },
        in);
    EXPECT_TRUE(res.ok) << "bias=" << bias << ": " << res.message;
  }
}

TEST(LinearResidual, MatchesResidualPlusLinearInF32) {
  for (int threads : {1, 2}) {
    strata::testing::ThreadsGuard tg(threads);
    Generator g(7);
    Tensor x0 = ops::uniform({3, 100, 96}, -2, 2, g), w0 = ops::uniform({40, 96}, -0.5, 0.5, g);
    Tensor b0 = ops::uniform({40}, -1, 1, g), r0 = ops::uniform({3, 100, 40}, -3, 3, g);
    Tensor gy = ops::uniform({3, 100, 40}, -1, 1, g);
    auto run = [&](bool fused) {
      Tensor x = ops::clone(x0), w = ops::clone(w0), b = ops::clone(b0), r = ops::clone(r0);
      for (Tensor* t : {&x, &w, &b, &r}) t->set_requires_grad(true);
      // r also feeds another op, as the residual stream feeds the next LayerNorm: its
      // gradient is the sum of both paths
      Tensor y = fused ? linear_residual(x, w, b, r) : add(r, linear(x, w, b));
      backward(sum(add(mul(y, gy), mul(r, r))));
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad(), r.grad()};
    };
    const auto f = run(true), u = run(false);
    EXPECT_EQ(f[0].shape(), (Shape{3, 100, 40}));
    const char* names[] = {"y", "dx", "dw", "db", "dr"};
    for (size_t k = 0; k < 5; ++k) {
      const auto a = f[k].to_vector<double>(), c = u[k].to_vector<double>();
      ASSERT_EQ(a.size(), c.size()) << names[k];
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], c[i], 2e-6 * (1 + std::abs(c[i]))) << names[k] << "[" << i << "] threads " << threads;
    }
  }
}

TEST(LinearResidual, FallsBackOnShapeMismatchAndChecksItsInputs) {
  Generator g(1);
  Tensor x = ops::uniform({4, 6}, -1, 1, g), w = ops::uniform({3, 6}, -1, 1, g), b = ops::uniform({3}, -1, 1, g);
  // a broadcast residual (3) takes the unfused path, with add's broadcasting
  Tensor r = ops::uniform({3}, -1, 1, g);
  const auto y = linear_residual(x, w, b, r).to_vector<float>();
  const auto ref = add(add(matmul(x, ops::transpose(w, 0, 1)), b), r).to_vector<float>();
  ASSERT_EQ(y.size(), ref.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-6);
  Tensor y2 = ops::zeros({4, 3});
  EXPECT_THROW(ops::bias_residual_(y2, ops::zeros({4}), ops::zeros({4, 3})), Error);  // bias width
  EXPECT_THROW(ops::bias_residual_(y2, b, ops::zeros({4, 2})), Error);                 // residual shape
  Tensor yt = ops::transpose(ops::zeros({3, 4}), 0, 1);
  EXPECT_THROW(ops::bias_residual_(yt, b, ops::zeros({4, 3})), Error);  // y written in place: contiguous
}
