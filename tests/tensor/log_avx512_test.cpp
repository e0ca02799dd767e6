// The AVX-512 log of the attention's row sums (cpu/exp_avx512.h, detail::log_avx512) against
// f64's over the sums' range [1, 2^16] and beyond, where this CPU runs AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <strata/tensor/cpu/exp_avx512.h>
#include <strata/tensor/cpu/simd_level.h>

namespace {

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
[[gnu::target("avx512f")]] void log16(const float* x, float* y) {
  _mm512_storeu_ps(y, strata::cpu::detail::log_avx512(_mm512_loadu_ps(x)));
}

TEST(LogAvx512, WithinAFewUlpOfF64OverTheRowSumsRange) {
  if (int(strata::cpu::simd_level_supported()) < int(strata::cpu::SimdLevel::v4)) GTEST_SKIP() << "no AVX-512";
  std::vector<float> xs;
  for (float x = 1e-30f; x < 1e30f; x *= 1.37f) xs.push_back(x);   // every binade
  for (int i = 0; i <= 20000; ++i) xs.push_back(1.0f + float(i) / 20000.0f);  // [1, 2]: the mantissa range
  for (float x = 1.0f; x <= 65536.0f; x *= 1.0003f) xs.push_back(x);        // the row sums' range
  xs.push_back(std::sqrt(2.0f));
  xs.push_back(std::nextafter(std::sqrt(2.0f), 2.0f));
  while (xs.size() % 16) xs.push_back(1.0f);
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < xs.size(); i += 16) log16(xs.data() + i, ys.data() + i);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::log(double(xs[i]));
    // error in units of the f32 spacing at the result (absolute near log = 0)
    const double ulp = std::max(std::abs(want), 1.0) * 0x1p-23;
    const double err = std::abs(double(ys[i]) - want) / ulp;
    worst = std::max(worst, err);
    ASSERT_LE(err, 4.0) << "log(" << xs[i] << ") = " << ys[i] << ", want " << want;
  }
  EXPECT_EQ(ys[xs.size() - 1], 0.0f);  // log 1 = 0 exactly
  RecordProperty("worst_ulp", std::to_string(worst));
}
#endif

}  // namespace
