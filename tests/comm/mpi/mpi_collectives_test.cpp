// Multi-process tests of the mpi backend, run by ctest under
// `mpirun --oversubscribe -np N` (N = 2, 3, 4): every collective x algorithm x dtype x
// size against the sequential reference, batch_isend_irecv, sub-groups, DeviceMesh, byte
// counts and debug mode. All ranks run every test; the job fails if any rank fails.
#include <gtest/gtest.h>

#include "../collective_checks.h"
#include "../p2p_checks.h"
#include <strata/comm/device_mesh.h>
#include <strata/comm/mpi.h>
#include <strata/core/threads.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

std::shared_ptr<ProcessGroup> g_world;

CommOptions test_options() {
  CommOptions o;
  o.timeout_s = 30;
  o.chunk_bytes = 1024;
  o.small_message_bytes = 512;
  return o;
}

TEST(MpiCollectives, MatchSequentialReference) { check_all_collectives(*g_world); }

// batch_isend_irecv: small (eager) and 12 MiB (rendezvous) rings, and a mixed batch.
TEST(MpiBatchP2P, RingExchange) {
  check_ring_exchange(*g_world, 1000);
  check_ring_exchange(*g_world, int64_t(3) << 20);
}

TEST(MpiBatchP2P, MixedSizesDtypesTagsAndLayouts) { check_mixed_batch(*g_world); }

// The same, posted and progressed by the calling thread (set_inline_p2p).
TEST(MpiBatchP2P, InlineRingAndMixed) {
  ProcessGroup& g = *g_world;
  g.set_inline_p2p(true);
  check_ring_exchange(g, 1000);
  check_ring_exchange(g, int64_t(3) << 20);
  check_mixed_batch(g);
  g.set_inline_p2p(false);
}

// Every rank of an mpirun on one host counts them all, in the world and in a sub-group
// (the pipeline picks inline exchanges from it).
TEST(MpiGroups, HostRanksCountsTheWorldsProcessesOnThisHost) {
  EXPECT_EQ(g_world->host_ranks(), g_world->size());
  auto solo = g_world->split(g_world->rank(), 0, "solo");
  ASSERT_NE(solo, nullptr);
  EXPECT_EQ(solo->size(), 1);
  EXPECT_EQ(solo->host_ranks(), g_world->size());
}

TEST(MpiCollectives, LargeMessagesAllAlgorithms) {
  ProcessGroup& g = *g_world;
  const int n = g.size();
  const int64_t count = 300007;  // ~1.2 MB of f32, 293 chunks of 1 KiB per ring segment
  for (Algorithm a : {Algorithm::native, Algorithm::ring, Algorithm::tree, Algorithm::recursive}) {
    g.set_algorithm(a);
    Tensor t = make_tensor(DType::f32, inputs(g.rank(), count, ReduceOp::sum));
    g.all_reduce(t).wait();
    expect_values(read_tensor(t), reference(n, 0, count, ReduceOp::sum), 0, std::string("all_reduce ") + algorithm_name(a));
    Tensor b = make_tensor(DType::f64, moves(g.rank(), count));
    g.broadcast(b, n - 1).wait();
    expect_values(read_tensor(b), moves(n - 1, count), 0, std::string("broadcast ") + algorithm_name(a));
  }
  g.set_algorithm(Algorithm::automatic);
}

// comm.reduce_dtype: rank 0 holds 256, the others 1. f32 accumulation then one rounding
// gives bf16(256 + N-1) (258 or 260 for N = 3, 4); `param` rounds at each combining step
// (MPI's user op on the native path, reduce3 on the ring), so the result depends on the
// order but lies between 256 and that, and every rank gets the same bits. f32 moves twice
// the bytes.
TEST(MpiCollectives, HalfPrecisionReduceDtype) {
  ProcessGroup& g = *g_world;
  const double exact = read_tensor(make_tensor(DType::bf16, {256.0 + (g.size() - 1)}))[0];
  for (ReduceDtype rd : {ReduceDtype::param, ReduceDtype::f32}) {
    g.set_reduce_dtype(rd);
    for (Algorithm a : {Algorithm::native, Algorithm::ring}) {
      g.set_algorithm(a);
      const std::string what = std::string("bf16 sum, ") + algorithm_name(a) + " reduce_dtype " + reduce_dtype_name(rd);
      Tensor t = make_tensor(DType::bf16, std::vector<double>(33, g.rank() == 0 ? 256.0 : 1.0));
      g.all_reduce(t).wait();
      const std::vector<double> got = read_tensor(t);
      if (rd == ReduceDtype::f32) {
        expect_values(got, std::vector<double>(33, exact), 0, what);
      } else {
        for (double x : got) EXPECT_TRUE(x >= 256.0 && x <= exact) << what << ": " << x;
      }
      Tensor all = ops::zeros({33 * g.size()}, DType::bf16);
      g.all_gather(t, all).wait();
      const std::vector<double> every = read_tensor(all);
      for (int r = 0; r < g.size(); ++r)
        for (int i = 0; i < 33; ++i) EXPECT_EQ(every[size_t(r * 33 + i)], got[size_t(i)]) << what << " rank " << r;
      // avg and reduce_scatter of small integers: exact at any order
      Tensor in = make_tensor(DType::bf16, inputs(g.rank(), 5 * g.size(), ReduceOp::sum));
      Tensor out = ops::zeros({5}, DType::bf16);
      g.reduce_scatter(in, out, ReduceOp::sum).wait();
      expect_values(read_tensor(out), reference(g.size(), 5 * g.rank(), 5, ReduceOp::sum), 0, what + " reduce_scatter");
    }
    // counted bytes on the ring: half of f32's with `param`, equal with `f32`
    g.set_algorithm(Algorithm::ring);
    auto sent_by = [&](DType dt) {
      const int64_t before = g.stats()[OpKind::all_reduce].bytes_sent;
      Tensor t = make_tensor(dt, inputs(g.rank(), 4000, ReduceOp::sum));
      g.all_reduce(t).wait();
      return g.stats()[OpKind::all_reduce].bytes_sent - before;
    };
    const int64_t h = sent_by(DType::bf16), f = sent_by(DType::f32);
    EXPECT_GT(h, 0);
    EXPECT_EQ(rd == ReduceDtype::param ? 2 * h : h, f) << reduce_dtype_name(rd);
  }
  g.set_reduce_dtype(ReduceDtype::param);
  g.set_algorithm(Algorithm::automatic);
}

TEST(MpiCollectives, NonContiguousAllReduce) {
  ProcessGroup& g = *g_world;
  Tensor base = make_tensor(DType::f32, inputs(g.rank(), 12, ReduceOp::sum));
  Tensor t = ops::transpose(ops::view(base, {3, 4}), 0, 1);
  g.all_reduce(t).wait();
  expect_values(read_tensor(base), reference(g.size(), 0, 12, ReduceOp::sum), 0, "transposed all_reduce");
}

TEST(MpiGroups, SplitAndDeviceMesh) {
  ProcessGroup& g = *g_world;
  const int r = g.rank(), n = g.size();
  auto sub = g.split(r % 2, -r);
  ASSERT_TRUE(sub);
  Tensor t = ops::full({5}, double(r), DType::f64);
  sub->all_reduce(t).wait();
  double want = 0;
  for (int j = r % 2; j < n; j += 2) want += j;
  expect_values(read_tensor(t), std::vector<double>(5, want), 0, "split all_reduce");
  int higher = 0;  // keys are -rank: same-parity ranks above r come first
  for (int j = r + 2; j < n; j += 2) ++higher;
  EXPECT_EQ(sub->rank(), higher);
  check_all_collectives(*sub, CheckConfig{.algorithms = {Algorithm::native, Algorithm::ring},
                                          .dtypes = {DType::f32, DType::i32},
                                          .counts = {0, 9}});
  // pp x dp x tp with tp = 2 when the world is even, else 1 x N x 1.
  const MeshShape shape({{"pp", 1}, {"dp", n % 2 == 0 ? n / 2 : n}, {"tp", n % 2 == 0 ? 2 : 1}});
  DeviceMesh mesh(g_world, shape);
  for (const char* d : {"pp", "dp", "tp"}) {
    ProcessGroup& mg = *mesh[d];
    Tensor in = ops::full({1}, double(r), DType::i32);
    Tensor out = ops::zeros({mg.size()}, DType::i32);
    mg.all_gather(in, out).wait();
    std::vector<double> expect;
    for (int w : shape.group_ranks(r, d)) expect.push_back(w);
    expect_values(read_tensor(out), expect, 0, std::string("mesh group ") + d);
  }
}

TEST(MpiByteCounts, RingAllReduce) {
  ProcessGroup& g = *g_world;
  const int n = g.size();
  g.set_algorithm(Algorithm::ring);
  g.reset_stats();
  const int64_t count = int64_t(n) * 5000, k = count * 4;
  Tensor t = ops::ones({count}, DType::f32);
  g.all_reduce(t).wait();
  EXPECT_EQ(g.stats()[OpKind::all_reduce].bytes_sent, 2 * (n - 1) * k / n);
  expect_values(read_tensor(t), std::vector<double>(size_t(count), double(n)), 0, "ring all_reduce of ones");
  g.set_algorithm(Algorithm::automatic);
}

TEST(MpiDebug, MismatchIsAnErrorOnEveryRank) {
  CommOptions o = test_options();
  o.debug = true;
  auto dbg = init_mpi_world(o);  // a second world group with debug checks
  const int r = dbg->rank();
  Tensor t = ops::ones({r == 1 ? 999 : 1000}, DType::f32);
  std::string msg;
  try {
    dbg->all_reduce(t).wait();
  } catch (const CommError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("issued different collectives"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: all_reduce seq 0, f32 x 999"), std::string::npos) << msg;
  Tensor ok = ops::ones({10}, DType::f32);
  dbg->all_reduce(ok).wait();  // still usable
  expect_values(read_tensor(ok), std::vector<double>(10, double(dbg->size())), 0, "after mismatch");
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  set_num_threads(1);
  g_world = init_mpi_world(test_options(), &argc, &argv);
  if (g_world->rank() != 0) {  // one rank prints progress; failures print everywhere
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  Tensor f = ops::full({1}, double(failed), DType::i32);
  g_world->all_reduce(f, ReduceOp::max).wait();
  const int any = int(f.item<double>());
  if (g_world->rank() == 0 && any) std::fprintf(stderr, "some rank failed\n");
  g_world.reset();
  return any;
}
