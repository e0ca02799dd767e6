// Hybrid sharding (HSDP: ZeRO within shard groups of dp_shard ranks, gradients averaged
// over the replicas) on local ranks: the keys and their errors, the group membership,
// equivalence with one process at ZeRO-1/2/3 (alone and under tp / pp), the bytes each
// group sends per step against the formulas, and checkpoints saved under HSDP that load
// under plain ZeRO, DDP and one process, and back.
#include <gtest/gtest.h>

#include <filesystem>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include "threed_harness.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;
using parallel::ParallelDims;

constexpr double kTol = 1e-5;

double cap_mib(int64_t floats) { return double(floats * 4) / (1024.0 * 1024.0); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A data-parallel layout over the whole world: stage 0 is DDP (one process at world 1),
// dp_shard > 0 cuts the dp ranks into shard groups.
struct Layout {
  int ranks = 1;
  int stage = 0;
  int dp_shard = 0;
  std::string str() const {
    return std::to_string(ranks) + " rank(s) stage " + std::to_string(stage) +
           (dp_shard > 0 ? " dp_shard " + std::to_string(dp_shard) : std::string());
  }
};

std::unique_ptr<parallel::ParallelModel> build(comm::ProcessGroup& g, std::shared_ptr<nn::Module> model,
                                               const Layout& l, const std::string& optim, double cap_mb = 25.0) {
  std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
  const ParallelDims dims = ParallelDims{.zero_stage = l.stage, .dp_shard = l.dp_shard}.resolve(g.size());
  parallel::DDPOptions ddp;
  ddp.bucket_cap_mb = cap_mb;
  ddp.first_bucket_mb = ddp.last_bucket_mb = std::min(cap_mb, 1.0);
  return parallel::parallelize(std::move(model), comm::DeviceMesh(world, dims.mesh_shape()),
                               {.dims = dims, .ddp = ddp, .fsdp_prefetch = true, .fsdp_wrap = {},
                                .make_optimizer = optimizer_factory(optim)});
}

int64_t sent(const comm::ProcessGroup* g, comm::OpKind k) { return g ? g->stats()[k].bytes_sent : 0; }

// What one rank saw: the world-mean loss of each step, the whole state after the last
// step, and the bytes its shard and replicate groups sent in the last step, by op.
struct RankRun {
  std::vector<double> losses, norms;
  nn::NamedTensors state;
  int64_t shard_rs = 0, shard_ag = 0, shard_ar = 0;  // reduce-scatter, all-gather, all-reduce
  int64_t rep_ar = 0, rep_other = 0;                 // all-reduce; reduce-scatter + all-gather
  int64_t padded = 0;                                // sum of the units' padded sizes (elements)
};

// Steps [first, last) of make_batch(c.model, c.batch, s), each rank its rows.
RankRun train(comm::ProcessGroup& g, parallel::ParallelModel& pm, const EquivCase& c, int first, int last,
              double clip = 0) {
  RankRun out;
  parallel::ZeroDataParallel* z = pm.zero();
  const comm::ProcessGroup* shard = z ? &z->group() : nullptr;
  const comm::ProcessGroup* rep = z ? z->replicate_group() : nullptr;
  if (z)
    for (const auto& u : z->units()) out.padded += u.padded();
  const int64_t per = c.batch / g.size();
  for (int s = first; s < last; ++s) {
    const int64_t rs0 = sent(shard, comm::OpKind::reduce_scatter), ag0 = sent(shard, comm::OpKind::all_gather),
                  ar0 = sent(shard, comm::OpKind::all_reduce), rar0 = sent(rep, comm::OpKind::all_reduce),
                  roth0 = sent(rep, comm::OpKind::reduce_scatter) + sent(rep, comm::OpKind::all_gather);
    auto [xb, yb] = make_batch(c.model, c.batch, s);
    const double loss = accumulate_micro_batches(pm, pm.module(), xb, yb, g.rank(), per, 1, true);
    if (clip > 0) out.norms.push_back(pm.clip_grad_norm(clip));
    pm.step();
    pm.zero_grad();
    out.shard_rs = sent(shard, comm::OpKind::reduce_scatter) - rs0;
    out.shard_ag = sent(shard, comm::OpKind::all_gather) - ag0;
    out.shard_ar = sent(shard, comm::OpKind::all_reduce) - ar0;
    out.rep_ar = sent(rep, comm::OpKind::all_reduce) - rar0;
    out.rep_other = sent(rep, comm::OpKind::reduce_scatter) + sent(rep, comm::OpKind::all_gather) - roth0;
    out.losses.push_back(rank_mean(g, loss));  // after the counts: this all-reduce is the world's
  }
  const auto full = pm.summon_full_params();
  for (const auto& [n, t] : pm.module().state_dict()) out.state.emplace_back(n, ops::clone(t));
  return out;
}

std::vector<RankRun> run_layout(const Layout& l, const EquivCase& c, double clip = 0, double cap_mb = 25.0,
                                comm::Algorithm algo = comm::Algorithm::automatic) {
  std::vector<RankRun> got(size_t(l.ranks));
  comm::run_local(l.ranks, [&](comm::ProcessGroup& g) {
    auto model = make_model(c.model, g.rank() == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(g.rank()));
    auto pm = build(g, model, l, c.optim, cap_mb);
    got[size_t(g.rank())] = train(g, *pm, c, 0, c.steps, clip);
  }, comm::CommOptions{.algorithm = algo, .timeout_s = 60});
  return got;
}

void check_equivalent(const Layout& l, const EquivCase& c, double clip = 0) {
  SCOPED_TRACE(l.str() + " " + c.model + "/" + c.optim);
  std::vector<double> ref_losses, ref_norms;
  const nn::NamedTensors ref = clip > 0 ? reference_state_clipped(ZeroCase{.base = c, .clip = clip}, &ref_norms, &ref_losses)
                                        : reference_state(c, l.ranks, &ref_losses);
  const auto got = run_layout(l, c, clip);
  for (int r = 0; r < l.ranks; ++r) {
    const RankRun& g = got[size_t(r)];
    std::string worst;
    EXPECT_LT(max_relative_error(g.state, ref, &worst), kTol) << "rank " << r << ": worst tensor " << worst;
    ASSERT_EQ(g.losses.size(), ref_losses.size());
    for (size_t s = 0; s < ref_losses.size(); ++s)
      EXPECT_NEAR(g.losses[s], ref_losses[s], kTol * std::abs(ref_losses[s])) << "rank " << r << " step " << s;
    ASSERT_EQ(g.norms.size(), ref_norms.size());
    for (size_t s = 0; s < ref_norms.size(); ++s)
      EXPECT_NEAR(g.norms[s], ref_norms[s], kTol * ref_norms[s]) << "rank " << r << " norm of step " << s;
  }
}

TEST(HsdpDims, KeysResolveAndErrorsNameTheKey) {
  const ParallelDims h = ParallelDims{.zero_stage = 3, .dp_shard = 2}.resolve(8);
  EXPECT_EQ(h.shard_size(), 2);
  EXPECT_EQ(h.replicate_size(), 4);
  EXPECT_TRUE(h.hybrid());
  EXPECT_EQ(h.dp_strategy(), "HSDP ZeRO-3");
  EXPECT_EQ(h.str(), "dp 8 x tp 1 x pp 1, zero_stage 3, dp_shard 2 x dp_replicate 4");
  // dp_replicate alone derives dp_shard; both must agree with dp.
  EXPECT_EQ((ParallelDims{.zero_stage = 1, .dp_replicate = 2}.resolve(8).dp_shard), 4);
  EXPECT_EQ((ParallelDims{.zero_stage = 1, .dp_shard = 4, .dp_replicate = 2}.resolve(8).shard_size()), 4);
  // dp_shard = dp (or 0) is plain ZeRO; dp_shard = 1 keeps HSDP with one-rank shards.
  EXPECT_FALSE((ParallelDims{.zero_stage = 2, .dp_shard = 4}.resolve(4).hybrid()));
  EXPECT_EQ((ParallelDims{.zero_stage = 2, .dp_shard = 4}.resolve(4).dp_strategy()), "ZeRO-2");
  EXPECT_FALSE((ParallelDims{.zero_stage = 2}.resolve(4).hybrid()));
  EXPECT_TRUE((ParallelDims{.zero_stage = 2, .dp_shard = 1}.resolve(4).hybrid()));
  // dp is the dp degree, not the world: with tp 2 over 8 ranks dp is 4.
  EXPECT_EQ((ParallelDims{.tp = 2, .zero_stage = 3, .dp_shard = 2}.resolve(8).replicate_size()), 2);

  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 3, .dp_shard = 3}.resolve(4); })
                .find("parallel.dp_shard: is 3 but does not divide parallel.dp = 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 0, .dp_shard = 2}.resolve(4); })
                .find("parallel.dp_shard: is 2 but parallel.zero_stage is 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 1, .dp_shard = 2, .dp_replicate = 4}.resolve(4); })
                .find("parallel.dp_replicate"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 1, .dp_replicate = 3}.resolve(4); }).find("parallel.dp_replicate"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 1, .dp_shard = -1}.resolve(4); }).find("parallel.dp_shard"),
            std::string::npos);
  // With cp: shard groups of dp_shard dp ranks (x cp), replicas over dp / dp_shard.
  const ParallelDims cp = ParallelDims{.zero_stage = 1, .cp = 2, .dp_shard = 1}.resolve(4);
  EXPECT_TRUE(cp.hybrid());
  EXPECT_EQ(cp.replicate_size(), 2);
}

TEST(HsdpGroups, ShardGroupsAreRunsOfConsecutiveDpRanks) {
  // World rank r (dp rank r at tp 1) sits in shard group r / S at position r % S; its
  // replicate group is the ranks at that position of every shard group.
  for (const auto& [n, S] : std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {6, 2}, {4, 1}}) {
    comm::run_local(n, [&](comm::ProcessGroup& g) {
      auto pm = build(g, make_model("mlp", kModelSeed), {.ranks = n, .stage = 1, .dp_shard = S}, "sgd");
      parallel::ZeroDataParallel* z = pm->zero();
      ASSERT_NE(z, nullptr);
      ASSERT_NE(z->replicate_group(), nullptr);
      const int r = g.rank();
      const auto members = [&](comm::ProcessGroup& sub) {
        return comm::all_gather_host(sub, ops::full({1}, double(r), DType::f64)).to_vector<double>();
      };
      std::vector<double> shard, rep;
      for (int k = 0; k < S; ++k) shard.push_back(double(r / S * S + k));
      for (int k = 0; k < n / S; ++k) rep.push_back(double(r % S + k * S));
      EXPECT_EQ(members(z->group()), shard) << "n " << n << " S " << S << " rank " << r;
      EXPECT_EQ(members(*z->replicate_group()), rep) << "n " << n << " S " << S << " rank " << r;
      EXPECT_NE(pm->describe().find("HSDP ZeRO-1 over " + std::to_string(n) + " dp rank(s) in " +
                                    std::to_string(n / S) + " replicas of " + std::to_string(S) + "-rank shard groups"),
                std::string::npos)
          << pm->describe();
    });
  }
}

TEST(HsdpEquivalence, Mlp2x2AllStagesMatchOneProcess) {
  for (int stage = 1; stage <= 3; ++stage)
    for (const char* optim : {"sgd", "adam"}) check_equivalent({.ranks = 4, .stage = stage, .dp_shard = 2}, {.optim = optim});
}

TEST(HsdpEquivalence, OtherShapesAndOneRankShards) {
  check_equivalent({.ranks = 6, .stage = 3, .dp_shard = 3}, {.optim = "adam"});
  check_equivalent({.ranks = 6, .stage = 2, .dp_shard = 2}, {.optim = "adam"});
  check_equivalent({.ranks = 4, .stage = 2, .dp_shard = 1}, {.optim = "adam"});  // 4 replicas of the whole state
}

TEST(HsdpEquivalence, GptTiedEmbeddingClippingOverTheShardGroupOnly) {
  // The norm sums squares over the shard group: summed over the replicas too it would be
  // sqrt(R) times too large and the clipped steps would differ.
  for (int stage = 1; stage <= 3; ++stage)
    check_equivalent({.ranks = 4, .stage = stage, .dp_shard = 2}, {.model = "gpt", .optim = "adam"}, 0.05);
}

TEST(HsdpEquivalence, ComposesWithTensorAndPipelineParallel) {
  using threed::Case;
  for (const Case& c : {Case{.dp = 4, .tp = 2, .pp = 1, .zero = 3, .clip = 0.05, .dp_shard = 2},
                        Case{.dp = 2, .tp = 2, .pp = 2, .zero = 2, .m = 2, .clip = 0.05, .dp_shard = 1}}) {
    SCOPED_TRACE(c.str());
    const threed::Run want = threed::reference(c);
    std::vector<threed::Run> got(size_t(c.world()));
    comm::run_local(c.world(), [&](comm::ProcessGroup& g) {
      std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
      auto pm = threed::build(w, c);
      ASSERT_NE(pm->zero(), nullptr);
      ASSERT_NE(pm->zero()->replicate_group(), nullptr);
      EXPECT_EQ(pm->zero()->group().size(), c.dp_shard);
      threed::Run r = threed::train(*pm, c);
      threed::expect_match(r.params, want.params, pm->tp(), kTol, c.str() + " rank " + std::to_string(g.rank()));
      got[size_t(g.rank())] = std::move(r);
    });
    for (int r = 0; r < c.world(); ++r)
      threed::expect_losses(got[size_t(r)], want, c, kTol, c.str() + " rank " + std::to_string(r));
  }
}

TEST(HsdpComm, BytesPerGroupMatchTheFormula) {
  // Per step each rank sends, on the ring: within its shard group (S ranks) ZeRO's bytes
  // over S, (S-1)/S of the padded units once for the reduce-scatter and once per
  // all-gather (2 for stages 1-2, 3 for stage 3); within its replicate group (R ranks)
  // the all-reduce of its slice, 2(R-1)/R x padded/S; nothing else. The ring cuts the
  // slice into R balanced segments, so over the R ranks of a replicate group the sum is
  // exactly 2(R-1) x slice. Small units (37 floats) so that several of each add up.
  const EquivCase c{.model = "gpt", .steps = 2};
  for (const auto& [n, S] : std::vector<std::pair<int, int>>{{4, 2}, {6, 2}, {6, 3}})
    for (int stage = 1; stage <= 3; ++stage) {
      SCOPED_TRACE("n " + std::to_string(n) + " S " + std::to_string(S) + " stage " + std::to_string(stage));
      const int R = n / S;
      const auto got = run_layout({.ranks = n, .stage = stage, .dp_shard = S}, c, 0, cap_mib(37), comm::Algorithm::ring);
      std::vector<int64_t> rep_sum(size_t(S), 0);
      for (int r = 0; r < n; ++r) {
        const RankRun& g = got[size_t(r)];
        ASSERT_EQ(g.padded % S, 0);
        const int64_t slice = g.padded / S * 4;  // bytes of this rank's slice of every unit
        EXPECT_EQ(g.shard_rs, (S - 1) * slice) << "rank " << r;
        EXPECT_EQ(g.shard_ag, (stage == 3 ? 2 : 1) * (S - 1) * slice) << "rank " << r;
        EXPECT_EQ(g.shard_ar, 0) << "rank " << r;
        EXPECT_EQ(g.rep_other, 0) << "rank " << r << ": a parameter gather or gradient reduce-scatter crossed replicas";
        if (R == 2) {
          EXPECT_EQ(g.rep_ar, slice) << "rank " << r;  // 2(R-1)/R = 1: exact per rank
        }
        rep_sum[size_t(r % S)] += g.rep_ar;
      }
      for (int p = 0; p < S; ++p) EXPECT_EQ(rep_sum[size_t(p)], 2 * (R - 1) * (got[0].padded / S * 4)) << "position " << p;
    }
}

// ---------------------------------------------------------------- checkpoints

constexpr int64_t kBatch = 12;  // divisible by 1, 2, 4 and 6

// Trains steps [0, 2) under `l`, saves; the ranks of replicas other than 0 contribute no
// piece (the writer refuses pieces that overlap or leave a gap, so the files tile every
// tensor exactly once).
void save_after_two_steps(const Layout& l, const std::string& dir) {
  const EquivCase c{.optim = "adam", .steps = 2, .batch = kBatch};
  comm::run_local(l.ranks, [&](comm::ProcessGroup& g) {
    auto pm = build(g, make_model("mlp", kModelSeed + 13 * uint64_t(g.rank())), l, "adam", cap_mib(50));
    train(g, *pm, c, 0, 2);
    const auto pieces = pm->state_pieces();
    if (pm->zero() && pm->zero()->replicate_group()) {
      EXPECT_EQ(pieces.empty(), pm->zero()->replicate_group()->rank() != 0) << l.str() << " rank " << g.rank();
    }
    parallel::save_sharded(dir, g, pieces, l.stage, {{parallel::kOptimizerMetaKey, pm->optimizer().state_dict().scalars}});
  });
}

// Loads `dir` under `l` into a model of another init, trains step 2 and returns rank 0's
// state and that step's loss.
std::pair<nn::NamedTensors, double> resume_one_step(const Layout& l, const std::string& dir) {
  const EquivCase c{.optim = "adam", .steps = 3, .batch = kBatch};
  std::pair<nn::NamedTensors, double> out;
  comm::run_local(l.ranks, [&](comm::ProcessGroup& g) {
    auto pm = build(g, make_model("mlp", 999 + uint64_t(g.rank())), l, "adam", cap_mib(30));
    pm->load_state(parallel::CheckpointReader(dir), true);
    RankRun r = train(g, *pm, c, 2, 3);
    if (g.rank() == 0) out = {std::move(r.state), r.losses.at(0)};
  });
  return out;
}

TEST(HsdpCheckpoint, SavedOnceLoadsUnderZeroDdpOneProcessAndBack) {
  std::vector<double> ref_losses;
  const nn::NamedTensors ref = reference_state(EquivCase{.optim = "adam", .steps = 3, .batch = kBatch}, 1, &ref_losses);
  const fs::path root = fs::temp_directory_path() / ("strata_hsdp_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::vector<Layout> hsdp = {{.ranks = 4, .stage = 3, .dp_shard = 2}, {.ranks = 4, .stage = 1, .dp_shard = 2},
                                    {.ranks = 6, .stage = 2, .dp_shard = 3}, {.ranks = 4, .stage = 2, .dp_shard = 1}};
  const std::vector<Layout> plain = {{.ranks = 1, .stage = 0}, {.ranks = 2, .stage = 0}, {.ranks = 4, .stage = 3},
                                     {.ranks = 3, .stage = 2}};
  // Each source layout saves once, into its own directory.
  auto saved = [&](const Layout& from) {
    const std::string dir = (root / (std::to_string(from.ranks) + "_s" + std::to_string(from.stage) + "_S" +
                                     std::to_string(from.dp_shard)))
                                .string();
    if (!fs::exists(fs::path(dir) / parallel::kShardedIndexFile)) save_after_two_steps(from, dir);
    return dir;
  };
  auto check = [&](const Layout& from, const Layout& to) {
    const auto [state, loss] = resume_one_step(to, saved(from));
    std::string worst;
    EXPECT_LT(max_relative_error(state, ref, &worst), kTol) << from.str() << " -> " << to.str() << ": worst " << worst;
    EXPECT_NEAR(loss, ref_losses[2], kTol * std::abs(ref_losses[2])) << from.str() << " -> " << to.str();
  };
  for (const Layout& from : hsdp) {
    for (const Layout& to : plain) check(from, to);
    for (const Layout& to : hsdp) check(from, to);
  }
  for (const Layout& from : plain)
    for (const Layout& to : hsdp) check(from, to);
  fs::remove_all(root);
}

}  // namespace
}  // namespace strata::testing
