// Causal self-attention over a packed q|k|v by the textbook formulas in double: the
// reference the CPU kernels (tests/tensor/attention*_test.cpp) are checked against.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <strata/tensor/tensor.h>

namespace strata::testing {

struct AttentionRef {
  std::vector<double> y, probs, dqkv;
  std::vector<double> lse;  // (B, H, T): log sum_j<=i exp(s_ij), what the fused kernels save
};

// qkv (B, T, (H + 2*Hkv)*D) = q (H heads) | k | v (Hkv heads each; Hkv = 0: H), dy (B, T,
// H*D). Query head h reads key/value head h / (H/Hkv). Per (b, h): S = q k^T / sqrt(D) on
// j <= i, P = softmax rows, y = P v; dP = dy v^T, dS = P (dP - rowsum(P dP)), dq = dS k /
// sqrt(D), dk = dS^T q / sqrt(D), dv = P^T dy (dk and dv summed over the query heads of
// their group).
inline AttentionRef attention_reference(const std::vector<double>& qkv, const std::vector<double>& dy, int64_t B,
                                        int64_t T, int64_t H, int64_t D, int64_t Hkv = 0) {
  using Vec = std::vector<double>;
  if (Hkv == 0) Hkv = H;
  const int64_t C = H * D, W = (H + 2 * Hkv) * D, rep = H / Hkv;
  const double sc = 1.0 / std::sqrt(double(D));
  AttentionRef r{Vec(size_t(B * T * C)), Vec(size_t(B * H * T * T)), Vec(size_t(B * T * W)), Vec(size_t(B * H * T))};
  auto x = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) -> size_t {
    const int64_t col = part == 0 ? h * D : (H + (part - 1) * Hkv + h / rep) * D;
    return size_t(b * T * W + t * W + col + d);
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
        r.lse[size_t((b * H + h) * T + i)] = mx + std::log(z);
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

/// Every element of `got` within tol * (1 + |want|) of `want`.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  const std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], tol * (1 + std::abs(want[i]))) << what << ", element " << i;
}

}  // namespace strata::testing
