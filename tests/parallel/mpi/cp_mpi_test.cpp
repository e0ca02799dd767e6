// Context parallelism over the mpi backend (mpirun -np 2, 3, 4): the GPT at cp N (zigzag
// and plain), dp 2 x cp 2 and cp 2 x tp 2 at N = 4, each equal to one process, and the
// K/V bytes of one ring-attention layer counted by the mpi group against the formula.
#include <gtest/gtest.h>

#include "cp_harness.h"
#include "mpi_world.h"

namespace strata::testing::cp {
namespace {

TEST(ContextParallelMpi, GptAtCpN) {
  const int n = g_world->size();
  if (8 % (2 * n) != 0) GTEST_SKIP() << "the test GPT's block of 8 needs 2 x cp to divide it";
  check_on(*g_world, {.cp = n});
  check_on(*g_world, {.cp = n, .split = CpSplit::plain});
}

TEST(ContextParallelMpi, Dp2Cp2AndCp2Tp2) {
  if (g_world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_on(*g_world, {.dp = 2, .cp = 2});
  check_on(*g_world, {.cp = 2, .tp = 2, .f64 = false});
}

TEST(ContextParallelMpi, KvBytesMatchTheFormula) {
  const std::shared_ptr<comm::ProcessGroup> g = g_world;
  const int n = g->size();
  const int64_t B = 2, T = 24, C = 8;
  Generator gen(3);
  Tensor x = cp_shard(ops::normal({B, T, 3 * C}, 0.0, 1.0, gen), n, g->rank(), CpSplit::zigzag);
  x.set_requires_grad(true);
  const CpLayerBytes want = cp_layer_bytes(B, T, C, n, 4);
  g->reset_stats();
  Tensor y = ring_attention(x, 4, g, CpSplit::zigzag);
  EXPECT_EQ(g->stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward);
  backward(sum(y));
  EXPECT_EQ(g->stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward + want.backward);
}

}  // namespace
}  // namespace strata::testing::cp
