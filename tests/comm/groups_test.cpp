// Sub-groups (split / new_group), DeviceMesh layout, and byte counting per op.
#include <gtest/gtest.h>

#include <numeric>

#include "collective_checks.h"
#include <strata/comm/device_mesh.h>
#include <strata/comm/local.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

// World ranks of g's members in group-rank order, by all_gather.
std::vector<int> member_world_ranks(ProcessGroup& g, int world_rank) {
  Tensor in = ops::full({1}, double(world_rank), DType::i32);
  Tensor out = ops::zeros({g.size()}, DType::i32);
  g.all_gather(in, out).wait();
  std::vector<int> v;
  for (double x : read_tensor(out)) v.push_back(int(x));
  return v;
}

TEST(Groups, SplitByColorOrdersByKey) {
  run_local(5, [](ProcessGroup& g) {
    const int r = g.rank();
    // Even/odd colors, keys reversed: the highest world rank becomes rank 0.
    auto sub = g.split(r % 2, -r);
    ASSERT_TRUE(sub);
    const std::vector<int> want = r % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
    EXPECT_EQ(sub->size(), int(want.size()));
    EXPECT_EQ(member_world_ranks(*sub, r), want);
    Tensor t = ops::full({3}, double(r), DType::f64);
    sub->all_reduce(t).wait();
    const double sum = r % 2 == 0 ? 6.0 : 4.0;
    expect_values(read_tensor(t), std::vector<double>(3, sum), 0, "sub-group all_reduce");
    // Negative color: no group.
    auto none = g.split(r == 0 ? -1 : 0, r);
    EXPECT_EQ(none == nullptr, r == 0);
  });
}

TEST(Groups, NewGroupKeepsListedOrderAndSkipsOthers) {
  run_local(4, [](ProcessGroup& g) {
    const int r = g.rank();
    auto sub = g.new_group({3, 1});
    if (r == 0 || r == 2) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->rank(), r == 3 ? 0 : 1);
    EXPECT_EQ(member_world_ranks(*sub, r), (std::vector<int>{3, 1}));
    EXPECT_EQ(sub->name(), "world/group[3,1]");
    check_all_collectives(*sub, CheckConfig{.algorithms = {Algorithm::native, Algorithm::ring},
                                            .dtypes = {DType::f32, DType::bf16},
                                            .counts = {0, 7}});
  });
}

MeshShape pp_dp_tp(int pp, int dp, int tp) { return MeshShape({{"pp", pp}, {"dp", dp}, {"tp", tp}}); }

TEST(DeviceMeshTest, LayoutArithmeticLastDimensionFastest) {
  const MeshShape s = pp_dp_tp(2, 3, 2);  // 12 ranks
  EXPECT_EQ(s.coord_of(0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(s.coord_of(1), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(s.coord_of(2), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(s.coord_of(7), (std::vector<int>{1, 0, 1}));
  for (int r = 0; r < 12; ++r) EXPECT_EQ(s.rank_of(s.coord_of(r)), r);
  EXPECT_EQ(s.group_ranks(7, "tp"), (std::vector<int>{6, 7}));
  EXPECT_EQ(s.group_ranks(7, "dp"), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(s.group_ranks(7, "pp"), (std::vector<int>{1, 7}));
  EXPECT_EQ(s.str(), "pp=2 x dp=3 x tp=2");
  EXPECT_THROW(s.validate(8), ConfigError);
  EXPECT_NO_THROW(s.validate(12));
  EXPECT_THROW(pp_dp_tp(0, 2, 2), ConfigError);
  EXPECT_THROW(MeshShape({{"dp", 2}, {"dp", 2}}), ConfigError);
  EXPECT_THROW((void)s.size("cp"), Error);
}

TEST(DeviceMeshTest, AnyDimensionNamesAndOrder) {
  // A fourth dimension is just another name: cp between dp and tp.
  const MeshShape s({{"pp", 1}, {"dp", 2}, {"cp", 2}, {"tp", 2}});
  EXPECT_EQ(s.world(), 8);
  EXPECT_EQ(s.group_ranks(5, "cp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(s.group_ranks(5, "dp"), (std::vector<int>{1, 5}));
  EXPECT_EQ(s.group_ranks(5, "tp"), (std::vector<int>{4, 5}));
  run_local(8, [s](ProcessGroup& w) {
    std::shared_ptr<ProcessGroup> world(&w, [](ProcessGroup*) {});
    DeviceMesh mesh(world, s);
    for (const char* d : {"pp", "dp", "cp", "tp"})
      EXPECT_EQ(member_world_ranks(*mesh[d], w.rank()), s.group_ranks(w.rank(), d)) << d;
  });
}

TEST(DeviceMeshTest, GroupsMatchTheGridOnEightLocalRanks) {
  for (MeshShape shape : {pp_dp_tp(2, 2, 2), pp_dp_tp(1, 4, 2), pp_dp_tp(2, 1, 4), pp_dp_tp(1, 8, 1)}) {
    run_local(8, [shape](ProcessGroup& w) {
      // Each rank holds its own shared_ptr to its world group; the mesh shares it.
      std::shared_ptr<ProcessGroup> world(&w, [](ProcessGroup*) {});
      DeviceMesh mesh(world, shape);
      const int r = w.rank();
      EXPECT_EQ(mesh.coord(), shape.coord_of(r));
      for (const char* d : {"pp", "dp", "tp"}) {
        ProcessGroup& g = *mesh[d];
        EXPECT_EQ(g.size(), shape.size(d));
        EXPECT_EQ(g.rank(), mesh.rank(d));
        EXPECT_EQ(member_world_ranks(g, r), shape.group_ranks(r, d)) << d << " group of rank " << r;
      }
      DeviceMesh copy = mesh;  // value type: copies share the groups
      EXPECT_EQ(copy["tp"].get(), mesh["tp"].get());
      for (const char* d : {"pp", "dp", "tp"})  // a dimension spanning the world is the world group
        EXPECT_EQ(mesh[d].get() == world.get(), shape.size(d) == 8) << d;
    });
  }
  run_local(4, [](ProcessGroup& w) {
    std::shared_ptr<ProcessGroup> world(&w, [](ProcessGroup*) {});
    EXPECT_THROW(DeviceMesh(world, pp_dp_tp(2, 2, 2)), ConfigError);
  });
}

TEST(ByteCounts, RingAllReduceSends2NMinus1OverNTimesK) {
  for (int n : {2, 3, 4, 8}) {
    CommOptions o;
    o.algorithm = Algorithm::ring;
    o.chunk_bytes = 4096;
    run_local(n, [n](ProcessGroup& g) {
      const int64_t count = int64_t(n) * 3000;  // K divisible by N
      const int64_t k = count * 4;
      Tensor t = ops::ones({count}, DType::f32);
      g.all_reduce(t).wait();
      g.all_reduce(t).wait();
      const OpStats s = g.stats()[OpKind::all_reduce];
      EXPECT_EQ(s.calls, 2);
      EXPECT_EQ(s.bytes_sent, 2 * (2 * (n - 1) * k / n)) << n << " ranks";
      EXPECT_EQ(s.payload_bytes, 2 * k);
      // ring all_gather and reduce_scatter: (N-1) blocks each.
      Tensor out = ops::zeros({count * n}, DType::f32);
      g.all_gather(t, out).wait();
      EXPECT_EQ(g.stats()[OpKind::all_gather].bytes_sent, (n - 1) * k);
      Tensor rs = ops::zeros({count / n}, DType::f32);
      g.reduce_scatter(t, rs).wait();
      EXPECT_EQ(g.stats()[OpKind::reduce_scatter].bytes_sent, (n - 1) * k / n);
      g.reset_stats();
      EXPECT_EQ(g.stats().total_bytes_sent(), 0);
    }, o);
  }
}

TEST(ByteCounts, RecursiveDoublingSendsLog2NTimesK) {
  CommOptions o;
  o.algorithm = Algorithm::recursive;  // below small_message_bytes: recursive doubling
  run_local(4, [](ProcessGroup& g) {
    Tensor t = ops::ones({100}, DType::f64);
    g.all_reduce(t).wait();
    EXPECT_EQ(g.stats()[OpKind::all_reduce].bytes_sent, 2 * 800);
    EXPECT_EQ(g.stats()[OpKind::all_reduce].bytes_modelled, 0);
    expect_values(read_tensor(t), std::vector<double>(100, 4.0), 0, "recursive doubling");
  }, o);
}

TEST(ByteCounts, NativeOpsAreChargedTheBusModel) {
  run_local(4, [](ProcessGroup& g) {
    Tensor t = ops::ones({1000}, DType::f32);
    g.all_reduce(t).wait();
    EXPECT_EQ(g.stats()[OpKind::all_reduce].bytes_sent, 2 * 3 * 4000 / 4);
    EXPECT_EQ(g.stats()[OpKind::all_reduce].bytes_modelled, 2 * 3 * 4000 / 4);
    EXPECT_STREQ(g.stats().total_bytes_kind(), "modelled");
    g.send_recv(t, (g.rank() + 1) % 4, ops::zeros({1000}), (g.rank() + 3) % 4).wait();
    EXPECT_EQ(g.stats()[OpKind::send_recv].bytes_sent, 4000);
    EXPECT_EQ(g.stats()[OpKind::send_recv].bytes_modelled, 0);  // point-to-point is always counted
    EXPECT_STREQ(g.stats().total_bytes_kind(), "counted+modelled");
  });
}

}  // namespace
