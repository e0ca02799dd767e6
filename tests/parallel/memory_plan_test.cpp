// The per-rank memory planner against hand-computed numbers: the four ZeRO stages, shard
// padding per flat unit, element size and optimizer state count, and bad inputs.
#include <strata/parallel/memory_plan.h>

#include <gtest/gtest.h>

#include <strata/core/error.h>

namespace strata::parallel {
namespace {

MemoryPlan plan(int stage, int world, int64_t psi = 1000, int states = 2, int64_t b = 4, int64_t buckets = 0,
                std::vector<int64_t> units = {}) {
  return plan_memory({.param_elements = psi,
                      .bytes_per_element = b,
                      .optimizer_states = states,
                      .world_size = world,
                      .zero_stage = stage,
                      .ddp_bucket_bytes = buckets,
                      .flat_units = std::move(units)});
}

void expect_plan(const MemoryPlan& p, int64_t params, int64_t grads, int64_t opt, int64_t comm) {
  EXPECT_EQ(p.params, params);
  EXPECT_EQ(p.grads, grads);
  EXPECT_EQ(p.optimizer, opt);
  EXPECT_EQ(p.comm, comm);
  EXPECT_EQ(p.total(), params + grads + opt + comm);
}

TEST(MemoryPlan, ShardPadding) {
  EXPECT_EQ(shard_elements(1000, 3), 334);  // padded to 1002
  EXPECT_EQ(shard_elements(1000, 4), 250);
  EXPECT_EQ(shard_elements(1, 8), 1);
  EXPECT_EQ(shard_elements(0, 8), 0);
  EXPECT_EQ(shard_elements(7, 1), 7);
  const std::vector<int64_t> units = {10, 990};
  EXPECT_EQ(sharded_elements(units, 4), 3 + 248);  // each unit padded on its own
}

// Ψ = 1000 f32 with Adam on 3 ranks; one shard holds ceil(1000/3) = 334 elements.
TEST(MemoryPlan, AdamStagesOnThreeRanks) {
  expect_plan(plan(0, 3, 1000, 2, 4, /*buckets=*/4000), 4000, 4000, 8000, 4000);  // 20Ψ
  expect_plan(plan(0, 3), 4000, 4000, 8000, 0);                                  // bucket views: 16Ψ
  expect_plan(plan(1, 3), 4000, 4000, 2 * 4 * 334, 0);
  expect_plan(plan(2, 3), 4000, 4 * 334, 2 * 4 * 334, 0);
  expect_plan(plan(3, 3), 4 * 334, 4 * 334, 2 * 4 * 334, 0);
  // Buckets belong to DDP only.
  EXPECT_EQ(plan(1, 3, 1000, 2, 4, 4000).comm, 0);
}

// Ψ divisible by N: the paper's numbers exactly (4Ψ + 4Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N).
TEST(MemoryPlan, MatchesZeroPaperWhenDivisible) {
  const int64_t psi = 1 << 20;
  const int n = 8;
  EXPECT_EQ(plan(0, n, psi).total(), 16 * psi);
  EXPECT_EQ(plan(1, n, psi).total(), 8 * psi + 8 * psi / n);
  EXPECT_EQ(plan(2, n, psi).total(), 4 * psi + 12 * psi / n);
  EXPECT_EQ(plan(3, n, psi).total(), 16 * psi / n);
}

TEST(MemoryPlan, OneRankShardsNothing) {
  for (int stage = 0; stage <= 3; ++stage) expect_plan(plan(stage, 1, 999), 3996, 3996, 7992, 0);
}

TEST(MemoryPlan, OptimizerStatesAndElementSize) {
  EXPECT_EQ(optimizer_state_count("adam"), 2);
  EXPECT_EQ(optimizer_state_count("adamw"), 2);
  EXPECT_EQ(optimizer_state_count("sgd", 0.9), 1);
  EXPECT_EQ(optimizer_state_count("sgd", 0.0), 0);
  EXPECT_THROW(optimizer_state_count("lamb"), Error);
  // SGD with momentum, bf16 (2 bytes), stage 2 on 4 ranks: 2·1000 + 2·250 + 1·2·250.
  expect_plan(plan(2, 4, 1000, 1, 2), 2000, 500, 500, 0);
  // Plain SGD keeps no state at any stage.
  EXPECT_EQ(plan(1, 4, 1000, 0).optimizer, 0);
}

TEST(MemoryPlan, FlatUnitsArePaddedSeparately) {
  // Units {10, 990} on 4 ranks: 3 + 248 = 251 elements per rank (one unit would give 250).
  expect_plan(plan(3, 4, 1000, 2, 4, 0, {10, 990}), 4 * 251, 4 * 251, 8 * 251, 0);
  expect_plan(plan(1, 4, 1000, 2, 4, 0, {10, 990}), 4000, 4000, 8 * 251, 0);
  // Stage 0 does not shard, whatever the units.
  expect_plan(plan(0, 4, 1000, 2, 4, 0, {10, 990}), 4000, 4000, 8000, 0);
}

TEST(MemoryPlan, BadInputsThrow) {
  EXPECT_THROW(plan(4, 2), Error);
  EXPECT_THROW(plan(-1, 2), Error);
  EXPECT_THROW(plan(1, 0), Error);
  EXPECT_THROW(plan(1, 2, -5), Error);
  EXPECT_THROW(plan(1, 2, 1000, 2, 4, 0, {10, 989}), Error);  // units must sum to Ψ
  EXPECT_THROW(plan(0, 2, 1000, 2, 0), Error);                 // element size 0
}

}  // namespace
}  // namespace strata::parallel
