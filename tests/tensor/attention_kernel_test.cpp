// The CPU causal-attention kernels (strata/tensor/cpu/attention.cpp: packed register tiles,
// the causal softmax fused into the row loop) against a plain f64 loop, forward (y, probs)
// and backward (d q|k|v), at every SIMD level this CPU runs, for sizes that are not
// multiples of any vector width or tile: T 1, 7, 33, 65 (rows that end before, inside and
// past a 16-wide column block, row blocks of 4 cut short) and 32 (whole vectors: the
// probabilities go out through streaming stores), head_dim 8, 24, 40 (part vectors) and 72
// (more than one column chunk of a tile), 1 and 3 heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <strata/tensor/cpu/simd_level.h>
#include "tests/simd_levels.h"
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using Vec = std::vector<double>;

struct Ref {
  Vec y, probs, dqkv;
};

// qkv (B, T, 3*H*D) = q | k | v, dy (B, T, H*D). Per (b, h): S = q k^T / sqrt(D) on j <= i,
// P = softmax rows, y = P v; dP = dy v^T, dS = P (dP - rowsum(P dP)), dq = dS k / sqrt(D),
// dk = dS^T q / sqrt(D), dv = P^T dy.
Ref reference(const Vec& qkv, const Vec& dy, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D, W = 3 * C;
  const double sc = 1.0 / std::sqrt(double(D));
  Ref r{Vec(size_t(B * T * C)), Vec(size_t(B * H * T * T)), Vec(size_t(B * T * W))};
  auto x = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) -> size_t {
    return size_t(b * T * W + t * W + part * C + h * D + d);
  };
  auto g = [&](int64_t b, int64_t t, int64_t h, int64_t d) -> size_t { return size_t((b * T + t) * C + h * D + d); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double* p = r.probs.data() + (b * H + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qkv[x(b, i, 0, h, d)] * qkv[x(b, j, 1, h, d)];
          p[i * T + j] = s * sc;
          mx = std::max(mx, s * sc);
        }
        for (int64_t j = 0; j <= i; ++j) z += p[i * T + j] = std::exp(p[i * T + j] - mx);
        for (int64_t j = 0; j <= i; ++j) p[i * T + j] /= z;
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j <= i; ++j) r.y[g(b, i, h, d)] += p[i * T + j] * qkv[x(b, j, 2, h, d)];
      }
      for (int64_t i = 0; i < T; ++i) {
        Vec dp(size_t(i + 1));
        double rs = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < D; ++d) dp[size_t(j)] += dy[g(b, i, h, d)] * qkv[x(b, j, 2, h, d)];
          rs += p[i * T + j] * dp[size_t(j)];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[i * T + j] * (dp[size_t(j)] - rs);
          for (int64_t d = 0; d < D; ++d) {
            r.dqkv[x(b, i, 0, h, d)] += sc * ds * qkv[x(b, j, 1, h, d)];
            r.dqkv[x(b, j, 1, h, d)] += sc * ds * qkv[x(b, i, 0, h, d)];
            r.dqkv[x(b, j, 2, h, d)] += p[i * T + j] * dy[g(b, i, h, d)];
          }
        }
      }
    }
  return r;
}

void expect_close(const Tensor& got, const Vec& want, double tol, const std::string& what) {
  const Vec v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], tol * (1 + std::abs(want[i]))) << what << ", element " << i;
}

using LevelGuard = strata::testing::SimdLevelGuard;

class AttentionKernel : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Float, AttentionKernel, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(AttentionKernel, OddSizesAgainstAnF64LoopAtEveryLevel) {
  const DType dt = GetParam();
  const double tol = dt == DType::f64 ? 1e-10 : 2e-5;  // as CausalAttention.*
  LevelGuard guard;
  strata::testing::ThreadsGuard one(1);
  const int64_t B = 2;
  uint64_t seed = 10;
  for (const int64_t T : {1, 7, 32, 33, 65})
    for (const int64_t D : {8, 24, 40, 72})
      for (const int64_t H : {1, 3}) {
        if (H == 3 && D == 72) continue;  // the 72-wide chunks are covered by H = 1
        // scores of a few units: the softmax rows are neither flat nor one-hot
        const Tensor qkv = strata::testing::rnd({B, T, 3 * H * D}, dt, ++seed, 2.0);
        const Tensor dy = strata::testing::rnd({B, T, H * D}, dt, ++seed);
        const Ref ref = reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
        for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
          ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
          const std::string at = " at T " + std::to_string(T) + ", head_dim " + std::to_string(D) + ", " +
                                 std::to_string(H) + " heads, " + cpu::simd_level_name(lvl);
          auto [y, probs] = ops::causal_attention(qkv, D);
          expect_close(y, ref.y, tol, "y" + at);
          expect_close(probs, ref.probs, tol, "probs" + at);
          expect_close(ops::causal_attention_backward(dy, qkv, probs, D), ref.dqkv, tol, "dqkv" + at);
        }
      }
}

// Two threads split the (batch, head) pairs (each its own scratch): same results.
TEST_P(AttentionKernel, TwoThreadsAtEveryLevel) {
  const DType dt = GetParam();
  const double tol = dt == DType::f64 ? 1e-10 : 2e-5;
  LevelGuard guard;
  strata::testing::ThreadsGuard two(2);
  const int64_t B = 3, T = 37, H = 3, D = 24;
  const Tensor qkv = strata::testing::rnd({B, T, 3 * H * D}, dt, 3, 2.0);
  const Tensor dy = strata::testing::rnd({B, T, H * D}, dt, 4);
  const Ref ref = reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
    ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
    const std::string at = std::string(" at ") + cpu::simd_level_name(lvl);
    auto [y, probs] = ops::causal_attention(qkv, D);
    expect_close(y, ref.y, tol, "y" + at);
    expect_close(probs, ref.probs, tol, "probs" + at);
    expect_close(ops::causal_attention_backward(dy, qkv, probs, D), ref.dqkv, tol, "dqkv" + at);
  }
}

}  // namespace
