// Tensor parallelism over the mpi backend (mpirun -np 2, 3, 4): the MLP at tp = N, the
// GPT at dp N/2 x tp 2 (vocabulary-parallel, with and without sequence parallelism), and
// dp 2 x tp 2 with ZeRO-1 at N = 4, each equal to one process.
#include <gtest/gtest.h>

#include "tp_harness.h"
#include "mpi_world.h"

namespace strata::testing::tp {
namespace {

TEST(TensorParallelMpi, MlpAtTpN) {
  const int n = g_world->size();
  check_on(*g_world, {.model = "mlp", .dp = 1, .tp = n});
}

TEST(TensorParallelMpi, GptWithDdpOverTheRest) {
  const int n = g_world->size();
  if (n % 2 != 0) GTEST_SKIP() << "the test GPT's 4 heads need an even tp";
  check_on(*g_world, {.model = "gpt", .dp = n / 2, .tp = 2});
  check_on(*g_world, {.model = "gpt_untied", .sp = true, .dp = n / 2, .tp = 2});
}

TEST(TensorParallelMpi, Dp2Tp2Zero1) {
  if (g_world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_on(*g_world, {.model = "gpt", .dp = 2, .tp = 2, .stage = 1});
}

}  // namespace
}  // namespace strata::testing::tp
