// Cross-entropy's forward (ops::cross_entropy: the loss and the softmax probabilities) at
// every SIMD level this CPU runs: at x86-64-v4 the f32 rows take the AVX-512 softmax row
// (cpu/act_avx512.h). Against an f64 reference over widths that exercise whole 16-lane
// chunks, an odd chunk and a masked tail, with ignored targets, large logits, -inf logits
// (probability exactly 0) and a NaN logit (the loss NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <strata/tensor/cpu/simd_level.h>
#include <strata/tensor/ops.h>

#include "tests/simd_levels.h"

using namespace strata;

namespace {

struct Reference {
  double loss;
  std::vector<double> probs;
};

Reference reference(const std::vector<float>& x, const std::vector<int64_t>& t, int64_t N, int64_t C,
                    int64_t ignore) {
  Reference ref{0.0, std::vector<double>(x.size())};
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    double mx = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t i = 0; i < C; ++i) mx = std::max(mx, double(x[size_t(r * C + i)]));
    for (int64_t i = 0; i < C; ++i) s += std::exp(double(x[size_t(r * C + i)]) - mx);
    for (int64_t i = 0; i < C; ++i) ref.probs[size_t(r * C + i)] = std::exp(double(x[size_t(r * C + i)]) - mx) / s;
    if (t[size_t(r)] == ignore) continue;
    ref.loss += std::log(s) + mx - double(x[size_t(r * C + t[size_t(r)])]);
    ++count;
  }
  ref.loss /= double(count);
  return ref;
}

}  // namespace

TEST(CrossEntropyLevels, LossAndProbabilitiesAgainstF64AtEveryLevel) {
  strata::testing::SimdLevelGuard guard;
  constexpr int64_t kIgnore = -100;
  for (int64_t C : {5, 16, 37, 48, 256}) {
    const int64_t N = 23;
    Generator g{uint64_t(C)};
    std::vector<float> x = ops::normal({N, C}, 0, 8, g).to_vector<float>();
    x[3] = 80.0f;                                              // a large logit: exp(x - max) stays finite
    x[size_t(C + 1)] = -std::numeric_limits<float>::infinity();  // probability exactly 0
    std::vector<int64_t> t(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r) t[size_t(r)] = (r * 7 + 3) % C;
    t[2] = kIgnore;
    const Reference ref = reference(x, t, N, C, kIgnore);
    const Tensor logits = ops::from_vector<float>(x, {N, C});
    const Tensor target = ops::from_vector<int64_t>(t, {N});
    for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
      cpu::set_simd_level(lvl);
      const auto [loss, probs] = ops::cross_entropy(logits, target, kIgnore);
      const std::string at = std::string(cpu::simd_level_name(lvl)) + ", C " + std::to_string(C);
      EXPECT_NEAR(loss.item<double>(), ref.loss, 2e-6 * std::abs(ref.loss) + 1e-6) << at;
      const std::vector<double> p = probs.to_vector<double>();
      for (size_t i = 0; i < p.size(); ++i)
        ASSERT_NEAR(p[i], ref.probs[i], 2e-6 * ref.probs[i] + 1e-9) << "probability " << i << " at " << at;
      EXPECT_EQ(p[size_t(C + 1)], 0.0) << at;
      // a NaN logit makes its row's loss, and so the mean, NaN
      std::vector<float> xn = x;
      xn[size_t(4 * C + 2)] = std::numeric_limits<float>::quiet_NaN();
      const auto [nan_loss, nan_probs] = ops::cross_entropy(ops::from_vector<float>(xn, {N, C}), target, kIgnore);
      EXPECT_TRUE(std::isnan(nan_loss.item<double>())) << at;
    }
  }
}
