// 3D parallelism (dp x tp x pp, ZeRO on dp) trains the same model as one process, on
// local ranks: k AdamW steps give the single process's losses, gradient norms (clipping
// counts every parameter once over tp shards, pp stages and dp replicas or shards) and
// parameters to 1e-5, for dp 2 x tp 2 x pp 2 ZeRO-1 1F1B, dp 1 x tp 2 x pp 2 with sequence
// parallelism, dp 2 x tp 2 x pp 1 ZeRO-3, dp 2 x pp 2 ZeRO-3 and a few more.
#include <gtest/gtest.h>

#include <set>

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

TEST(ThreeDEquivalence, Tp2InterleavedUntiedAndTp4) {
  check({.dp = 1, .tp = 2, .pp = 2, .zero = 0, .kind = ScheduleKind::interleaved, .m = 2, .v = 2, .tied = false,
         .clip = 0.05});
  check({.dp = 1, .tp = 4, .pp = 2, .zero = 0, .sp = true, .m = 2, .clip = 0.05});
}
