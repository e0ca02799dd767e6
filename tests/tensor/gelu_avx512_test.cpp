// The fused bias + GELU passes (ops::bias_gelu[_backward], the GPT MLP's) at every SIMD
// level this CPU runs: at x86-64-v4 forward and backward take the AVX-512 rows
// (cpu/act_avx512.h). Against the f64 formula over [-14, 14] and the special values,
// with the bounds of GeluAccuracy.TanhFormF32AgainstF64OverAWideRange, and the levels
// against each other with a bias, a bias gradient and rows that are not a multiple of 16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <strata/tensor/cpu/simd_level.h>
#include "tests/simd_levels.h"
#include <strata/tensor/ops.h>

#include "tests/gelu_reference.h"

using namespace strata;

namespace {

double gelu_ref(double x) { return strata::testing::gelu_tanh_ref(x); }
double gelu_grad_ref(double x) { return strata::testing::gelu_tanh_grad_ref(x); }

using LevelGuard = strata::testing::SimdLevelGuard;

}  // namespace

TEST(BiasGeluLevels, AgainstF64OverAWideRangeAtEveryLevel) {
  LevelGuard guard;
  std::vector<float> xs;
  for (float x = -14.0f; x <= 14.0f; x += 0.000377f) xs.push_back(x);
  for (float x : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e6f, -1e6f})
    xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  const Tensor x = ops::from_vector<float>(xs, {n});
  const Tensor ones = ops::full({n}, 1.0);
  for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
    cpu::set_simd_level(lvl);
    const auto y = ops::bias_gelu(x, Tensor(), true).to_vector<double>();
    const auto dy = ops::bias_gelu_backward(ones, x, Tensor(), true, false).first.to_vector<double>();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = xs[size_t(i)], z = std::min(std::abs(strata::testing::gelu_z(v)), 100.0);
      const double ry = gelu_ref(v), rdy = gelu_grad_ref(v);
      ASSERT_NEAR(y[size_t(i)], ry, 3e-7 * (1 + z) * std::abs(ry) + 1e-37)
          << "gelu(" << v << ") at " << cpu::simd_level_name(lvl);
      ASSERT_NEAR(dy[size_t(i)], rdy, 3e-7 * (1 + z) * std::abs(rdy) + 1e-7)
          << "gelu'(" << v << ") at " << cpu::simd_level_name(lvl);
      if (std::abs(ry) > 1e-30) worst = std::max(worst, std::abs(y[size_t(i)] - ry) / std::abs(ry) / (1 + z));
    }
    RecordProperty(std::string("worst_rel_fwd_") + std::to_string(int(lvl)), std::to_string(worst));
    // saturated ends exact, NaN propagates, the negative tail keeps its sign
    const float inf = std::numeric_limits<float>::infinity();
    const Tensor s = ops::from_vector<float>({1e20f, -1e20f, inf, NAN, 3e38f, -8.0f}, {6});
    const auto e = ops::bias_gelu(s, Tensor(), true).to_vector<float>();
    EXPECT_EQ(e[0], 1e20f);
    EXPECT_EQ(e[1], 0.0f);
    EXPECT_EQ(e[2], inf);
    EXPECT_TRUE(std::isnan(e[3]));
    EXPECT_EQ(e[4], 3e38f);
    EXPECT_LT(e[5], 0.0f);
    const auto de =
        ops::bias_gelu_backward(ops::full({6}, 1.0), s, Tensor(), true, false).first.to_vector<float>();
    EXPECT_EQ(de[0], 1.0f);
    EXPECT_EQ(de[1], 0.0f);
    EXPECT_TRUE(std::isnan(de[3]));
    const auto d0 = ops::bias_gelu_backward(ops::full({1}, 1.0), ops::zeros({1}), Tensor(), true, false)
                        .first.to_vector<float>();
    EXPECT_EQ(d0[0], 0.5f);
  }
}

TEST(BiasGeluLevels, LevelsAgreeWithBiasAndBiasGrad) {
  LevelGuard guard;
  Generator g(5);
  // 70 rows (three 32-row blocks of the bias-gradient partials), 229 columns: the AVX-512
  // rows' pipelined blocks of four vectors (three: a step that hands its next block on),
  // a step of two and a masked tail of 5
  const Tensor y = ops::uniform({70, 229}, -6, 6, g), b = ops::uniform({229}, -1, 1, g);
  const Tensor dout = ops::uniform({70, 229}, -1, 1, g);
  cpu::set_simd_level(cpu::SimdLevel::baseline);
  const auto ref = ops::bias_gelu(y, b, true).to_vector<double>();
  const auto [rdh, rdb] = ops::bias_gelu_backward(dout, y, b, true, true);
  const auto rdh_v = rdh.to_vector<double>(), rdb_v = rdb.to_vector<double>();
  for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
    cpu::set_simd_level(lvl);
    const auto out = ops::bias_gelu(y, b, true).to_vector<double>();
    const auto [dh, db] = ops::bias_gelu_backward(dout, y, b, true, true);
    const auto dh_v = dh.to_vector<double>(), db_v = db.to_vector<double>();
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-6 * (1 + std::abs(ref[i]))) << i << " at " << cpu::simd_level_name(lvl);
      ASSERT_NEAR(dh_v[i], rdh_v[i], 1e-6 * (1 + std::abs(rdh_v[i]))) << i << " at " << cpu::simd_level_name(lvl);
    }
    for (size_t j = 0; j < db_v.size(); ++j)
      ASSERT_NEAR(db_v[j], rdb_v[j], 1e-5 * (1 + std::abs(rdb_v[j]))) << j << " at " << cpu::simd_level_name(lvl);
  }
}
