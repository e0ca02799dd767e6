// ops::causal_attention and its backward against naive per-head loops in double (the
// q|k|v packing, the head layout, the causal mask and the 1/sqrt(hd) scale), against the
// composition that devices without a fused kernel run, at 1 and 2 threads, f32 and f64.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/core/threads.h>
#include <strata/tensor/attention_composed.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using Vec = std::vector<double>;
using strata::testing::rnd;

struct Ref {
  Vec y, probs, dqkv;
};

// qkv (B, T, 3*H*D), dy (B, T, H*D): forward and backward by the textbook formulas.
Ref naive_attention(const Vec& qkv, const Vec& dy, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D, W = 3 * C;
  const double scale = 1.0 / std::sqrt(double(D));
  Ref r{Vec(size_t(B * T * C), 0.0), Vec(size_t(B * H * T * T), 0.0), Vec(size_t(B * T * W), 0.0)};
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) { return b * T * W + t * W + part * C + h * D + d; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      Vec p(size_t(T * T), 0.0), dp(size_t(T * T), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qkv[size_t(at(b, i, 0, h, d))] * qkv[size_t(at(b, j, 1, h, d))];
          p[size_t(i * T + j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        for (int64_t j = 0; j <= i; ++j) z += p[size_t(i * T + j)] = std::exp(p[size_t(i * T + j)] - mx);
        for (int64_t j = 0; j <= i; ++j) p[size_t(i * T + j)] /= z;
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          r.probs[size_t(((b * H + h) * T + i) * T + j)] = p[size_t(i * T + j)];
          for (int64_t d = 0; d < D; ++d) {
            r.y[size_t((b * T + i) * C + h * D + d)] += p[size_t(i * T + j)] * qkv[size_t(at(b, j, 2, h, d))];
            dp[size_t(i * T + j)] += dy[size_t((b * T + i) * C + h * D + d)] * qkv[size_t(at(b, j, 2, h, d))];
          }
        }
      for (int64_t i = 0; i < T; ++i) {
        double s = 0;
        for (int64_t j = 0; j < T; ++j) s += p[size_t(i * T + j)] * dp[size_t(i * T + j)];
        for (int64_t j = 0; j < T; ++j) {
          const double ds = p[size_t(i * T + j)] * (dp[size_t(i * T + j)] - s);  // dL/dS
          for (int64_t d = 0; d < D; ++d) {
            r.dqkv[size_t(at(b, i, 0, h, d))] += scale * ds * qkv[size_t(at(b, j, 1, h, d))];
            r.dqkv[size_t(at(b, j, 1, h, d))] += scale * ds * qkv[size_t(at(b, i, 0, h, d))];
            r.dqkv[size_t(at(b, j, 2, h, d))] += p[size_t(i * T + j)] * dy[size_t((b * T + i) * C + h * D + d)];
          }
        }
      }
    }
  return r;
}

void expect_close(const Tensor& got, const Vec& want, double tol, const std::string& what) {
  const Vec g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

using strata::testing::ThreadsGuard;

class CausalAttention : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Float, CausalAttention, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The fused kernel and the composition against the naive loops at 1 and 2 threads.
void check_against_naive(DType dt, int64_t T) {
  const double tol = dt == DType::f64 ? 1e-10 : 2e-5;
  const int64_t B = 3, H = 3, D = 5;
  const Tensor qkv = rnd({B, T, 3 * H * D}, dt, 1), dy = rnd({B, T, H * D}, dt, 2);
  const Ref ref = naive_attention(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  for (int threads : {1, 2}) {
    ThreadsGuard tg(threads);
    const std::string at = " at T=" + std::to_string(T) + ", " + std::to_string(threads) + " threads";
    auto [y, probs] = ops::causal_attention(qkv, D);
    EXPECT_EQ(y.shape(), (Shape{B, T, H * D}));
    EXPECT_EQ(probs.shape(), (Shape{B, H, T, T}));
    expect_close(y, ref.y, tol, "y" + at);
    expect_close(probs, ref.probs, tol, "probs" + at);
    expect_close(ops::causal_attention_backward(dy, qkv, probs, D), ref.dqkv, tol, "dqkv" + at);

    Tensor cy = ops::empty(y.shape(), dt), cp = ops::empty(probs.shape(), dt), cd = ops::empty(qkv.shape(), dt);
    ops::detail::composed_causal_attention(qkv, cy, cp, D);
    ops::detail::composed_causal_attention_backward(dy, qkv, cp, cd, D);
    expect_close(cy, ref.y, tol, "composed y" + at);
    expect_close(cp, ref.probs, tol, "composed probs" + at);
    expect_close(cd, ref.dqkv, tol, "composed dqkv" + at);
  }
}

TEST_P(CausalAttention, MatchesNaiveLoopsAndTheCompositionAtOneAndTwoThreads) {
  // T = 37: rows that end before, inside and past the kernel's 16-wide column blocks
  for (const int64_t T : {7, 37}) check_against_naive(GetParam(), T);
}

TEST(CausalAttentionOp, StridedInputsOneTokenAndErrors) {
  // a transposed (non-contiguous) qkv and grad give the same result as contiguous ones
  const int64_t B = 2, T = 4, H = 2, D = 3;
  const Tensor base = rnd({B, 3 * H * D, T}, DType::f32, 3), gbase = rnd({B, H * D, T}, DType::f32, 4);
  const Tensor qkv = ops::transpose(base, 1, 2), dy = ops::transpose(gbase, 1, 2);
  ASSERT_FALSE(qkv.is_contiguous());
  const Ref ref = naive_attention(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  auto [y, probs] = ops::causal_attention(qkv, D);
  expect_close(y, ref.y, 2e-5, "y");
  expect_close(ops::causal_attention_backward(dy, qkv, probs, D), ref.dqkv, 2e-5, "dqkv");

  // T = 1: each position attends only to itself, so y is v and the grads of q, k vanish
  const Tensor one = rnd({2, 1, 3 * H * D}, DType::f32, 5);
  auto [y1, p1] = ops::causal_attention(one, D);
  expect_close(y1, ops::narrow(one, 2, 2 * H * D, H * D).to_vector<double>(), 1e-7, "T=1 y");
  expect_close(p1, Vec(size_t(2 * H), 1.0), 1e-7, "T=1 probs");

  EXPECT_THROW(ops::causal_attention(rnd({2, 4, 10}, DType::f32, 6), 2), Error);  // 10 is not 3*H*2
  EXPECT_THROW(ops::causal_attention(rnd({4, 18}, DType::f32, 7), 3), Error);     // not (B, T, W)
  EXPECT_THROW(ops::causal_attention_backward(rnd({B, T, H * D + 1}, DType::f32, 8), qkv, probs, D), Error);
}

}  // namespace
