// The blockwise attention ops (tensor/attention_block.h) against the fused causal
// attention: keys merged block by block give the same output and gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <strata/tensor/attention_block.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return ops::normal(s, 0.0, 1.0, g, DType::f64);
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], tol * (1.0 + std::abs(vb[i]))) << what << " element " << i;
}

// Keys merged block by block, in a scrambled order, with the query rows in two
// segments: the merged output equals full causal attention, and a wholly masked block
// (keys after every query) is skipped.
TEST(AttentionBlock, MergedBlocksEqualFullCausalAttention) {
  const int64_t B = 2, T = 12, H = 2, hd = 4, C = H * hd;
  const Tensor qkv = rnd({B, T, 3 * C}, 1), w = rnd({B, T, C}, 2);
  const auto [y_ref, probs] = ops::causal_attention(qkv, hd);
  const Tensor g_ref = ops::causal_attention_backward(w, qkv, probs, hd);
  const Tensor q = ops::narrow(qkv, 2, 0, C), k = ops::narrow(qkv, 2, C, C), v = ops::narrow(qkv, 2, 2 * C, C);
  Tensor out = ops::zeros({B, T, C}, DType::f64);
  std::vector<Tensor> lse;
  const std::vector<std::pair<int64_t, int64_t>> qsegs{{0, 5}, {5, 7}}, ksegs{{8, 4}, {0, 3}, {3, 5}};
  for (const auto& [qs, ql] : qsegs) {
    lse.push_back(ops::full({B, H, ql}, -std::numeric_limits<double>::infinity(), DType::f64));
    Tensor o = ops::narrow(out, 1, qs, ql);
    for (const auto& [ks, kl] : ksegs) {
      const bool ran = ops::attention_block_forward(ops::narrow(q, 1, qs, ql), ops::narrow(k, 1, ks, kl),
                                                    ops::narrow(v, 1, ks, kl), qs, ks, hd, o, lse.back());
      EXPECT_EQ(ran, ks <= qs + ql - 1) << "q " << qs << " k " << ks;
    }
  }
  expect_close(out, y_ref, 1e-12, "merged forward");
  // Backward block by block, from the final lse and delta.
  Tensor dq = ops::zeros({B, T, C}, DType::f64), dk = ops::zeros({B, T, C}, DType::f64), dv = ops::zeros({B, T, C}, DType::f64);
  for (size_t i = 0; i < qsegs.size(); ++i) {
    const auto [qs, ql] = qsegs[i];
    Tensor delta = ops::empty({B, H, ql}, DType::f64);
    ops::attention_block_delta(ops::narrow(w, 1, qs, ql), ops::narrow(out, 1, qs, ql), hd, delta);
    Tensor dqs = ops::narrow(dq, 1, qs, ql);
    for (const auto& [ks, kl] : ksegs) {
      Tensor dks = ops::narrow(dk, 1, ks, kl), dvs = ops::narrow(dv, 1, ks, kl);
      ops::attention_block_backward(ops::narrow(q, 1, qs, ql), ops::narrow(k, 1, ks, kl), ops::narrow(v, 1, ks, kl),
                                    ops::narrow(w, 1, qs, ql), lse[i], delta, qs, ks, hd, dqs, dks, dvs);
    }
  }
  expect_close(ops::cat({dq, dk, dv}, 2), g_ref, 1e-12, "merged backward");
}

}  // namespace
}  // namespace strata
