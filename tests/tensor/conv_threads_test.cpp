// The batch-parallel conv2d kernels and the 2x2 max-pool fast path: results at 1, 2
// and 3 threads against direct loops written here, the skipped input gradient
// (need_input_grad = false) leaving dw/db unchanged, and pool ties/NaN on short rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <strata/core/threads.h>
#include <strata/tensor/ops.h>
#include "conv_reference.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::Vec;

using strata::testing::rnd;

using strata::testing::ThreadsGuard;

using Case = strata::testing::ConvCase;

const std::vector<Case> kCases = {
    {1, 3, 9, 9, 4, 3, 3, {1, 1, 1, 1}, true},      // one sample: fewer samples than threads
    {5, 2, 8, 7, 3, 3, 3, {2, 1, 1, 0}, false},     // odd batch split 2/3, stride (2,1)
    {4, 6, 5, 5, 8, 1, 1, {1, 1, 0, 0}, true},      // pointwise: per-thread partial dw
    {7, 8, 40, 40, 6, 3, 3, {1, 1, 1, 1}, false},   // big planes: several im2col groups per thread
    {6, 1, 28, 28, 4, 3, 3, {1, 1, 1, 1}, true},    // first-layer shape (one input channel)
};

}  // namespace

TEST(ConvThreads, SameResultsAtOneTwoAndThreeThreadsAsDirectLoops) {
  ThreadsGuard guard;
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-6;  // of each element's sum of |terms|
    for (size_t ci = 0; ci < kCases.size(); ++ci) {
      const Case& c = kCases[ci];
      Tensor x = rnd({c.N, c.C, c.H, c.W}, dt, 10 + ci), w = rnd({c.O, c.C, c.kh, c.kw}, dt, 20 + ci, 0.5);
      Tensor b = c.bias ? rnd({c.O}, dt, 30 + ci) : Tensor();
      Tensor dy = rnd({c.N, c.O, c.Ho(), c.Wo()}, dt, 40 + ci);
      const strata::testing::Reference ref = strata::testing::direct_conv(
          c, x.to_vector<double>(), w.to_vector<double>(), c.bias ? b.to_vector<double>() : Vec{},
          dy.to_vector<double>());
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        const std::string what = std::string(dtype_name(dt)) + " case " + std::to_string(ci) + " threads " +
                                 std::to_string(threads);
        Tensor yt = ops::conv2d(x, w, b, c.p);
        auto [dxt, dwt, dbt] = ops::conv2d_backward(dy, x, w, c.bias, c.p);
        expect_close(yt, ref.y, what + " y", tol);
        expect_close(dxt, ref.dx, what + " dx", tol);
        expect_close(dwt, ref.dw, what + " dw", tol);
        if (c.bias) expect_close(dbt, ref.db, what + " db", tol);
        // a second call with the same thread count reproduces dw exactly
        auto [dx2, dw2, db2] = ops::conv2d_backward(dy, x, w, c.bias, c.p);
        EXPECT_EQ(dw2.to_vector<double>(), dwt.to_vector<double>()) << what;
      }
    }
  }
}

TEST(ConvThreads, SkippingTheInputGradientKeepsWeightAndBiasGradients) {
  ThreadsGuard guard;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (size_t ci = 0; ci < kCases.size(); ++ci) {
      const Case& c = kCases[ci];
      Tensor x = rnd({c.N, c.C, c.H, c.W}, DType::f32, 50 + ci), w = rnd({c.O, c.C, c.kh, c.kw}, DType::f32, 60 + ci);
      Tensor b = c.bias ? rnd({c.O}, DType::f32, 70 + ci) : Tensor();
      Tensor dy = rnd(ops::conv2d(x, w, b, c.p).shape(), DType::f32, 80 + ci);
      auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, c.bias, c.p, /*need_input_grad=*/true);
      auto [dx0, dw0, db0] = ops::conv2d_backward(dy, x, w, c.bias, c.p, /*need_input_grad=*/false);
      const std::string what = "case " + std::to_string(ci) + " threads " + std::to_string(threads);
      EXPECT_TRUE(dx.defined()) << what;
      EXPECT_FALSE(dx0.defined()) << what;
      EXPECT_EQ(dw0.to_vector<float>(), dw.to_vector<float>()) << what;
      EXPECT_EQ(db0.defined(), c.bias) << what;
      if (c.bias) {
        EXPECT_EQ(db0.to_vector<float>(), db.to_vector<float>()) << what;
      }
    }
  }
}

// 2x2 stride-2 max pool on rows shorter than a vector (Wo 14, 7, 3) and longer (Wo 20):
// values and argmax against the rule "first maximum wins, the first NaN wins over
// numbers", with many ties (small integers), NaNs and infinities mixed in.
TEST(PoolFastPath, ShortAndLongRowsMatchTheFirstMaxRule) {
  ThreadsGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t W : {28, 14, 6, 40}) {
    const int64_t N = 3, C = 5, H = 6;
    std::vector<float> xv(size_t(N * C * H * W));
    uint64_t state = uint64_t(W) * 2654435761u;
    for (float& v : xv) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const uint32_t r = uint32_t(state >> 33) % 23;
      v = r == 0 ? nan : r == 1 ? inf : r == 2 ? -inf : float(int(r % 5) - 2);
    }
    Tensor x = ops::from_vector<float>(xv, {N, C, H, W});
    const int64_t Ho = H / 2, Wo = W / 2;
    std::vector<float> want_y;
    std::vector<int64_t> want_i;
    for (int64_t pl = 0; pl < N * C; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t best = 2 * oh * W + 2 * ow;
          float m = xv[size_t(pl * H * W + best)];
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
              const int64_t at = (2 * oh + i) * W + 2 * ow + j;
              const float v = xv[size_t(pl * H * W + at)];
              if (std::isnan(m)) continue;
              if (std::isnan(v) || v > m) m = v, best = at;
            }
          want_y.push_back(m);
          want_i.push_back(best);
        }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto [y, idx] = ops::max_pool2d(x, ops::Pool2dParams{});
      const std::vector<float> yv = y.to_vector<float>();
      const std::vector<int64_t> iv = idx.to_vector<int64_t>();
      ASSERT_EQ(yv.size(), want_y.size());
      for (size_t k = 0; k < yv.size(); ++k) {
        if (std::isnan(want_y[k]))
          ASSERT_TRUE(std::isnan(yv[k])) << "W " << W << " output " << k;
        else
          ASSERT_EQ(yv[k], want_y[k]) << "W " << W << " output " << k;
        ASSERT_EQ(iv[k], want_i[k]) << "W " << W << " output " << k;
      }
    }
  }
}
