// The planner's 16-bit model states regime (bf16 params and grads, f32 masters and Adam
// moments, K = 12): the ZeRO paper's formulas exactly, and its Table 1 (Ψ = 7.5B, N = 64).
#include <gtest/gtest.h>

#include <strata/core/error.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/data/zero_schedule.h>

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

namespace {

// The backward-peak replay on hand-made schedules, worked by hand (one rank, B = 2).
parallel::ZeroBackwardSchedule schedule(std::vector<std::vector<int>> params, std::vector<int64_t> numels_by_param,
                                        std::vector<int> launch_order, int depth) {
  parallel::ZeroBackwardSchedule z;
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<int64_t> ns;
    for (int p : params[k]) ns.push_back(numels_by_param[size_t(p)]);
    z.units.push_back(parallel::make_flat_unit("unit", params[k], ns, 1));
  }
  z.launch_order = std::move(launch_order);
  z.reduce_scatter_depth = depth;
  return z;
}

// Stage 2: parameters 0..3 of 10, 20, 30, 40 elements; units in backward order {3},
// {2, 1}, {0}. Gradient slices 200 B. With L = 2 the peak is at unit 1's launch: its
// .grads (100 B) + unit 0's staging (80 B, still being sent) + its own staging (100 B);
// with L = 1 unit 0's staging is freed first: 200 + 100 + 100.
TEST(SixteenBitPlan, BackwardPeakStage2Windows) {
  const std::vector<int64_t> numels{10, 20, 30, 40};
  MemoryPlanInput in = input(100, 1, 2);
  const auto z2 = schedule({{3}, {2, 1}, {0}}, numels, {0, 1, 2}, 2);
  in.flat_units = {40, 50, 10};
  EXPECT_EQ(parallel::plan_backward_peak(in, z2).grads, 200 + 100 + 80 + 100);
  EXPECT_EQ(parallel::plan_backward_peak(in, schedule({{3}, {2, 1}, {0}}, numels, {0, 1, 2}, 1)).grads,
            200 + 100 + 100);
  EXPECT_EQ(parallel::plan_backward_peak(in, z2).comm, 0);
  EXPECT_EQ(parallel::plan_backward_peak(in, z2).optimizer, plan_memory(in).optimizer);
  EXPECT_THROW(parallel::plan_backward_peak(in), Error) << "stage 2 needs its schedule";
}

// Stage 3: root {0 (10 elements, the embedding), 5 (4, ln_f)}, wrapped units {1, 2} and
// {3, 4} (20 + 20, 30 + 30), launched 2, 1, root. Gathered (comm): the root (28 B), unit 2
// (120 B) prefetched when backward starts and unit 1 (80 B) when backward reaches unit 2.
// Gradients at L = 2: slices 228 B + ln_f's .grad 8 B (it waits for the root's launch)
// + unit 1's .grads 80 B + the stagings of units 2 and 1 (120 + 80 B).
TEST(SixteenBitPlan, BackwardPeakStage3RootAndPrefetch) {
  const std::vector<int64_t> numels{10, 20, 20, 30, 30, 4};
  MemoryPlanInput in = input(114, 1, 3);
  in.flat_units = {14, 40, 60};
  const auto p = parallel::plan_backward_peak(in, schedule({{0, 5}, {1, 2}, {3, 4}}, numels, {2, 1, 0}, 2));
  EXPECT_EQ(p.comm, 28 + 120 + 80);
  EXPECT_EQ(p.grads, 228 + 8 + 80 + 120 + 80);
  EXPECT_EQ(p.params, 228);
  auto no_prefetch = schedule({{0, 5}, {1, 2}, {3, 4}}, numels, {2, 1, 0}, 2);
  no_prefetch.prefetch = false;
  EXPECT_EQ(parallel::plan_backward_peak(in, no_prefetch).comm, 28 + 120);
}

}  // namespace
