// 3D parallelism (dp x tp x pp, ZeRO on dp) trains the same model as one process, on
// local ranks: k AdamW steps give the single process's losses, gradient norms (clipping
// counts every parameter once over tp shards, pp stages and dp replicas or shards) and
// parameters to 1e-5, for dp 2 x tp 2 x pp 2 ZeRO-1 1F1B, dp 1 x tp 2 x pp 2 with sequence
// parallelism, dp 2 x tp 2 x pp 1 ZeRO-3, dp 2 x pp 2 ZeRO-3 and a few more.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include <strata/core/memory.h>

#include "threed_harness.h"

using namespace strata;
using namespace strata::testing::threed;

namespace {

constexpr double kTol = 1e-5;

void check(const Case& c) {
  SCOPED_TRACE(c.str());
  const Run want = reference(c);
  std::vector<Run> got(size_t(c.world()));
  std::vector<std::set<std::string>> held(size_t(c.world()));
  std::vector<std::string> described(size_t(c.world()));
  comm::run_local(c.world(), [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, c);
    described[size_t(g.rank())] = pm->describe();
    Run r = train(*pm, c);
    const std::string what = c.str() + " rank " + std::to_string(g.rank());
    expect_match(r.params, want.params, pm->tp(), kTol, what);
    for (const auto& [n, t] : r.params) held[size_t(g.rank())].insert(n);
    got[size_t(g.rank())] = std::move(r);
  });
  for (int r = 0; r < c.world(); ++r) expect_losses(got[size_t(r)], want, c, kTol, c.str() + " rank " + std::to_string(r));
  std::set<std::string> all;  // together the ranks hold every parameter of the model
  for (const auto& h : held) all.insert(h.begin(), h.end());
  EXPECT_EQ(all.size(), want.params.size()) << described[0];
}

}  // namespace

TEST(ThreeDEquivalence, LlamaDp2Tp2Pp2Zero1AndSequenceParallel) {
  check({.family = "llama", .dp = 2, .tp = 2, .pp = 2, .zero = 1, .m = 2, .tied = false, .clip = 0.05});
  check({.family = "llama", .dp = 1, .tp = 2, .pp = 2, .zero = 0, .sp = true, .m = 4, .tied = false, .clip = 0.05});
}

TEST(ThreeDEquivalence, Dp2Tp2Pp2Zero1OneF1B) {
  check({.dp = 2, .tp = 2, .pp = 2, .zero = 1, .kind = ScheduleKind::one_f_one_b, .m = 2, .clip = 0.05});
}

TEST(ThreeDEquivalence, Dp1Tp2Pp2SequenceParallel) {
  check({.dp = 1, .tp = 2, .pp = 2, .zero = 0, .sp = true, .m = 4, .clip = 0.05});
}

TEST(ThreeDEquivalence, Dp2Tp2Pp1Zero3) {
  check({.dp = 2, .tp = 2, .pp = 1, .zero = 3, .clip = 0.05});
}

TEST(ThreeDEquivalence, Dp2Pp2Zero3KeepsUnitsGatheredForTheStep) {
  check({.dp = 2, .tp = 1, .pp = 2, .zero = 3, .m = 2, .clip = 0.05});
  check({.dp = 2, .tp = 1, .pp = 2, .zero = 3, .kind = ScheduleKind::gpipe, .m = 3, .tied = false, .batch = 12});
}

TEST(ThreeDEquivalence, Dp2Tp2Pp2DdpAndZero2AndZero3) {
  check({.dp = 2, .tp = 2, .pp = 2, .zero = 0, .kind = ScheduleKind::gpipe, .m = 2});
  check({.dp = 2, .tp = 2, .pp = 2, .zero = 2, .m = 4, .clip = 0.05});
  check({.dp = 2, .tp = 2, .pp = 2, .zero = 3, .sp = true, .m = 2, .clip = 0.05});
}

// ZB-H1's deferred weight gradients through tp's sharded linears, ZeRO-3's gathered units
// and ZeRO-2, with sequence parallelism and clipping.
TEST(ThreeDEquivalence, ZeroBubbleUnderTpAndZero) {
  check({.dp = 2, .tp = 1, .pp = 2, .zero = 3, .kind = ScheduleKind::zb_h1, .m = 2, .clip = 0.05});
  check({.dp = 2, .tp = 2, .pp = 2, .zero = 2, .sp = true, .kind = ScheduleKind::zb_h1, .m = 4, .clip = 0.05});
}

TEST(ThreeDEquivalence, Tp2InterleavedUntiedAndTp4) {
  check({.dp = 1, .tp = 2, .pp = 2, .zero = 0, .kind = ScheduleKind::interleaved, .m = 2, .v = 2, .tied = false,
         .clip = 0.05});
  check({.dp = 1, .tp = 4, .pp = 2, .zero = 0, .sp = true, .m = 2, .clip = 0.05});
}

TEST(ThreeDMemory, Zero3UnderPpHoldsTheStagesUnitsForTheStepOnly) {
  // dp 2 x pp 2 ZeRO-3 on 4 local ranks (one process: the allocator's counts are the sum
  // over the ranks). Between steps the ranks hold their parameter slices (params); during
  // the pipeline step each holds its stage's whole units (gathered into comm buffers) for
  // the whole step, and nothing of them after it.
  const Case c{.dp = 2, .tp = 1, .pp = 2, .zero = 3, .m = 2, .steps = 1};
  std::vector<int64_t> unit_bytes(4, 0), slice_bytes(4, 0);
  comm::run_local(4, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, c);
    for (const auto& u : pm->zero()->units()) {
      unit_bytes[size_t(g.rank())] += u.padded() * 4;
      slice_bytes[size_t(g.rank())] += u.shard * 4;
    }
    train(*pm, c);  // warm up: gradient slices and optimizer state exist from here on
    g.barrier().wait();
    int64_t comm_before = 0;
    if (g.rank() == 0) {
      cpu_memory().reset_peaks();
      comm_before = cpu_memory().stats(MemCategory::comm).current;
    }
    g.barrier().wait();
    Case next = c;
    next.first = 1;
    next.steps = 2;
    train(*pm, next);
    g.barrier().wait();
    if (g.rank() == 0) {
      int64_t units = 0, slices = 0;
      for (int r = 0; r < 4; ++r) {
        units += unit_bytes[size_t(r)];
        slices += slice_bytes[size_t(r)];
      }
      const MemStats comm = cpu_memory().stats(MemCategory::comm), params = cpu_memory().stats(MemCategory::params);
      std::printf("ZeRO-3 under pp (4 ranks): units %lld B, slices %lld B; comm peak %lld B, now %lld B; params now %lld B\n",
                  (long long)units, (long long)slices, (long long)comm.peak, (long long)comm.current,
                  (long long)params.current);
      EXPECT_EQ(comm.current, comm_before);            // nothing stays gathered after the step
      EXPECT_GE(comm.peak - comm_before, units);        // every rank's units at once, for the step
      EXPECT_LE(comm.peak - comm_before, units + units / 10);
      EXPECT_GE(params.current, slices);                // the 1/dp slices stay
    }
    g.barrier().wait();  // every rank's model lives until rank 0 has counted
  });
}

TEST(ThreeDEquivalence, TiedEmbeddingShardsStayIdenticalPerTpRank) {
  // tp 2 x pp 2 (mesh pp x dp x tp: ranks 0, 1 run stage 0, ranks 2, 3 stage 1): the
  // embedding group of tp rank t is {t, 2 + t}; each pair holds the same vocabulary shard
  // of the tied wte, bit for bit after the steps, and the two tp ranks' shards differ.
  const Case c{.dp = 1, .tp = 2, .pp = 2, .zero = 0, .m = 2, .steps = 4};
  std::vector<std::vector<float>> wte(4);
  comm::run_local(4, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, c);
    const strata::testing::threed::Run r = train(*pm, c);
    if (const Tensor* t = find(r.params, "wte.weight")) wte[size_t(g.rank())] = t->to_vector<float>();
  });
  for (int r = 0; r < 4; ++r) ASSERT_EQ(wte[size_t(r)].size(), 16u * 16u / 2) << "rank " << r;
  EXPECT_EQ(wte[0], wte[2]);
  EXPECT_EQ(wte[1], wte[3]);
  EXPECT_NE(wte[0], wte[1]);
}
