// Resharding between 3D layouts (dp, tp, pp, zero): 2 steps at one layout, a checkpoint,
// `consolidate` of it (every tensor whole, equal to one process's after 2 steps), and the
// third step at another layout from that checkpoint, equal to one process's 3 steps. Both
// ways for (2,2,2,z1) <-> (1,1,1,-), (4,2,1,z3), (1,4,2,-), and (8,1,1,z2) <-> (2,2,2,z1);
// and HSDP under tp, (4,2,1,z3 in shard groups of 2) <-> (2,2,2,z1), (1,1,1,-).
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include <strata/tensor/safetensors.h>
#include "threed_harness.h"

using namespace strata;
using namespace strata::testing::threed;
namespace fs = std::filesystem;

namespace {

constexpr double kTol = 1e-5;

struct Layout {
  int dp, tp, pp, zero;
  int dp_shard = 0;  // HSDP: ZeRO within shard groups of this many dp ranks
};

Case at(const Layout& l, int first, int steps, const std::string& family) {
  return {.family = family, .dp = l.dp, .tp = l.tp, .pp = l.pp, .zero = l.zero, .m = 2, .tied = family == "gpt",
          .clip = 0.05, .steps = steps, .first = first, .dp_shard = l.dp_shard};
}

void reshard(const Layout& from, const Layout& to, const std::string& family = "gpt") {
  const Case a = at(from, 0, 2, family), b = at(to, 2, 3, family);
  const std::string what = a.str() + " -> " + b.str();
  SCOPED_TRACE(what);
  const Run want2 = reference(a), want3 = reference(b);
  const fs::path dir = fs::temp_directory_path() / ("strata_3d_reshard_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  comm::run_local(a.world(), [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, a);
    train(*pm, a);
    save(*pm, a, (dir / "ck").string());
  });
  // The consolidated file: every tensor at its global shape, as one process has it.
  const std::string one = (dir / "one.safetensors").string();
  consolidate((dir / "ck").string(), one);
  const NamedTensors whole = load_safetensors(one);
  expect_match(want2.params, whole, nullptr, kTol, what + " (consolidated: every parameter)");
  expect_match(want2.opt_state, whole, nullptr, kTol, what + " (consolidated: optimizer state)");
  EXPECT_EQ(whole.size(), want2.params.size() + want2.opt_state.size()) << "consolidated: nothing else";
  std::vector<Run> got(size_t(b.world()));
  comm::run_local(b.world(), [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = build(w, b);
    pm->load_state(CheckpointReader((dir / "ck").string()), /*with_optimizer=*/true);
    Run r = train(*pm, b);
    expect_match(r.params, want3.params, pm->tp(), kTol, what + " rank " + std::to_string(g.rank()));
    got[size_t(g.rank())] = std::move(r);
  });
  for (int r = 0; r < b.world(); ++r) expect_losses(got[size_t(r)], want3, b, kTol, what + " rank " + std::to_string(r));
  fs::remove_all(dir);
}

constexpr Layout k3d{2, 2, 2, 1};


// The Llama (GQA, untied head): saved at dp 2 x tp 2 x pp 2 (ZeRO-1), resumed at one
// process and at dp 4 x tp 2 (ZeRO-3), and back.
TEST(ThreeDReshard, LlamaBetweenLayouts) {
  reshard(k3d, {1, 1, 1, 0}, "llama");
  reshard({4, 2, 1, 3}, k3d, "llama");
}

}  // namespace

TEST(ThreeDReshard, To1Process) {
  reshard(k3d, {1, 1, 1, 0});
  reshard({1, 1, 1, 0}, k3d);
}

TEST(ThreeDReshard, ToDp4Tp2Zero3) {
  reshard(k3d, {4, 2, 1, 3});
  reshard({4, 2, 1, 3}, k3d);
}

TEST(ThreeDReshard, ToTp4Pp2) {
  reshard(k3d, {1, 4, 2, 0});
  reshard({1, 4, 2, 0}, k3d);
}

TEST(ThreeDReshard, FromDp8Zero2) {
  reshard({8, 1, 1, 2}, k3d);
  reshard(k3d, {8, 1, 1, 2});
}

TEST(ThreeDReshard, HsdpUnderTensorParallel) {
  // Only replica 0 of each tp rank's shard groups writes; every rank reads its own boxes.
  const Layout hsdp{4, 2, 1, 3, 2};
  reshard(hsdp, k3d);
  reshard(k3d, hsdp);
  reshard(hsdp, {1, 1, 1, 0});
}
