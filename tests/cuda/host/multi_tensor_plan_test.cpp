// The multi-tensor launch plan (tensor/multi_tensor_plan.h), on the host: every element of
// every tensor is covered exactly once, the per-launch limits hold, and a model's
// parameter list fits in a few launches.
#include <gtest/gtest.h>

#include <map>

#include <strata/tensor/multi_tensor_plan.h>

namespace strata {
namespace {

using detail::plan_multi_tensor;

// Checks the plan against the limits and returns, per tensor, how many times each chunk
// was assigned (every chunk must appear exactly once).
void expect_covers_once(const std::vector<int64_t>& numels, int max_tensors, int max_blocks, int64_t chunk) {
  const auto plan = plan_multi_tensor(numels, max_tensors, max_blocks, chunk);
  std::map<std::pair<int, int64_t>, int> seen;
  for (const auto& l : plan) {
    ASSERT_FALSE(l.blocks.empty());
    ASSERT_LE(int(l.tensors.size()), max_tensors);
    ASSERT_LE(int(l.blocks.size()), max_blocks);
    for (const auto& b : l.blocks) {
      ASSERT_GE(b.slot, 0);
      ASSERT_LT(b.slot, int(l.tensors.size()));
      const int t = l.tensors[size_t(b.slot)];
      ASSERT_GE(b.chunk, 0);
      ASSERT_LT(b.chunk * chunk, numels[size_t(t)]) << "chunk past the end of tensor " << t;
      ++seen[{t, b.chunk}];
    }
  }
  for (size_t t = 0; t < numels.size(); ++t)
    for (int64_t c = 0; c * chunk < numels[t]; ++c)
      EXPECT_EQ((seen[{int(t), c}]), 1) << "tensor " << t << " chunk " << c;
  EXPECT_EQ(detail::multi_tensor_blocks(plan), int64_t(seen.size()));
}

TEST(MultiTensorPlan, CoversEveryChunkOnceWithinTheLimits) {
  expect_covers_once({1, 5, 0, 7, 3}, 2, 3, 2);
  expect_covers_once({100}, 4, 3, 7);          // one tensor over several launches
  expect_covers_once({0, 0, 0}, 4, 4, 4);      // nothing to do
  expect_covers_once({9, 9, 9, 9, 9}, 1, 100, 4);  // one tensor per launch
  std::vector<int64_t> many;
  for (int i = 0; i < 300; ++i) many.push_back(1 + (i * 7919) % 200000);
  expect_covers_once(many, 36, 320, 65536);
  expect_covers_once(many, 110, 320, 65536);
}

TEST(MultiTensorPlan, EmptyTensorsAndEmptyListsGiveNoLaunch) {
  EXPECT_TRUE(plan_multi_tensor(std::vector<int64_t>{}, 4, 4, 4).empty());
  EXPECT_TRUE(plan_multi_tensor(std::vector<int64_t>{0, 0}, 4, 4, 4).empty());
  const auto p = plan_multi_tensor(std::vector<int64_t>{0, 3, 0}, 4, 4, 4);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].tensors, std::vector<int>{1});
}

TEST(MultiTensorPlan, ATensorSplitAcrossLaunchesResumesAtItsNextChunk) {
  // 10 chunks of one tensor, 4 blocks a launch: chunks 0-3, 4-7, 8-9, the tensor in slot 0 each time.
  const auto p = plan_multi_tensor(std::vector<int64_t>{40}, 8, 4, 4);
  ASSERT_EQ(p.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(p[l].tensors, std::vector<int>{0});
    for (size_t b = 0; b < p[l].blocks.size(); ++b) EXPECT_EQ(p[l].blocks[b].chunk, int64_t(l * 4 + b));
  }
  EXPECT_EQ(p[2].blocks.size(), 2u);
}

// GPT-2 124M's 148 parameter tensors (12 blocks of 12 tensors, the embeddings and final
// LayerNorm) in launches of the CUDA AdamW kernel (4 lists: 36 tensors, 320 blocks of
// 65536 elements each): the 124M parameters need ~1900 chunks, so ~6-8 launches, not 148.
TEST(MultiTensorPlan, Gpt2ParametersFitInAFewLaunches) {
  const int64_t C = 768, V = 50257, T = 1024;
  std::vector<int64_t> numels = {V * C, T * C};
  for (int l = 0; l < 12; ++l)
    for (int64_t n : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) numels.push_back(n);
  numels.push_back(C);
  numels.push_back(C);
  ASSERT_EQ(numels.size(), 148u);
  const auto plan = plan_multi_tensor(numels, 36, 320, 65536);
  EXPECT_LE(plan.size(), 8u);
  int64_t chunks = 0;
  for (int64_t n : numels) chunks += (n + 65535) / 65536;
  EXPECT_EQ(detail::multi_tensor_blocks(plan), chunks);
  std::printf("GPT-2 124M: 148 tensors, %lld chunks, %zu launches\n", (long long)chunks, plan.size());
}

TEST(MultiTensorPlan, RefusesNonPositiveLimits) {
  EXPECT_THROW(plan_multi_tensor(std::vector<int64_t>{1}, 0, 4, 4), Error);
  EXPECT_THROW(plan_multi_tensor(std::vector<int64_t>{-1}, 4, 4, 4), Error);
}

}  // namespace
}  // namespace strata
