// The CPU causal-attention kernels (tensor/cpu/attention.cpp: packed register tiles,
// the causal softmax fused into the row loop) against a plain f64 loop, forward (y, lse)
// and backward (d q|k|v), at every SIMD level this CPU runs, for sizes that are not
// multiples of any vector width or tile: T 1, 7, 33, 65 (rows that end before, inside and
// past a 16-wide column block, row blocks of 4 cut short) and 32 (whole vectors), head_dim
// 8, 24, 40 (part vectors) and 72
// (more than one column chunk of a tile), 1 and 3 heads; and grouped key/value heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <strata/tensor/cpu/simd_level.h>
#include "tests/simd_levels.h"
#include <strata/tensor/ops.h>
#include "tests/attention_reference.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::expect_close;
using strata::testing::attention_reference;
using strata::testing::AttentionRef;

using LevelGuard = strata::testing::SimdLevelGuard;

class AttentionKernel : public ::testing::TestWithParam<DType> {};

// The op's y, log-sum-exp and d(q|k|v) against the reference, within tol.
void expect_matches(const Tensor& qkv, const Tensor& dy, const AttentionRef& ref, int64_t D, int64_t kv_heads,
                    double tol, const std::string& at) {
  auto [y, lse] = ops::causal_attention(qkv, D, kv_heads);
  expect_close(y, ref.y, tol, "y" + at);
  expect_close(lse, ref.lse, tol, "lse" + at);
  expect_close(ops::causal_attention_backward(dy, qkv, lse, D, kv_heads), ref.dqkv, tol, "dqkv" + at);
}
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
        const AttentionRef ref = attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
        for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
          ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
          const std::string at = " at T " + std::to_string(T) + ", head_dim " + std::to_string(D) + ", " +
                                 std::to_string(H) + " heads, " + cpu::simd_level_name(lvl);
          expect_matches(qkv, dy, ref, D, 0, tol, at);
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
  const AttentionRef ref = attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D);
  for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
    ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
    const std::string at = std::string(" at ") + cpu::simd_level_name(lvl);
    expect_matches(qkv, dy, ref, D, 0, tol, at);
  }
}

// Grouped-query attention (kv_heads key/value heads, each read by H/kv_heads query heads
// in place): the f64 loop with dk, dv summed over each group, at every level, 1 and 2
// threads (the groups split over the threads, a group's heads on one).
TEST_P(AttentionKernel, GroupedKeyValueHeadsAtEveryLevelAndTwoThreads) {
  const DType dt = GetParam();
  // f32: dk and dv sum twice the rows (two query heads) of probabilities recomputed from
  // the log-sum-exp, so their small elements carry twice the rounding of the others'
  const double tol = dt == DType::f64 ? 1e-10 : 4e-5;
  LevelGuard guard;
  const int64_t B = 3;
  uint64_t seed = 40;
  for (const int threads : {1, 2}) {
    strata::testing::ThreadsGuard tg(threads);
    for (const int64_t T : {7, 33, 65})
      for (const int64_t D : {8, 40})
        for (const auto& [H, Hkv] : {std::pair<int64_t, int64_t>{2, 1}, {4, 2}, {6, 2}, {3, 3}}) {
          const Tensor qkv = strata::testing::rnd({B, T, (H + 2 * Hkv) * D}, dt, ++seed, 2.0);
          const Tensor dy = strata::testing::rnd({B, T, H * D}, dt, ++seed);
          const AttentionRef ref =
              attention_reference(qkv.to_vector<double>(), dy.to_vector<double>(), B, T, H, D, Hkv);
          for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
            ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
            const std::string at = " at T " + std::to_string(T) + ", head_dim " + std::to_string(D) + ", " +
                                   std::to_string(H) + " / " + std::to_string(Hkv) + " heads, " +
                                   std::to_string(threads) + " threads, " + cpu::simd_level_name(lvl);
            expect_matches(qkv, dy, ref, D, Hkv, tol, at);
          }
        }
  }
}

}  // namespace
