// 3D parallelism over the mpi backend (ctest parallel_mpi_np8_3d: mpirun -np 8, one
// compute thread per rank): dp 2 x tp 2 x pp 2 with ZeRO-1 and 1F1B, and dp 1 x tp 4 x
// pp 2 with sequence parallelism, and the Llama at dp 2 x tp 2 x pp 2 with sequence
// parallelism, each equal to one process (losses, clipped norms and
// every rank's parameter shards). Skipped at other world sizes.
#include <gtest/gtest.h>

#include "mpi_world.h"
#include "threed_harness.h"

namespace strata::testing::threed {
namespace {

void check_mpi(const Case& c) {
  if (g_world->size() != c.world()) GTEST_SKIP() << "needs " << c.world() << " ranks";
  const Run want = reference(c);
  auto pm = build(g_world, c);
  const Run got = train(*pm, c);
  const std::string what = c.str() + " rank " + std::to_string(g_world->rank());
  expect_match(got.params, want.params, pm->tp(), 1e-5, what);
  expect_losses(got, want, c, 1e-5, what);
}

TEST(ThreeDMpi, Dp2Tp2Pp2Zero1OneF1B) { check_mpi({.dp = 2, .tp = 2, .pp = 2, .zero = 1, .m = 2, .clip = 0.05}); }

// The Llama (4 query heads on 2 key/value heads, untied head) across 8 processes: dp 2 x
// tp 2 x pp 2, ZeRO-1, sequence parallelism (its RMSNorms on sequence shards).
TEST(ThreeDMpi, LlamaDp2Tp2Pp2SequenceParallelZero1) {
  check_mpi({.family = "llama", .dp = 2, .tp = 2, .pp = 2, .zero = 1, .sp = true, .m = 2, .tied = false, .clip = 0.05});
}

TEST(ThreeDMpi, Tp4Pp2SequenceParallel) {
  check_mpi({.dp = 1, .tp = 4, .pp = 2, .zero = 0, .sp = true, .m = 4, .clip = 0.05});
}

}  // namespace
}  // namespace strata::testing::threed
