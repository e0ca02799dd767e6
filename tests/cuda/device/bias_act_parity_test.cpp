// The fused bias + GELU and bias + residual kernels on CUDA (tensor/cuda/bias_act.cu)
// against their CPU twins: forward, backward with and without the bias gradient, tanh and
// erf forms, with and without a bias, f32 and f64, and 300 rows (the bias gradient's column
// sum over several chunks of rows); and linear_gelu / linear_residual through autograd,
// whose fused paths now run on CUDA, against the CPU. Skips without a GPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu

TEST(CudaBiasAct, BiasGeluAndResidualMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (const int64_t rows : {7, 300})
      for (bool tanh_approx : {true, false})
        for (bool with_b : {true, false}) {
          const std::string what = std::string(dtype_name(dt)) + " rows " + std::to_string(rows) +
                                   (tanh_approx ? " tanh" : " erf") + (with_b ? " bias" : " no bias");
          const Tensor y = rand_cpu({rows, 37}, dt, 1, -4, 4), g = rand_cpu({rows, 37}, dt, 2);
          const Tensor b = with_b ? rand_cpu({37}, dt, 3) : Tensor(), bg = with_b ? b.to(kGpu) : Tensor();
          expect_close(ops::bias_gelu(y.to(kGpu), bg, tanh_approx), ops::bias_gelu(y, b, tanh_approx), what + " out");
          for (bool need_b : {true, false}) {
            if (need_b && !with_b) continue;
            const auto [dhc, dbc] = ops::bias_gelu_backward(g, y, b, tanh_approx, need_b);
            const auto [dhg, dbg] = ops::bias_gelu_backward(g.to(kGpu), y.to(kGpu), bg, tanh_approx, need_b);
            expect_close(dhg, dhc, what + " dh");
            if (need_b) expect_close(dbg, dbc, what + " db");
          }
          const Tensor r = rand_cpu({rows, 37}, dt, 4);
          Tensor yc = ops::clone(y), yg = y.to(kGpu);
          ops::bias_residual_(yc, b, r);
          ops::bias_residual_(yg, bg, r.to(kGpu));
          expect_close(yg, yc, what + " bias_residual_");
        }
}

TEST(CudaBiasAct, FusedLinearGeluAndResidualGradientsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const Tensor x = rand_cpu({2, 5, 16}, DType::f32, 5), w1 = rand_cpu({24, 16}, DType::f32, 6);
  const Tensor b1 = rand_cpu({24}, DType::f32, 7), w2 = rand_cpu({16, 24}, DType::f32, 8);
  const Tensor b2 = rand_cpu({16}, DType::f32, 9);
  std::vector<Tensor> grads[2];
  Tensor outs[2];
  for (int dev = 0; dev < 2; ++dev) {
    const auto leaf = [&](const Tensor& t) {
      Tensor l = dev == 0 ? ops::clone(t) : t.to(kGpu);
      l.set_requires_grad(true);
      return l;
    };
    Tensor xl = leaf(x), w1l = leaf(w1), b1l = leaf(b1), w2l = leaf(w2), b2l = leaf(b2);
    const Tensor h = linear_gelu(xl, w1l, b1l, /*tanh_approx=*/true);
    outs[dev] = linear_residual(h, w2l, b2l, xl);
    backward(sum(mul(outs[dev], outs[dev])));
    for (const Tensor& t : {xl, w1l, b1l, w2l, b2l}) grads[dev].push_back(t.grad());
  }
  expect_close(outs[1], outs[0], "out");
  const char* names[] = {"dx", "dw1", "db1", "dw2", "db2"};
  for (size_t i = 0; i < grads[0].size(); ++i) expect_close(grads[1][i], grads[0][i], names[i]);
}

}  // namespace
}  // namespace strata
