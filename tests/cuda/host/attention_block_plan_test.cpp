// The launch plan and index math of the CUDA blockwise attention (tensor/cuda/
// attention_block_plan.h), on the host: the keys a query row sees and the rows that see
// a key agree with the causal rule on global positions, the plan's rows and emptiness
// agree with the CPU kernel, the grids cover every warp, and the dropout multiplier of
// each (b, h, query, key) is the mask ops::dropout draws for the whole (B, H, T, T) tensor.
#include <strata/tensor/cuda/attention_block_plan.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <strata/core/rng.h>
#include <strata/tensor/attention_block.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

// Every (Lq, Lk, q_pos, k_pos) of a small grid: blocks below, on and above the diagonal,
// wholly masked ones included.
template <class F>
void for_each_block(F&& f) {
  for (int64_t lq : {1, 2, 5, 8})
    for (int64_t lk : {1, 3, 8})
      for (int64_t q_pos : {0, 3, 8, 16})
        for (int64_t k_pos : {0, 3, 5, 8, 16, 30}) f(lq, lk, q_pos, k_pos);
}

std::string where(int64_t lq, int64_t lk, int64_t q_pos, int64_t k_pos) {
  return "Lq " + std::to_string(lq) + " Lk " + std::to_string(lk) + " q_pos " + std::to_string(q_pos) + " k_pos " +
         std::to_string(k_pos);
}

TEST(CudaAttentionBlockPlan, VisibilityIsTheCausalRuleOnGlobalPositions) {
  for_each_block([](int64_t lq, int64_t lk, int64_t q_pos, int64_t k_pos) {
    const std::string w = where(lq, lk, q_pos, k_pos);
    for (int64_t i = 0; i < lq; ++i) {
      int64_t seen = 0;  // keys j with global key <= global query form a prefix [0, m)
      for (int64_t j = 0; j < lk; ++j) seen += k_pos + j <= q_pos + i;
      EXPECT_EQ(cuda::block_visible_keys(i, q_pos, k_pos, lk), seen) << w << " row " << i;
    }
    for (int64_t j = 0; j < lk; ++j) {
      const int64_t first = cuda::block_first_query(j, q_pos, k_pos);
      for (int64_t i = 0; i < lq; ++i)
        EXPECT_EQ(i >= first, j < cuda::block_visible_keys(i, q_pos, k_pos, lk)) << w << " row " << i << " key " << j;
    }
  });
}

TEST(CudaAttentionBlockPlan, RowsAndEmptinessAgreeWithTheCpuKernel) {
  const int64_t B = 2, H = 3, hd = 4;
  for_each_block([&](int64_t lq, int64_t lk, int64_t q_pos, int64_t k_pos) {
    const std::string w = where(lq, lk, q_pos, k_pos);
    const cuda::AttentionBlockPlan p = cuda::attention_block_plan(B, H, lq, lk, q_pos, k_pos);
    int64_t first_row = lq;  // the first row that sees any key
    for (int64_t i = lq - 1; i >= 0; --i)
      if (cuda::block_visible_keys(i, q_pos, k_pos, lk) > 0) first_row = i;
    EXPECT_EQ(p.empty, first_row == lq) << w;
    EXPECT_EQ(p.delta_warps, B * H * lq) << w;
    if (!p.empty) {
      EXPECT_EQ(p.i0, first_row) << w;
      EXPECT_EQ(p.rows, lq - first_row) << w;
      EXPECT_EQ(p.query_warps, B * H * p.rows) << w;
      EXPECT_EQ(p.key_warps, B * H * lk) << w;
    }
    // The CPU kernel computes exactly the non-empty blocks (it returns false otherwise).
    Generator gen(uint64_t(lq * 1000 + lk * 100 + q_pos * 10 + k_pos));
    const Tensor q = ops::normal({B, lq, H * hd}, 0, 1, gen), k = ops::normal({B, lk, H * hd}, 0, 1, gen),
                 v = ops::normal({B, lk, H * hd}, 0, 1, gen);
    Tensor out = ops::zeros({B, lq, H * hd}), lse = ops::full({B, H, lq}, -INFINITY);
    EXPECT_EQ(ops::attention_block_forward(q, k, v, q_pos, k_pos, hd, out, lse), !p.empty) << w;
    // Rows before i0 are left alone (lse stays -inf), rows from i0 on are merged.
    const auto l = lse.to_vector<float>();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < lq; ++i)
        EXPECT_EQ(std::isinf(l[size_t(bh * lq + i)]), p.empty || i < p.i0) << w << " row " << i;
  });
  const cuda::AttentionBlockPlan none = cuda::attention_block_plan(0, 2, 4, 4, 0, 0);
  EXPECT_TRUE(none.empty);
  EXPECT_EQ(none.delta_warps, 0);
}

TEST(CudaAttentionBlockPlan, GridsCoverEveryWarpWithTheFewestBlocks) {
  for (int64_t warps : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(4096), int64_t(100001)})
    for (int per : {1, 4, 8}) {
      const int64_t blocks = cuda::attention_block_grid(warps, per);
      EXPECT_GE(blocks, 1);
      EXPECT_GE(blocks * per, warps) << warps << " warps, " << per << " per block";
      if (warps > 0) {
        EXPECT_LT((blocks - 1) * per, warps) << warps << " warps, " << per << " per block";
      }
    }
}

TEST(CudaAttentionBlockPlan, DropoutMaskIsTheWholeTensorsOpsDropoutMask) {
  const int64_t B = 2, H = 3, T = 10;
  for (double p : {0.1, 0.5}) {
    Generator gen(99);
    gen.reserve(13);  // a base that is not a multiple of 4 elements' counters
    const AttentionDropout drop{.p = p, .seed = 99, .base = gen.offset(), .seq = T};
    const auto [y, mask] = ops::dropout(ops::ones({B, H, T, T}), p, gen);
    const auto m = mask.to_vector<uint8_t>();
    const cuda::BlockDropout d = cuda::block_dropout_of(drop);
    EXPECT_TRUE(d.on);
    EXPECT_DOUBLE_EQ(d.keep, 1.0 / (1.0 - p));
    int64_t kept = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) {
            const uint64_t e = cuda::block_dropout_element(d, b, H, h, i, j);
            ASSERT_EQ(e, uint64_t(((b * H + h) * T + i) * T + j));
            const bool keep = cuda::block_dropout_kept(d, e);
            ASSERT_EQ(keep, m[size_t(e)] != 0) << "p " << p << " (" << b << ", " << h << ", " << i << ", " << j << ")";
            kept += keep;
          }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, B * H * T * T);
  }
  EXPECT_FALSE(cuda::block_dropout_of(AttentionDropout{}).on);
}

}  // namespace
}  // namespace strata
