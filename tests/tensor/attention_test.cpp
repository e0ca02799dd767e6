// ops::causal_attention and its backward against naive per-head loops in double (the
// q|k|v packing, the head layout, the causal mask and the 1/sqrt(hd) scale), against the
// composition that devices without a fused kernel run, at 1 and 2 threads, f32 and f64.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/core/threads.h>
#include <strata/tensor/attention_composed.h>
#include <strata/tensor/ops.h>
#include "tests/attention_reference.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using Vec = std::vector<double>;
using strata::testing::rnd;

using strata::testing::expect_close;
using strata::testing::attention_reference;
using strata::testing::AttentionRef;

using strata::testing::ThreadsGuard;

class CausalAttention : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Float, CausalAttention, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The fused kernel and the composition against the naive loops at 1 and 2 threads.
void check_against_naive(DType dt, int64_t T) {
  const double tol = dt == DType::f64 ? 1e-10 : 2e-5;
  const int64_t B = 3, H = 3, D = 5;
  const Tensor qkv = rnd({B, T, 3 * H * D}, dt, 1), dy = rnd({B, T, H * D}, dt, 2);
  const AttentionRef ref = attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  for (int threads : {1, 2}) {
    ThreadsGuard tg(threads);
    const std::string at = " at T=" + std::to_string(T) + ", " + std::to_string(threads) + " threads";
    auto [y, lse] = ops::causal_attention(qkv, D);
    EXPECT_EQ(y.shape(), (Shape{B, T, H * D}));
    EXPECT_EQ(lse.shape(), (Shape{B, H, T}));  // the rows' log-sum-exp, not the probabilities
    expect_close(y, ref.y, tol, "y" + at);
    expect_close(lse, ref.lse, tol, "lse" + at);
    expect_close(ops::causal_attention_backward(dy, qkv, lse, D), ref.dqkv, tol, "dqkv" + at);

    Tensor cy = ops::empty(y.shape(), dt), cp = ops::empty({B, H, T, T}, dt), cd = ops::empty(qkv.shape(), dt);
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
  const AttentionRef ref = attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  auto [y, lse] = ops::causal_attention(qkv, D);
  expect_close(y, ref.y, 2e-5, "y");
  expect_close(ops::causal_attention_backward(dy, qkv, lse, D), ref.dqkv, 2e-5, "dqkv");

  // T = 1: each position attends only to itself, so y is v and the grads of q, k vanish
  const Tensor one = rnd({2, 1, 3 * H * D}, DType::f32, 5);
  auto [y1, p1] = ops::causal_attention(one, D);
  expect_close(y1, ops::narrow(one, 2, 2 * H * D, H * D).to_vector<double>(), 1e-7, "T=1 y");
  // and each row's log-sum-exp is its one score, q.k / sqrt(D)
  const AttentionRef ref1 = attention_reference(one.to_vector<double>(), Vec(size_t(2 * H * D), 0.0), 2, 1, H, D);
  expect_close(p1, ref1.lse, 1e-6, "T=1 lse");

  EXPECT_THROW(ops::causal_attention(rnd({2, 4, 10}, DType::f32, 6), 2), Error);  // 10 is not 3*H*2
  EXPECT_THROW(ops::causal_attention(rnd({2, 4, 8}, DType::f32, 6), 2, 2), Error);   // 4 heads: none left for q
  EXPECT_THROW(ops::causal_attention(rnd({2, 4, 14}, DType::f32, 6), 2, 2), Error);  // 3 q heads over 2 kv
  EXPECT_THROW(ops::causal_attention(rnd({4, 18}, DType::f32, 7), 3), Error);     // not (B, T, W)
  EXPECT_THROW(ops::causal_attention_backward(rnd({B, T, H * D + 1}, DType::f32, 8), qkv, lse, D), Error);
  EXPECT_THROW(ops::causal_attention_backward(dy, qkv, ops::zeros({B, H, T, T}), D), Error);  // not the lse
}

// Grouped key/value heads on the paths without a grouped kernel (16 bits on the CPU, as
// on CUDA): the heads repeated, then the gradients summed back; against the f64 loop on
// the same rounded inputs, within bf16's rounding of the output.
TEST(CausalAttentionOp, GroupedHeadsIn16BitsRepeatThenSum) {
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, D = 8;
  const Tensor qkv = ops::to_dtype(rnd({B, T, (H + 2 * Hkv) * D}, DType::f32, 21), DType::bf16);
  const Tensor dy = ops::to_dtype(rnd({B, T, H * D}, DType::f32, 22), DType::bf16);
  const AttentionRef ref = attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D, Hkv);
  auto [y, probs] = ops::causal_attention(qkv, D, Hkv);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_close(y, ref.y, 2e-2, "y");
  const Tensor dqkv = ops::causal_attention_backward(dy, qkv, probs, D, Hkv);
  EXPECT_EQ(dqkv.shape(), qkv.shape());
  expect_close(dqkv, ref.dqkv, 3e-2, "dqkv");
}

}  // namespace
