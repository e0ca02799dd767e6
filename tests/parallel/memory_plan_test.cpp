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

// Expert parallelism: Ψ_dense = 1000 and X = 4096 expert elements (every expert of every
// MoE layer), f32 Adam on dp 4. At ep 1 the experts are ordinary parameters (ZeRO shards
// them); at ep e a rank holds X/e of them whole (params, grads and K = 8 bytes of state),
// beside the dense part that ZeRO shards as before.
TEST(MemoryPlan, ExpertsPerRankAtEp124) {
  const int64_t dense = 1000, experts = 4096;
  const auto at = [&](int ep, int stage) {
    MemoryPlanInput in;
    in.world_size = 4;
    in.zero_stage = stage;
    in.expert_elements = ep_rank_expert_elements(experts, ep);
    in.param_elements = dense + (ep > 1 ? in.expert_elements : experts);
    return plan_memory(in);
  };
  EXPECT_EQ(ep_rank_expert_elements(experts, 1), 0);
  EXPECT_EQ(ep_rank_expert_elements(experts, 2), 2048);
  EXPECT_EQ(ep_rank_expert_elements(experts, 4), 1024);
  // ep 1, ZeRO-1: everything sharded alike, ceil(5096/4) = 1274 per rank.
  expect_plan(at(1, 1), 4 * 5096, 4 * 5096, 8 * 1274, 0);
  // ep 2 / 4, ZeRO-1: the dense optimizer state sharded (250), the experts' whole.
  expect_plan(at(2, 1), 4 * (1000 + 2048), 4 * (1000 + 2048), 8 * (250 + 2048), 0);
  expect_plan(at(4, 1), 4 * (1000 + 1024), 4 * (1000 + 1024), 8 * (250 + 1024), 0);
  // ZeRO-3 shards the dense part only.
  expect_plan(at(2, 3), 4 * (250 + 2048), 4 * (250 + 2048), 8 * (250 + 2048), 0);
  // DDP: nothing sharded; every layout holds its experts / ep.
  expect_plan(at(4, 0), 4 * 2024, 4 * 2024, 8 * 2024, 0);
  // The expert bytes per rank halve from ep 2 to ep 4: 16 bytes per element (f32 Adam).
  EXPECT_EQ(at(2, 1).total() - at(4, 1).total(), 16 * (2048 - 1024));
  // Flat units sum to the dense part only.
  MemoryPlanInput in;
  in.param_elements = dense + 2048;
  in.world_size = 4;
  in.zero_stage = 1;
  in.flat_units = {400, 600};
  in.expert_elements = 2048;
  EXPECT_EQ(dense_rank_elements(in), 1000);
  EXPECT_EQ(plan_memory(in).optimizer, 8 * (100 + 150 + 2048));
  in.flat_units = {400, 600, 2048};
  EXPECT_THROW(plan_memory(in), Error);
  EXPECT_THROW(ep_rank_expert_elements(4096, 3), Error);  // ep must divide the experts' elements
  in.expert_elements = dense + 2049;
  EXPECT_THROW(dense_rank_elements(in), Error);
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
