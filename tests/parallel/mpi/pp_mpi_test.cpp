// Pipeline parallelism over the mpi backend (mpirun -np 2, 3, 4): 1F1B and interleaved at
// pp = N and dp 2 x pp 2 with ZeRO-1 at N = 4, each equal to one process; and stage 0's
// activation bytes (this process's allocator) under GPipe (m micro-batches) and 1F1B (pp).
#include <gtest/gtest.h>

#include <strata/core/memory.h>
#include "mpi_world.h"
#include "pipeline_harness.h"

namespace strata::testing {
namespace {

void check_mpi(const PpCase& c) { pp_check_on(g_world, c, 1e-5); }

TEST(PipelineMpi, OneF1BAtPpN) {
  const int n = g_world->size();
  check_mpi({.kind = parallel::ScheduleKind::one_f_one_b, .pp = n, .m = 2 * n + 1});
}

TEST(PipelineMpi, InterleavedAtPpN) {
  const int n = g_world->size();
  check_mpi({.kind = parallel::ScheduleKind::interleaved, .pp = n, .m = n, .v = 2, .clip = 0.05});
}

TEST(PipelineMpi, ZeroBubbleAtPpN) {
  const int n = g_world->size();
  check_mpi({.kind = parallel::ScheduleKind::zb_h1, .pp = n, .m = 2 * n + 1});
}

TEST(PipelineMpi, Dp2Pp2Zero1) {
  if (g_world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_mpi({.kind = parallel::ScheduleKind::gpipe, .pp = 2, .m = 3, .dp = 2, .zero_stage = 1});
}

// Stage 0's peak activation bytes during one step above what was live before it.
int64_t stage0_activation_peak(parallel::ScheduleKind kind, int m) {
  const int n = g_world->size();
  const PpCase c{.kind = kind, .pp = n, .m = m, .steps = 1, .per_mb = 4};
  auto pm = pp_parallelize(g_world, c, pp_gpt(c));
  auto [x, y] = pp_batch(c, 0, 0);
  const int64_t before = cpu_memory().stats(MemCategory::activations).current;
  cpu_memory().reset_peaks();
  pm->forward_backward({x, y});
  const int64_t peak = cpu_memory().stats(MemCategory::activations).peak - before;
  pm->zero_grad();
  return peak;
}

TEST(PipelineMpi, ActivationBytesOnStageZero) {
  const int n = g_world->size();
  const int m = 2 * n + 2;
  // One micro-batch's peak holds its kept activations plus the step's transients; the
  // kept bytes of one micro-batch are what a second one adds.
  const int64_t one = stage0_activation_peak(parallel::ScheduleKind::gpipe, 1);
  const int64_t per_mb = stage0_activation_peak(parallel::ScheduleKind::gpipe, 2) - one;
  const int64_t gpipe = stage0_activation_peak(parallel::ScheduleKind::gpipe, m);
  const int64_t ofob = stage0_activation_peak(parallel::ScheduleKind::one_f_one_b, m);
  const int64_t zb = stage0_activation_peak(parallel::ScheduleKind::zb_h1, m);
  if (g_world->rank() != 0) return;
  ASSERT_GT(per_mb, 0);
  // GPipe keeps all m micro-batches alive, 1F1B at most pp = n (within one micro-batch).
  EXPECT_NEAR(double(gpipe - one), double(m - 1) * double(per_mb), double(per_mb)) << "one micro-batch: " << per_mb;
  EXPECT_NEAR(double(ofob - one), double(n - 1) * double(per_mb), double(per_mb)) << "one micro-batch: " << per_mb;
  EXPECT_LT(ofob, gpipe);
  // ZB-H1 keeps 1F1B's in-flight micro-batches; on stage 0 each W follows its B at once, so
  // the deferred weight-gradient inputs add less than one micro-batch.
  EXPECT_NEAR(double(zb), double(ofob), double(per_mb)) << "one micro-batch: " << per_mb;
}

}  // namespace
}  // namespace strata::testing
