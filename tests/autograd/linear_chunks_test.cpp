// The CPU linears in row chunks (tensor/row_chunks.h: chunks of about 512 KiB; the
// backward's weight gradient summed over them, autograd/fn_linalg.cpp; linear_gelu's
// forward, ops::linear_bias_gelu; linear_swiglu both ways, ops::linear_swiglu): at sizes
// that take several chunks, linear_gelu's and linear_swiglu's outputs are the unfused ops'
// within rounding, and linear, linear_gelu, linear_residual, linear_packed and
// linear_swiglu give the gradients of the f64 computation within f32 rounding; a
// deferred weight gradient (zero-bubble pipelines) equals the plain one bit for bit; and
// with the saved rows handed over and written over, every gradient equals that of a
// retained graph bit for bit. On one thread (with more, each call is one chunk).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/tensor/ops.h>
#include "tests/threads_guard.h"

using namespace strata;

namespace {

// 3 x 371 = 1113 rows of 512 outputs: five f32 chunks (224 rows, the last 217), nine f64
// chunks (128 rows, the last 89); 24 inputs. linear_swiglu's chunks hold its gate and up
// rows together: nine f32 chunks, eighteen f64 ones.
constexpr int64_t kB = 3, kT = 371, kIn = 24, kOut = 512;
const char* kKinds[] = {"linear", "linear_gelu", "linear_residual", "linear_packed", "linear_swiglu"};
constexpr int kKindCount = 5;

struct Leaves {
  Tensor x, w, w2, w3, b, r;
};

Leaves leaves(DType dt) {
  Generator g(11);
  auto leaf = [&](const Shape& s, double lo, double hi) {
    Tensor t = ops::to_dtype(ops::uniform(s, lo, hi, g, DType::f64), dt);
    t.set_requires_grad(true);
    return t;
  };
  Leaves l;
  l.x = leaf({kB, kT, kIn}, -2, 2);
  l.w = leaf({kOut, kIn}, -0.5, 0.5);
  l.w2 = leaf({kOut / 4, kIn}, -0.5, 0.5);  // linear_packed's second weight: 512 + 128 outputs
  l.w3 = leaf({kOut, kIn}, -0.5, 0.5);  // linear_swiglu's up projection (w is its gate)
  l.b = leaf({kOut}, -1, 1);
  l.r = leaf({kB, kT, kOut}, -1, 1);
  return l;
}

// sum(y * c) for a fixed c: the gradient depends on the rows and columns.
Tensor loss_of(int kind, const Leaves& l) {
  Tensor y;
  switch (kind) {
    case 0: y = linear(l.x, l.w, l.b); break;
    case 1: y = linear_gelu(l.x, l.w, l.b, /*tanh_approx=*/true); break;
    case 2: y = linear_residual(l.x, l.w, l.b, l.r); break;
    case 3: y = linear_packed(l.x, {l.w, l.w2}); break;
    default: y = linear_swiglu(l.x, l.w, l.w3); break;
  }
  Generator g(5);
  const Tensor c = ops::to_dtype(ops::uniform(y.shape(), -1, 1, g, DType::f64), y.dtype());
  return sum(mul(y, c));
}

std::vector<Tensor> grads(const Leaves& l, int kind) {
  std::vector<Tensor> out{l.x.grad(), l.w.grad()};
  if (kind == 3) out.push_back(l.w2.grad());
  else if (kind == 4) out.push_back(l.w3.grad());
  else out.push_back(l.b.grad());
  if (kind == 2) out.push_back(l.r.grad());
  return out;
}

std::vector<double> values(const Tensor& t) { return t.defined() ? t.to_vector<double>() : std::vector<double>{}; }

}  // namespace

TEST(LinearChunks, GradientsMatchFloat64AcrossSeveralChunks) {
  const strata::testing::ThreadsGuard one(1);
  for (int kind = 0; kind < kKindCount; ++kind) {
    SCOPED_TRACE(kKinds[kind]);
    const Leaves a = leaves(DType::f32), d = leaves(DType::f64);
    backward(loss_of(kind, a));
    backward(loss_of(kind, d));
    const auto ga = grads(a, kind), gd = grads(d, kind);
    for (size_t i = 0; i < ga.size(); ++i) {
      ASSERT_TRUE(ga[i].defined() && gd[i].defined()) << i;
      const auto x = values(ga[i]), y = values(gd[i]);
      double peak = 0, err = 0;
      for (size_t k = 0; k < y.size(); ++k) {
        peak = std::max(peak, std::abs(y[k]));
        err = std::max(err, std::abs(x[k] - y[k]));
      }
      EXPECT_LE(err, 2e-5 * peak) << "gradient " << i << ": max error " << err << " of " << peak;
    }
  }
}

TEST(LinearChunks, FusedGeluForwardMatchesTheUnfusedOps) {
  const strata::testing::ThreadsGuard one(1);
  const Leaves a = leaves(DType::f32), d = leaves(DType::f64);
  const auto fused = values(linear_gelu(a.x, a.w, a.b, true)), plain = values(gelu(linear(a.x, a.w, a.b), true));
  const auto exact = values(linear_gelu(d.x, d.w, d.b, true));
  ASSERT_EQ(fused.size(), size_t(kB * kT * kOut));
  for (size_t k = 0; k < fused.size(); ++k) {
    ASSERT_NEAR(fused[k], plain[k], 1e-6 * (1 + std::abs(plain[k]))) << k;
    ASSERT_NEAR(fused[k], exact[k], 1e-5 * (1 + std::abs(exact[k]))) << k;
  }
}

TEST(LinearChunks, FusedSwigluForwardMatchesTheUnfusedOps) {
  const strata::testing::ThreadsGuard one(1);
  const Leaves a = leaves(DType::f32), d = leaves(DType::f64);
  const Tensor none;
  const auto fused = values(linear_swiglu(a.x, a.w, a.w3));
  const auto plain = values(swiglu(linear(a.x, a.w, none), linear(a.x, a.w3, none)));
  const auto exact = values(linear_swiglu(d.x, d.w, d.w3));
  ASSERT_EQ(fused.size(), size_t(kB * kT * kOut));
  for (size_t k = 0; k < fused.size(); ++k) {
    ASSERT_NEAR(fused[k], plain[k], 1e-6 * (1 + std::abs(plain[k]))) << k;
    ASSERT_NEAR(fused[k], exact[k], 1e-5 * (1 + std::abs(exact[k]))) << k;
  }
}

TEST(LinearChunks, DeferredWeightGradientEqualsThePlainOneBitForBit) {
  const strata::testing::ThreadsGuard one(1);
  for (int kind = 0; kind < kKindCount; ++kind) {
    SCOPED_TRACE(kKinds[kind]);
    const Leaves a = leaves(DType::f32);
    backward(loss_of(kind, a));
    const Leaves b = leaves(DType::f32);
    DeferredGrads work;
    {
      DeferWeightGrads scope(work);
      backward(loss_of(kind, b));
    }
    EXPECT_EQ(work.size(), kind >= 3 ? 2u : 1u);
    EXPECT_FALSE(b.w.grad().defined());
    run_deferred(work);
    const auto ga = grads(a, kind), gb = grads(b, kind);
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_EQ(values(gb[i]), values(ga[i])) << "gradient " << i;
  }
}

TEST(LinearChunks, WrittenOverSavedRowsGiveTheRetainedGraphsGradientsBitForBit) {
  const strata::testing::ThreadsGuard one(1);
  for (int kind = 0; kind < kKindCount; ++kind) {
    SCOPED_TRACE(kKinds[kind]);
    // x comes out of an op, so the linear's saved input rows are its own to hand over
    const Leaves a = leaves(DType::f32), b = leaves(DType::f32);
    auto run = [&](const Leaves& l, bool retain) {
      Leaves m = l;
      m.x = mul(l.x, 1.5);
      backward(loss_of(kind, m), Tensor(), retain);
    };
    run(a, true);
    run(b, false);
    const auto ga = grads(a, kind), gb = grads(b, kind);
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_EQ(values(gb[i]), values(ga[i])) << "gradient " << i;
  }
}
