// (s, z) = (residual + linear(x, w, b), layer_norm(s)) as linear_residual_layer_norm: with
// the fusion on, one forward pass after a bias-free GEMM and a LayerNorm backward that adds
// the gradient s received from its other consumers in its own pass (node
// "LayerNormAddBackward", taking the engine's pending gradient). Finite-difference
// gradients in f64 with s and z both used; the fused and the separate ops give the same
// values and gradients bit for bit in f32 and f64 at 1 and 2 threads; the default policy
// (automatic) leaves CPU tensors on the separate ops.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/autograd/node.h>
#include <strata/tensor/ops.h>
#include "tests/graph_has.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::leaf64;

struct FusionGuard {
  ResidualNormFusion saved = residual_norm_fusion();
  explicit FusionGuard(ResidualNormFusion f) { set_residual_norm_fusion(f); }
  ~FusionGuard() { set_residual_norm_fusion(saved); }
};

using strata::testing::graph_has;

}  // namespace

TEST(LinearResidualLayerNorm, GradcheckF64) {
  FusionGuard fg(ResidualNormFusion::always);
  for (int variant = 0; variant < 3; ++variant) {
    // 0: every bias; 1: no linear bias; 2: no LayerNorm weight nor bias
    Tensor x = leaf64({2, 3, 4}, 1), w = leaf64({5, 4}, 2, -1, 1), r = leaf64({2, 3, 5}, 4);
    Tensor b = variant == 1 ? Tensor() : leaf64({5}, 3);
    Tensor lw = variant == 2 ? Tensor() : leaf64({5}, 5, 0.5, 1.5), lb = variant == 2 ? Tensor() : leaf64({5}, 6);
    Generator gc(9);
    const Tensor c = ops::to_dtype(ops::uniform({2, 3, 5}, -1, 1, gc), DType::f64);
    int fused_graphs = 0;
    std::vector<Tensor> in{x, w, r};
    for (const Tensor& t : {b, lw, lb})
      if (t.defined()) in.push_back(t);
    const auto res = gradcheck(
        [&](const std::vector<Tensor>& t) {
          size_t k = 3;
          const Tensor bb = b.defined() ? t[k++] : Tensor();
          const Tensor ww = lw.defined() ? t[k++] : Tensor();
          const Tensor ll = lb.defined() ? t[k++] : Tensor();
          auto [s, z] = linear_residual_layer_norm(t[0], t[1], bb, t[2], ww, ll, 1e-5);
          if (z.requires_grad()) fused_graphs += graph_has(z, "LayerNormAddBackward") ? 1 : 0;
          // s feeds a second consumer (the next residual add), z the rest of the block
          return add(mul(z, z), mul(s, c));
        },
        in);
    EXPECT_TRUE(res.ok) << "variant " << variant << ": " << res.message;
    EXPECT_GT(fused_graphs, 0) << "variant " << variant;
  }
}

TEST(LinearResidualLayerNorm, FusedEqualsSeparateOpsBitForBit) {
  for (DType dt : {DType::f32, DType::f64})
    for (int threads : {1, 2}) {
      strata::testing::ThreadsGuard tg(threads);
      Generator g(7);
      const auto u = [&](Shape s, double lo, double hi) { return ops::to_dtype(ops::uniform(s, lo, hi, g), dt); };
      Tensor x0 = u({3, 100, 96}, -2, 2), w0 = u({40, 96}, -0.5, 0.5), b0 = u({40}, -1, 1);
      Tensor r0 = u({3, 100, 40}, -3, 3), lw0 = u({40}, 0.5, 1.5), lb0 = u({40}, -1, 1);
      Tensor gz = u({3, 100, 40}, -1, 1), gs = u({3, 100, 40}, -1, 1);
      auto run = [&](ResidualNormFusion f) {
        FusionGuard fg(f);
        Tensor x = ops::clone(x0), w = ops::clone(w0), b = ops::clone(b0), r = ops::clone(r0);
        Tensor lw = ops::clone(lw0), lb = ops::clone(lb0);
        for (Tensor* t : {&x, &w, &b, &r, &lw, &lb}) t->set_requires_grad(true);
        auto [s, z] = linear_residual_layer_norm(x, w, b, r, lw, lb, 1e-5);
        EXPECT_EQ(graph_has(z, "LayerNormAddBackward"), f == ResidualNormFusion::always);
        // s's other consumer runs first in backward, so its gradient is pending when the
        // LayerNorm's backward runs
        backward(add(sum(mul(z, gz)), sum(mul(s, gs))));
        return std::vector<Tensor>{s.detach(), z.detach(), x.grad(), w.grad(), b.grad(), r.grad(), lw.grad(), lb.grad()};
      };
      const auto f = run(ResidualNormFusion::always), n = run(ResidualNormFusion::never);
      const char* names[] = {"s", "z", "dx", "dw", "db", "dr", "dlw", "dlb"};
      for (size_t k = 0; k < f.size(); ++k) {
        const auto a = f[k].to_vector<double>(), c = n[k].to_vector<double>();
        ASSERT_EQ(a.size(), c.size()) << names[k];
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(a[i], c[i]) << names[k] << "[" << i << "] " << dtype_name(dt) << " threads " << threads;
      }
    }
}

TEST(LinearResidualLayerNorm, ZAloneAndSAloneGetTheirGradients) {
  FusionGuard fg(ResidualNormFusion::always);
  Generator g(2);
  Tensor x0 = ops::uniform({6, 8}, -1, 1, g), w0 = ops::uniform({5, 8}, -1, 1, g), r0 = ops::uniform({6, 5}, -1, 1, g);
  for (int which = 0; which < 2; ++which) {
    auto run = [&](ResidualNormFusion f) {
      FusionGuard inner(f);
      Tensor x = ops::clone(x0), r = ops::clone(r0);
      x.set_requires_grad(true);
      r.set_requires_grad(true);
      auto [s, z] = linear_residual_layer_norm(x, w0, Tensor(), r, Tensor(), Tensor(), 1e-5);
      backward(sum(mul(which == 0 ? z : s, which == 0 ? z : s)));  // no other gradient / no LayerNorm one
      return std::vector<Tensor>{x.grad(), r.grad()};
    };
    const auto f = run(ResidualNormFusion::always), n = run(ResidualNormFusion::never);
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(f[k].to_vector<double>(), n[k].to_vector<double>()) << which << " " << k;
  }
}

TEST(LinearResidualLayerNorm, AutomaticFusesCpuTensorsAndNeverKeepsTheSeparateOps) {
  Tensor x = leaf64({2, 4}, 1), w = leaf64({3, 4}, 2), r = leaf64({2, 3}, 3);
  {
    FusionGuard fg(ResidualNormFusion::automatic);
    auto [s, z] = linear_residual_layer_norm(x, w, Tensor(), r, Tensor(), Tensor(), 1e-5);
    EXPECT_TRUE(graph_has(z, "LayerNormAddBackward"));
  }
  FusionGuard fg(ResidualNormFusion::never);
  auto [s, z] = linear_residual_layer_norm(x, w, Tensor(), r, Tensor(), Tensor(), 1e-5);
  EXPECT_TRUE(graph_has(z, "LinearResidualBackward"));
  EXPECT_FALSE(graph_has(z, "LayerNormAddBackward"));
  EXPECT_TRUE(graph_has(z, "LayerNormBackward"));
}
