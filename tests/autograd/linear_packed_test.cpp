// Bias-free linears over one input packed side by side (linear_packed, the Llama's q|k|v
// projections): each GEMM writes its block of columns of one output, and backward
// accumulates dx in the GEMMs. Finite-difference gradients in f64, and the same values and
// gradients as cat of the separate linears in f32 at 1 and 2 threads, with one weight
// frozen (no gradient) and the input used again downstream.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

TEST(LinearPacked, GradcheckF64) {
  using strata::testing::leaf64;
  Tensor x = leaf64({2, 3, 4}, 1), a = leaf64({5, 4}, 2, -1, 1), b = leaf64({2, 4}, 3, -1, 1), c = leaf64({3, 4}, 4);
  const auto res =
      gradcheck([](const std::vector<Tensor>& t) { return linear_packed(t[0], {t[1], t[2], t[3]}); }, {x, a, b, c});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(LinearPacked, MatchesCatOfLinearsInF32) {
  for (int threads : {1, 2}) {
    strata::testing::ThreadsGuard tg(threads);
    Generator g(11);
    const Tensor x0 = ops::uniform({3, 50, 64}, -2, 2, g), gy = ops::uniform({3, 50, 128}, -1, 1, g);
    const Tensor w0[] = {ops::uniform({64, 64}, -0.5, 0.5, g), ops::uniform({32, 64}, -0.5, 0.5, g),
                         ops::uniform({32, 64}, -0.5, 0.5, g)};
    auto run = [&](bool packed) {
      Tensor x = ops::clone(x0);
      x.set_requires_grad(true);
      std::vector<Tensor> ws;
      for (int i = 0; i < 3; ++i) {
        ws.push_back(ops::clone(w0[i]));
        ws.back().set_requires_grad(i != 1);  // a frozen weight gets no gradient
      }
      const Tensor y = packed ? linear_packed(x, ws)
                              : cat({linear(x, ws[0], Tensor()), linear(x, ws[1], Tensor()), linear(x, ws[2], Tensor())}, -1);
      backward(add(sum(mul(y, gy)), sum(mul(x, x))));  // x also feeds another op
      EXPECT_FALSE(ws[1].grad().defined());
      return std::vector<Tensor>{y.detach(), x.grad(), ws[0].grad(), ws[2].grad()};
    };
    const auto p = run(true), u = run(false);
    EXPECT_EQ(p[0].shape(), (Shape{3, 50, 128}));
    const char* names[] = {"y", "dx", "dw0", "dw2"};
    for (size_t k = 0; k < p.size(); ++k) {
      const auto a = p[k].to_vector<double>(), c = u[k].to_vector<double>();
      ASSERT_EQ(a.size(), c.size()) << names[k];
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], c[i], 2e-6 * (1 + std::abs(c[i]))) << names[k] << "[" << i << "] threads " << threads;
    }
  }
}
