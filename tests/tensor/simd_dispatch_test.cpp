// Runtime ISA dispatch (tensor/cpu/isa_dispatch.h): the level follows the CPU, and every
// compiled variant (baseline, x86-64-v3, x86-64-v4, as far as this CPU runs them) gives
// the same results as the baseline loops, op by op, to float rounding (FMA contraction
// and vector reduction order differ between variants; nothing else may).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/simd_level.h>
#include "tests/simd_levels.h"
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
using strata::cpu::SimdLevel;
using strata::testing::rnd;

namespace {

using LevelGuard = strata::testing::SimdLevelGuard;

// Every output of the hot ops on fixed inputs, flattened, for one level.
std::vector<std::vector<double>> run_ops(DType dt) {
  std::vector<std::vector<double>> out;
  auto keep = [&](const Tensor& t) { out.push_back(t.to_vector<double>()); };
  const Tensor x = rnd({37, 131}, dt, 1), y = rnd({37, 131}, dt, 2), row = rnd({131}, dt, 3);
  const Tensor pos = ops::binary_scalar(ops::BinaryOp::add, ops::unary(ops::UnaryOp::abs, x), 0.1);
  // elementwise: unary math, binary with and without broadcast, activation grads
  for (auto op : {ops::UnaryOp::exp, ops::UnaryOp::tanh, ops::UnaryOp::gelu, ops::UnaryOp::gelu_tanh,
                  ops::UnaryOp::sigmoid, ops::UnaryOp::relu, ops::UnaryOp::sqrt})
    keep(ops::unary(op, op == ops::UnaryOp::sqrt ? pos : x));
  keep(ops::unary(ops::UnaryOp::log, pos));
  keep(ops::binary(ops::BinaryOp::mul, x, y));
  keep(ops::binary(ops::BinaryOp::add, x, row));
  keep(ops::binary(ops::BinaryOp::div, x, pos));
  keep(ops::gelu_backward(y, x, false));
  keep(ops::gelu_backward(y, x, true));
  Tensor acc = ops::clone(x);
  ops::add_(acc, y, 0.5);
  keep(acc);
  // norm, softmax, loss, reductions
  auto [ln, mu, rs] = ops::layer_norm(x, row, row, 1e-5);
  keep(ln);
  auto [dx, dw, db] = ops::layer_norm_backward(y, x, mu, rs, row, true);
  keep(dx);
  keep(dw);
  keep(db);
  const Tensor sm = ops::softmax(x, -1);
  keep(sm);
  keep(ops::softmax_backward(y, sm, -1));
  keep(ops::log_softmax(x, -1));
  const Tensor target = strata::testing::random_tokens({37}, 131, 4);
  auto [loss, probs] = ops::cross_entropy(x, target, -100);
  keep(loss);
  keep(ops::cross_entropy_backward(ops::full({}, 1.0, dt), probs, target, -100));
  keep(ops::sum(x, {0}));
  keep(ops::sum(x, {1}));
  keep(ops::mean(x));
  // attention (per-head loops around single-threaded GEMMs)
  const Tensor qkv = rnd({2, 19, 3 * 16}, dt, 5);
  auto [att, p] = ops::causal_attention(qkv, 8);
  keep(att);
  keep(ops::causal_attention_backward(rnd({2, 19, 16}, dt, 6), qkv, p, 8));
  // optimizer
  Tensor w = ops::clone(x), m = ops::zeros_like(x), v = ops::zeros_like(x);
  for (int64_t s = 1; s <= 3; ++s)
    ops::adam_step_(w, y, m, v, {1e-2, 0.9, 0.95, 1e-8, 0.1, s, true});
  keep(w);
  return out;
}

}  // namespace

TEST(SimdDispatch, LevelFollowsTheCpu) {
  LevelGuard guard;
  if (!cpu::simd_dispatch_compiled()) {
    EXPECT_EQ(cpu::simd_level_supported(), SimdLevel::baseline);
    GTEST_SKIP() << "built without runtime dispatch: " << cpu::cpu_kernels_info();
  }
  __builtin_cpu_init();
  const SimdLevel want = __builtin_cpu_supports("x86-64-v4")   ? SimdLevel::v4
                         : __builtin_cpu_supports("x86-64-v3") ? SimdLevel::v3
                                                               : SimdLevel::baseline;
  EXPECT_EQ(cpu::simd_level_supported(), want);
  EXPECT_LE(int(cpu::simd_level()), int(want));
  // never above what the CPU runs
  EXPECT_EQ(cpu::set_simd_level(SimdLevel::v4), want);
  EXPECT_EQ(cpu::set_simd_level(SimdLevel::baseline), SimdLevel::baseline);
  EXPECT_EQ(cpu::simd_level(), SimdLevel::baseline);
  EXPECT_NE(std::string(cpu::cpu_kernels_info()).find("baseline"), std::string::npos) << cpu::cpu_kernels_info();
}

class SimdVariants : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Float, SimdVariants, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(SimdVariants, AgreeWithBaseline) {
  LevelGuard guard;
  const DType dt = GetParam();
  const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
  for (int threads : {1, 2}) {
    const int saved_threads = get_num_threads();
    set_num_threads(threads);
    cpu::set_simd_level(SimdLevel::baseline);
    const auto want = run_ops(dt);
    for (SimdLevel lvl : strata::testing::runnable_simd_levels()) {
      ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
      const auto got = run_ops(dt);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k].size(), want[k].size());
        for (size_t i = 0; i < got[k].size(); ++i)
          ASSERT_NEAR(got[k][i], want[k][i], tol * (1 + std::abs(want[k][i])))
              << "output " << k << " element " << i << " at " << cpu::simd_level_name(lvl) << ", " << threads
              << " thread(s)";
      }
    }
    set_num_threads(saved_threads);
  }
}
