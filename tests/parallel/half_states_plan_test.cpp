// The planner's 16-bit model states regime (bf16 params and grads, f32 masters and Adam
// moments, K = 12): the ZeRO paper's formulas exactly, and its Table 1 (Ψ = 7.5B, N = 64).
#include <gtest/gtest.h>

#include <strata/parallel/memory_plan.h>

using namespace strata;
using parallel::MemoryPlanInput;
using parallel::plan_memory;
using parallel::sixteen_bit_states;

namespace {

MemoryPlanInput input(int64_t psi, int n, int stage, int64_t buckets = 0) {
  MemoryPlanInput in;
  in.param_elements = psi;
  in.optimizer_states = 2;  // Adam
  in.world_size = n;
  in.zero_stage = stage;
  in.ddp_bucket_bytes = buckets;
  return sixteen_bit_states(in);
}

TEST(SixteenBitPlan, FormulasInPsiMultiples) {
  const int64_t psi = 64 * 1000;  // divides by every N below: no padding
  // DDP: 2 + 2 + 12 = 16Ψ, 18Ψ with 16-bit buckets (one bf16 copy of the grads)
  EXPECT_EQ(plan_memory(input(psi, 4, 0)).total(), 16 * psi);
  const auto ddp = plan_memory(input(psi, 4, 0, 2 * psi));
  EXPECT_EQ(ddp.total(), 18 * psi);
  EXPECT_EQ(ddp.params, 2 * psi);
  EXPECT_EQ(ddp.grads, 2 * psi);
  EXPECT_EQ(ddp.optimizer, 12 * psi);  // 4 master + 8 moments
  EXPECT_EQ(ddp.comm, 2 * psi);
  for (int n : {1, 2, 4, 8, 64}) {
    const auto z1 = plan_memory(input(psi, n, 1));
    EXPECT_EQ(z1.params + z1.grads, 4 * psi);
    EXPECT_EQ(z1.optimizer, 12 * psi / n);
    const auto z2 = plan_memory(input(psi, n, 2));
    EXPECT_EQ(z2.total(), 2 * psi + 14 * psi / n);
    const auto z3 = plan_memory(input(psi, n, 3));
    EXPECT_EQ(z3.total(), 16 * psi / n);
  }
}

TEST(SixteenBitPlan, ZeroPaperTable1) {
  // ZeRO (Rajbhandari et al. 2020), Table 1: 7.5B parameters, 64 GPUs, GB = 1e9 bytes
  const int64_t psi = 7'500'000'000;
  const auto gb = [&](int stage) { return double(plan_memory(input(psi, 64, stage)).total()) / 1e9; };
  EXPECT_DOUBLE_EQ(gb(0), 120.0);
  EXPECT_NEAR(gb(1), 31.4, 0.05);  // 31.40625
  EXPECT_NEAR(gb(2), 16.6, 0.05);  // 16.640625
  EXPECT_NEAR(gb(3), 1.9, 0.05);   // 1.875
  EXPECT_EQ(plan_memory(input(psi, 64, 1)).total(), 31'406'250'000);
  EXPECT_EQ(plan_memory(input(psi, 64, 2)).total(), 16'640'625'000);
  EXPECT_EQ(plan_memory(input(psi, 64, 3)).total(), 1'875'000'000);
}

TEST(SixteenBitPlan, F32PlanUnchanged) {
  MemoryPlanInput in;
  in.param_elements = 1000;
  in.world_size = 4;
  in.zero_stage = 1;
  EXPECT_EQ(plan_memory(in).total(), 8 * 1000 + 8 * 1000 / 4);
}

}  // namespace
