// CUDA vs CPU: the multi-tensor ops (a parameter list in a few launches) against the
// single-tensor CPU ops, over lists that need several launches (more tensors than one
// launch's argument block holds, and a tensor longer than one launch's 320 chunks).
// Skips without a GPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu

// 150 tensors of assorted sizes (an empty one among them) and one of 21M elements.
std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int i = 0; i < 150; ++i) s.push_back({1 + (i * 7919) % 70000});
  s[17] = {0};
  s.push_back({320 * 65536 + 12345});
  return s;
}
std::vector<Tensor> cpu_list(DType dt, uint64_t seed, double lo, double hi) {
  std::vector<Tensor> out;
  uint64_t k = 0;
  for (const Shape& s : shapes()) out.push_back(rand_cpu(s, dt, seed * 1000 + k++, lo, hi));
  return out;
}
std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(kGpu));
  return out;
}

TEST(CudaMultiTensor, AdamSgdNormAndScaleMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string name = dtype_name(dt);
    auto p = cpu_list(dt, 1, -1, 1), g = cpu_list(dt, 2, -1, 1), m = cpu_list(dt, 3, -0.1, 0.1),
         v = cpu_list(dt, 4, 0, 0.1);
    auto gp = to_gpu(p), gg = to_gpu(g), gm = to_gpu(m), gv = to_gpu(v);
    for (int64_t step = 1; step <= 2; ++step) {
      const ops::AdamParams ap{1e-2, 0.9, 0.999, 1e-8, 0.1, step, true};
      ops::adam_step_multi_(p, g, m, v, ap);
      ops::adam_step_multi_(gp, gg, gm, gv, ap);
    }
    for (size_t i = 0; i < p.size(); ++i) {
      expect_close(gp[i], p[i], name + " adam param " + std::to_string(i));
      expect_close(gm[i], m[i], name + " adam m " + std::to_string(i));
      expect_close(gv[i], v[i], name + " adam v " + std::to_string(i));
    }
    auto b = cpu_list(dt, 5, 0, 0);
    auto gb = to_gpu(b);
    for (int step = 0; step < 2; ++step) {
      const ops::SgdParams sp{0.05, 0.9, 0.0, 0.01, true, step == 0};
      ops::sgd_step_multi_(p, g, b, sp);
      ops::sgd_step_multi_(gp, gg, gb, sp);
    }
    for (size_t i = 0; i < p.size(); ++i) expect_close(gp[i], p[i], name + " sgd param " + std::to_string(i));
    const double want = ops::sum_squares_multi(g), got = ops::sum_squares_multi(gg);
    EXPECT_NEAR(got, want, 1e-12 * want) << name << " sum_squares_multi";
    EXPECT_EQ(ops::sum_squares_multi(gg), got) << name << ": the same plan sums in the same order";
    ops::mul_multi_(g, -0.25);
    ops::mul_multi_(gg, -0.25);
    for (size_t i = 0; i < g.size(); ++i) expect_close(gg[i], g[i], name + " mul_multi_ " + std::to_string(i));
  }
}

TEST(CudaMultiTensor, OneCallTakesOneDevice) {
  STRATA_REQUIRE_GPU();
  std::vector<Tensor> mixed = {ops::zeros({4}), ops::zeros({4}).to(kGpu)};
  EXPECT_THROW(ops::mul_multi_(mixed, 2.0), Error);
}

}  // namespace
}  // namespace strata
