// GELU accuracy against the f64 formula (f32 kernels, wide range incl. the tails), and the
// fused linear + bias + GELU function: finite-difference gradients in f64, and
// the same values and gradients as linear then gelu in f32 at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/core/threads.h>
#include <strata/tensor/ops.h>
#include "tests/gelu_reference.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::gelu_tanh_grad_ref;
using strata::testing::gelu_tanh_ref;

using strata::testing::ThreadsGuard;

using strata::testing::leaf64;

}  // namespace

TEST(GeluAccuracy, TanhFormF32AgainstF64OverAWideRange) {
  std::vector<float> xs;
  for (float x = -14.0f; x <= 14.0f; x += 0.000377f) xs.push_back(x);
  for (float x : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e6f, -1e6f, 1e20f,
                  -1e20f, 3e38f, -3e38f})
    xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  Tensor x = ops::from_vector<float>(xs, {n});
  const auto y = ops::unary(ops::UnaryOp::gelu_tanh, x).to_vector<double>();
  const auto dy = ops::gelu_backward(ops::full({n}, 1.0), x, true).to_vector<double>();
  double worst_y = 0, worst_dy = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[size_t(i)], z = std::min(std::abs(strata::testing::gelu_z(v)), 100.0);
    const double ry = gelu_tanh_ref(v), rdy = gelu_tanh_grad_ref(v);
    // relative to the value, widened by |z|: the f32 rounding of u is amplified by exp(z)
    // in the tails (at x ~ -9, |z| ~ 70, the f32 argument alone costs ~4e-6)
    const double tol_y = 3e-7 * (1 + z) * std::abs(ry) + 1e-37;
    const double tol_dy = 3e-7 * (1 + z) * std::abs(rdy) + 1e-7;
    ASSERT_NEAR(y[size_t(i)], ry, tol_y) << "gelu_tanh(" << v << ")";
    ASSERT_NEAR(dy[size_t(i)], rdy, tol_dy) << "gelu_tanh'(" << v << ")";
    if (std::abs(ry) > 1e-30) worst_y = std::max(worst_y, std::abs(y[size_t(i)] - ry) / std::abs(ry) / (1 + z));
    worst_dy = std::max(worst_dy, std::abs(dy[size_t(i)] - rdy) / (std::abs(rdy) + 1e-7) / (1 + z));
  }
  // the negative tail keeps its digits (0.5 x (1 + tanh u) had none left below x ~ -5)
  const auto tail = ops::unary(ops::UnaryOp::gelu_tanh, ops::from_vector<float>({-6.0f, -8.0f}, {2})).to_vector<double>();
  EXPECT_NEAR(tail[0], gelu_tanh_ref(-6.0), 1e-6 * std::abs(gelu_tanh_ref(-6.0)));
  EXPECT_NEAR(tail[1], gelu_tanh_ref(-8.0), 1e-5 * std::abs(gelu_tanh_ref(-8.0)));
  EXPECT_LT(tail[1], 0.0);
  // saturated ends are exact; NaN propagates
  const float inf = std::numeric_limits<float>::infinity();
  const auto e = ops::unary(ops::UnaryOp::gelu_tanh, ops::from_vector<float>({1e20f, -1e20f, inf, NAN}, {4}))
                     .to_vector<float>();
  EXPECT_EQ(e[0], 1e20f);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_EQ(e[2], inf);
  EXPECT_TRUE(std::isnan(e[3]));
  const auto de = ops::gelu_backward(ops::full({3}, 1.0), ops::from_vector<float>({1e20f, -1e20f, 0.0f}, {3}), true)
                      .to_vector<float>();
  EXPECT_EQ(de[0], 1.0f);
  EXPECT_EQ(de[1], 0.0f);
  EXPECT_EQ(de[2], 0.5f);
  RecordProperty("worst_rel_fwd_per_1pz", std::to_string(worst_y));
  RecordProperty("worst_rel_bwd_per_1pz", std::to_string(worst_dy));
}

TEST(GeluAccuracy, F64KernelsMatchTheFormula) {
  std::vector<double> xs;
  for (double x = -30; x <= 30; x += 0.0137) xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  Tensor x = ops::from_vector<double>(xs, {n});
  const auto y = ops::unary(ops::UnaryOp::gelu_tanh, x).to_vector<double>();
  const auto dy = ops::gelu_backward(ops::full({n}, 1.0, DType::f64), x, true).to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[size_t(i)];
    ASSERT_NEAR(y[size_t(i)], gelu_tanh_ref(v), 1e-14 * (1 + std::abs(v))) << v;
    // the tanh form agrees away from the tail
    if (v > -5) {
      const double u = strata::testing::kGeluK * (v + 0.044715 * v * v * v);
      ASSERT_NEAR(y[size_t(i)], 0.5 * v * (1 + std::tanh(u)), 1e-13) << v;
    }
    ASSERT_NEAR(dy[size_t(i)], gelu_tanh_grad_ref(v), 1e-13) << v;
  }
}

TEST(LinearGelu, GradcheckF64) {
  for (bool tanh_approx : {true, false}) {
    for (bool bias : {true, false}) {
      Tensor x = leaf64({2, 3, 4}, 1), w = leaf64({5, 4}, 2, -1, 1);
      Tensor b = bias ? leaf64({5}, 3) : Tensor();
      std::vector<Tensor> in{x, w};
      if (bias) in.push_back(b);
      const auto r = gradcheck(
          [tanh_approx, bias](const std::vector<Tensor>& t) {
            return linear_gelu(t[0], t[1], bias ? t[2] : Tensor(), tanh_approx);
          },
          in);
      EXPECT_TRUE(r.ok) << "tanh=" << tanh_approx << " bias=" << bias << ": " << r.message;
    }
  }
}

TEST(LinearGelu, MatchesLinearThenGeluInF32) {
  for (int threads : {1, 2}) {
    ThreadsGuard tg(threads);
    for (bool tanh_approx : {true, false}) {
      Generator g(7);
      // 300 rows: more than one row block of the bias-gradient partials, not a multiple
      Tensor x0 = ops::uniform({3, 100, 24}, -2, 2, g), w0 = ops::uniform({40, 24}, -0.5, 0.5, g);
      Tensor b0 = ops::uniform({40}, -1, 1, g), gy = ops::uniform({3, 100, 40}, -1, 1, g);
      auto run = [&](bool fused) {
        Tensor x = ops::clone(x0), w = ops::clone(w0), b = ops::clone(b0);
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        Tensor y = fused ? linear_gelu(x, w, b, tanh_approx) : gelu(linear(x, w, b), tanh_approx);
        backward(sum(mul(y, gy)));
        return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
      };
      const auto f = run(true), u = run(false);
      EXPECT_EQ(f[0].shape(), (Shape{3, 100, 40}));
      // forward: the same float operations (GEMM, then + b, then gelu): equal
      EXPECT_EQ(f[0].to_vector<float>(), u[0].to_vector<float>()) << "threads " << threads;
      const char* names[] = {"y", "dx", "dw", "db"};
      for (size_t k = 1; k < 4; ++k) {
        const auto a = f[k].to_vector<double>(), c = u[k].to_vector<double>();
        ASSERT_EQ(a.size(), c.size());
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(a[i], c[i], 2e-5 * (1 + std::abs(c[i]))) << names[k] << "[" << i << "] threads " << threads;
      }
    }
  }
}
