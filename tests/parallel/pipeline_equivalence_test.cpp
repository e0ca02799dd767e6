// Pipeline parallelism trains the same model as one process: every schedule x pp {2, 4}
// x m {1, pp, 2pp+1} (where valid) on local ranks, with tied embeddings, activation
// checkpointing, clipping and dp 2 x pp 2 under ZeRO-1; the stage split keeps global
// names; a peer that fails makes the others fail naming stage, micro-batch and peer; a
// pp 2 checkpoint resumes at pp 1 and pp 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/pipeline/executor.h>
#include <strata/parallel/pipeline/stage.h>
#include "pipeline_harness.h"

using namespace strata;
using namespace strata::parallel;
using namespace strata::testing;

namespace {

constexpr double kTol = 1e-5;

std::string label(const PpCase& c) {
  return std::string(schedule_name(c.kind)) + " pp " + std::to_string(c.pp) + " m " + std::to_string(c.m) + " v " +
         std::to_string(c.v) + " dp " + std::to_string(c.dp) + (c.tied ? " tied" : " untied") +
         (c.checkpoint ? " ckpt" : "") + (c.family != "gpt" ? " " + c.family : std::string());
}

// exchanges: 1 inline, 0 on comm threads, -1 the executor's default for this host.
void check_case(const PpCase& c, int exchanges = -1) {
  const PpRun ref = pp_reference(c);
  const int world = c.pp * c.dp;
  std::vector<PpRun> runs(static_cast<size_t>(world));
  comm::run_local(world, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = pp_parallelize_family(w, c);
    if (exchanges >= 0) pm->pipeline()->set_inline_exchanges(exchanges == 1);
    runs[size_t(g.rank())] = pp_train(*pm, c);
  });
  for (int r = 0; r < world; ++r) {
    const PpRun& run = runs[size_t(r)];
    ASSERT_EQ(run.losses.size(), ref.losses.size());
    ASSERT_EQ(run.norms.size(), ref.norms.size());
    ASSERT_EQ(ref.norms.size(), size_t(c.steps));
    for (size_t s = 0; s < ref.losses.size(); ++s)
      EXPECT_NEAR(run.losses[s], ref.losses[s], kTol) << label(c) << " rank " << r << " step " << s;
    // The gradient norm before the step: AdamW's update does not change when every
    // gradient is scaled alike, so only this sees a wrong 1/m or 1/dp.
    for (size_t s = 0; s < ref.norms.size(); ++s)
      EXPECT_NEAR(run.norms[s], ref.norms[s], kTol * (1 + ref.norms[s])) << label(c) << " rank " << r << " step " << s;
    expect_params_match(run.params, ref.params, kTol, label(c) + " rank " + std::to_string(r));
  }
  // Together the ranks hold every parameter of the model.
  std::set<std::string> held;
  for (const auto& run : runs)
    for (const auto& [n, t] : run.params) held.insert(n);
  EXPECT_EQ(held.size(), ref.params.size()) << label(c);
}


// The Llama (grouped-query attention, untied head) under its family's pipeline plan with
// an uneven split (pp_layers 1 | 3 and 3 | 2 | 1 | 2) under every schedule, and with
// activation checkpointing.
TEST(PipelineEquivalence, LlamaUnevenSplitEverySchedule) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::zb_h1}) {
    const int v = k == ScheduleKind::interleaved ? 2 : 1;
    PpCase c{.family = "llama", .kind = k, .pp = 2, .m = 3, .v = v, .tied = false, .layers = 4,
             .pp_layers = v == 2 ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{1, 3}};
    if (k == ScheduleKind::interleaved) c.m = 2;
    SCOPED_TRACE(label(c));
    check_case(c);
  }
  check_case({.family = "llama", .kind = ScheduleKind::one_f_one_b, .pp = 4, .m = 4, .tied = false,
              .pp_layers = {3, 2, 1, 2}});
  check_case({.family = "llama", .kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .tied = false, .checkpoint = true,
              .layers = 4, .pp_layers = {3, 1}});
  check_case({.family = "llama", .kind = ScheduleKind::gpipe, .pp = 2, .m = 2, .tied = true, .layers = 4});
}

}  // namespace

TEST(PipelineEquivalence, EveryScheduleAndMicroBatchCountEqualsOneProcess) {
  int n = 0;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int pp : {2, 4})
      for (int m : {1, pp, 2 * pp + 1}) {
        PpCase c{.kind = k, .pp = pp, .m = m, .v = k == ScheduleKind::interleaved ? 2 : 1};
        if (!ScheduleShape{k, pp, m, c.v}.invalid().empty()) continue;
        SCOPED_TRACE(label(c));
        check_case(c);
        ++n;
      }
  EXPECT_EQ(n, 14);  // 3 m values x 2 pp for gpipe and 1f1b; m = pp only for interleaved
}

// ZB-H1: each backward split into B (input gradients) and W (the linear layers' weight
// gradients, deferred), the same model as one process: pp 2 and 4, m below, at and above
// pp, the untied head, activation checkpointing (the recomputed blocks defer too), comm-
// thread exchanges, and dp 2 x pp 2 with ZeRO-1.
TEST(PipelineEquivalence, ZeroBubbleEqualsOneProcess) {
  for (int pp : {2, 4})
    for (int m : {1, pp, 2 * pp + 1}) {
      const PpCase c{.kind = ScheduleKind::zb_h1, .pp = pp, .m = m};
      SCOPED_TRACE(label(c));
      check_case(c);
    }
  check_case({.kind = ScheduleKind::zb_h1, .pp = 2, .m = 3, .tied = false});
  check_case({.kind = ScheduleKind::zb_h1, .pp = 2, .m = 4, .checkpoint = true});
  check_case({.kind = ScheduleKind::zb_h1, .pp = 2, .m = 3}, /*exchanges=*/0);
  check_case({.kind = ScheduleKind::zb_h1, .pp = 2, .m = 2, .dp = 2, .zero_stage = 1});
}

// Whichever way the exchanges run (the default picks one per host), the model is the same.
TEST(PipelineEquivalence, InlineAndThreadedExchangesEqualOneProcess) {
  for (int exchanges : {1, 0}) {
    SCOPED_TRACE(exchanges ? "inline exchanges" : "exchanges on comm threads");
    check_case({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 3}, exchanges);
    check_case({.kind = ScheduleKind::interleaved, .pp = 2, .m = 2, .v = 2}, exchanges);
  }
}

// Inline when the job's compute threads fill the host's cores, comm threads when a core is free.
TEST(PipelineTimeline, EveryActionOfEveryRankIsRecordedInOrder) {
  // STRATA_PP_TIMELINE: each rank appends every step's actions; the recorded run still
  // trains the reference model (inline exchanges, so the loss goes over the inline group).
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_pp_timeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "tl").string();
  ASSERT_EQ(::setenv("STRATA_PP_TIMELINE", prefix.c_str(), 1), 0);
  const PpCase c{.kind = ScheduleKind::interleaved, .pp = 2, .m = 4, .v = 2, .steps = 2};
  check_case(c, 1);
  ::unsetenv("STRATA_PP_TIMELINE");
  struct Ev {
    char k;
    int mb, st;
    char dir, msg;
    int64_t t0, t1;
  };
  std::vector<std::vector<std::vector<Ev>>> ranks(2);  // [rank][step][event]
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(prefix + "." + std::to_string(r));
    ASSERT_TRUE(in) << "no timeline file for rank " << r;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string k;
      ls >> k;
      if (k == "step") {
        ranks[size_t(r)].emplace_back();
        continue;
      }
      ASSERT_FALSE(ranks[size_t(r)].empty()) << line;
      Ev e{};
      int peer = 0;
      long long t0 = 0, t1 = 0, cpu = 0;
      e.k = k[0];
      ls >> e.mb >> e.st >> e.dir >> e.msg >> peer >> t0 >> t1 >> cpu;
      ASSERT_TRUE(ls) << line;
      e.t0 = t0;
      e.t1 = t1;
      ranks[size_t(r)].back().push_back(e);
    }
  }
  std::filesystem::remove_all(dir);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[size_t(r)].size(), size_t(c.steps)) << "rank " << r;
    for (const auto& step : ranks[size_t(r)]) {
      int f = 0, b = 0, posts = 0, waits = 0;
      for (size_t i = 0; i < step.size(); ++i) {
        const Ev& e = step[i];
        EXPECT_LE(e.t0, e.t1);
        if (i > 0) {
          EXPECT_GE(e.t0, step[i - 1].t1) << "rank " << r << " event " << i << " overlaps the one before";
        }
        f += e.k == 'F';
        b += e.k == 'B';
        posts += e.k == 'P';
        waits += e.k == 'W';
        if (e.k == 'F' || e.k == 'B') {
          EXPECT_EQ(e.st % 2, r) << "stage " << e.st << " runs on rank " << e.st % 2;
        }
      }
      EXPECT_EQ(f, c.m * c.v) << "rank " << r;  // v stages of m micro-batches each
      EXPECT_EQ(b, c.m * c.v) << "rank " << r;
      EXPECT_EQ(posts, waits) << "rank " << r;
      EXPECT_GT(posts, 0);
      EXPECT_EQ(step.back().k, 'L') << "rank " << r << ": the loss exchange closes the step";
    }
  }
  // Every receive completed after its sender posted the send (same clock on every rank).
  for (int r = 0; r < 2; ++r)
    for (size_t s = 0; s < size_t(c.steps); ++s)
      for (const Ev& w : ranks[size_t(r)][s]) {
        if (w.k != 'W' || w.dir != 'r') continue;
        const auto& other = ranks[size_t(1 - r)][s];
        const auto send = std::find_if(other.begin(), other.end(), [&](const Ev& p) {
          return p.k == 'P' && p.dir == 's' && p.msg == w.msg && p.mb == w.mb && p.st == w.st;
        });
        ASSERT_NE(send, other.end()) << "rank " << r << " received a message nobody sent";
        EXPECT_LE(send->t0, w.t1) << "rank " << r << " completed a receive before its send was posted";
      }
}

TEST(PipelineExchanges, InlineWhenTheComputeThreadsFillTheCores) {
  EXPECT_TRUE(default_inline_exchanges(2, 1, 2));   // mpirun -np 2, one thread each, 2 cores
  EXPECT_TRUE(default_inline_exchanges(4, 1, 2));   // oversubscribed
  EXPECT_TRUE(default_inline_exchanges(2, 8, 16));  // 2 ranks x 8 threads on 16 cores
  EXPECT_FALSE(default_inline_exchanges(2, 1, 16));  // 14 cores free for comm threads
  EXPECT_FALSE(default_inline_exchanges(1, 1, 2));
  EXPECT_TRUE(default_inline_exchanges(0, 0, 0));    // degenerate counts read as 1
}

TEST(PipelineEquivalence, UntiedHeadAndActivationCheckpointing) {
  check_case({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 3, .tied = false});
  check_case({.kind = ScheduleKind::one_f_one_b, .pp = 4, .m = 4, .checkpoint = true});
  check_case({.kind = ScheduleKind::interleaved, .pp = 2, .m = 4, .v = 2, .checkpoint = true});
}

TEST(PipelineEquivalence, ClippingCountsEveryParameterOnce) {
  // A small max_norm so every step clips: the norm must be the whole model's.
  check_case({.kind = ScheduleKind::gpipe, .pp = 2, .m = 2, .clip = 0.05});
  check_case({.kind = ScheduleKind::interleaved, .pp = 2, .m = 2, .v = 2, .clip = 0.05});
}

TEST(PipelineEquivalence, DataParallelTimesPipelineWithZero1) {
  check_case({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .dp = 2, .zero_stage = 1});
  check_case({.kind = ScheduleKind::gpipe, .pp = 2, .m = 3, .dp = 2, .zero_stage = 0});  // DDP
}

TEST(PipelineEquivalence, TiedCopiesStayIdentical) {
  // Both ways of summing the tied gradients: the all-reduce (comm threads) and the swap +
  // add on the calling thread (inline exchanges).
  const PpCase c{.kind = ScheduleKind::one_f_one_b, .pp = 4, .m = 4, .steps = 4};
  for (bool inline_exchanges : {false, true}) {
    SCOPED_TRACE(inline_exchanges ? "inline exchanges" : "exchanges on comm threads");
    std::vector<Tensor> wte(4);
    comm::run_local(4, [&](comm::ProcessGroup& g) {
      std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
      auto pm = pp_parallelize(w, c, pp_gpt(c));
      pm->pipeline()->set_inline_exchanges(inline_exchanges);
      pp_train(*pm, c);
      for (const auto& [n, t] : pm->module().named_parameters())
        if (n == "wte.weight") wte[size_t(g.rank())] = t;
    });
    ASSERT_TRUE(wte[0].defined());
    ASSERT_TRUE(wte[3].defined());
    EXPECT_FALSE(wte[1].defined());
    EXPECT_FALSE(wte[2].defined());
    EXPECT_EQ(wte[0].to_vector<float>(), wte[3].to_vector<float>());  // bit for bit
  }
}

TEST(PipelineStages, GlobalNamesAndBalancedSplit) {
  const PpCase c{.pp = 2, .layers = 4};
  auto model = pp_gpt(c);
  const PipelinePlan plan = pp_gpt_plan(model->config());
  const auto st = plan_stages(*model, plan, 2);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].begin, 0);
  EXPECT_EQ(st[1].end, 4);
  keep_stages(*model, plan, {st[1]});
  std::vector<std::string> names;
  for (const auto& [n, t] : model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names.front().rfind("wte.", 0), 0u);  // tied: the head's copy of wte stays
  EXPECT_NE(std::find(names.begin(), names.end(), "h.3.attn.c_attn.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "h.0.attn.c_attn.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "wpe.weight"), names.end());
}

TEST(PipelineStages, SplitByParameterCountOrGivenLayers) {
  // Blocks of 10, stage 0 also holds 25 (embeddings), the last 5: balanced = [1, 3] of 4.
  auto s = split_stages({10, 10, 10, 10}, 25, 5, 2);
  EXPECT_EQ(s[0].end - s[0].begin, 1);
  EXPECT_EQ(s[1].end - s[1].begin, 3);
  s = split_stages({10, 10, 10, 10}, 0, 0, 2, {3, 1});
  EXPECT_EQ(s[0].end, 3);
  EXPECT_THROW(split_stages({10, 10, 10}, 0, 0, 2, {3, 1}), ConfigError);   // sums to 4
  EXPECT_THROW(split_stages({10, 10, 10}, 0, 0, 2, {3}), ConfigError);      // one entry per stage
  EXPECT_THROW(split_stages({10, 10, 10}, 0, 0, 4), ConfigError);           // fewer blocks than stages
  try {
    split_stages({10, 10, 10}, 0, 0, 2, {3, 0});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp_layers[1]"), std::string::npos) << e.what();
  }
}

TEST(PipelineEquivalence, ExplicitLayersTrainTheSameModel) {
  PpCase c{.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .layers = 4, .pp_layers = {3, 1}};
  const PpRun ref = pp_reference(c);
  std::vector<PpRun> runs(2);
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = pp_parallelize(w, c, pp_gpt(c));
    EXPECT_EQ(pm->pipeline()->my_stages()[0].end - pm->pipeline()->my_stages()[0].begin, g.rank() == 0 ? 3 : 1);
    runs[size_t(g.rank())] = pp_train(*pm, c);
  });
  for (const auto& run : runs) {
    for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(run.losses[s], ref.losses[s], kTol);
    expect_params_match(run.params, ref.params, kTol, "pp_layers [3, 1]");
  }
}

TEST(PipelineEquivalence, AFailedPeerNamesStageMicroBatchAndPeer) {
  const PpCase c{.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .steps = 1};
  std::vector<std::string> errors(2);
  comm::CommOptions opts;
  opts.timeout_s = 5;
  comm::run_local(
      2,
      [&](comm::ProcessGroup& g) {
        std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
        auto pm = pp_parallelize(w, c, pp_gpt(c));
        if (g.rank() == 1) {
          pm->mesh()["pp"]->abort("rank 1 stopped");  // dies before its first exchange
          return;
        }
        try {
          auto [x, y] = pp_batch(c, 0, 0);
          pm->forward_backward({x, y});
        } catch (const CommError& e) {
          errors[0] = e.what();
        }
      },
      opts);
  EXPECT_NE(errors[0].find("stage 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("micro-batch 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("peer rank 1"), std::string::npos) << errors[0];
}

TEST(PipelineCheckpoint, Pp2SavesGlobalNamesAndResumesAtPp1AndPp4) {
  // Train 2 steps at pp 2, save; resume at pp 1 (one process) and pp 4 and take step 3:
  // both equal the reference's 3 steps.
  const PpCase c2{.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .steps = 2};
  PpCase c3 = c2;
  c3.steps = 3;
  const PpRun ref = pp_reference(c3);
  const std::string dir = (std::filesystem::temp_directory_path() / ("strata_pp_ckpt_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto pm = pp_parallelize(w, c2, pp_gpt(c2));
    pp_train(*pm, c2);
    const nlohmann::json meta = {{kOptimizerMetaKey, pm->optimizer().state_dict().scalars}};
    save_sharded(dir, g, pm->state_pieces(), 0, meta);
  });
  {  // pp 1: one process loads every tensor and steps on the whole batch
    auto model = pp_gpt(c3);
    auto opt = tp::adamw(model->named_parameters());
    ShardedCheckpointReader ck(dir);
    load_replicated(ck, *model, opt.get());
    auto [x, y] = make_batch("gpt", c3.batch(), 2);
    Tensor loss = model->loss(x, y);
    EXPECT_NEAR(loss.item<double>(), ref.losses[2], kTol);
    backward(loss);
    opt->step();
    expect_params_match(model->named_parameters(), ref.params, kTol, "resumed at pp 1");
  }
  std::vector<PpRun> runs(4);
  comm::run_local(4, [&](comm::ProcessGroup& g) {  // pp 4: each rank reads its stages' tensors
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    PpCase c4 = c3;
    c4.pp = 4;
    c4.m = 2;
    auto pm = pp_parallelize(w, c4, pp_gpt(c4));
    pm->load_state(ShardedCheckpointReader(dir), true);
    auto [x, y] = pp_batch(c4, 2, 0);
    runs[size_t(g.rank())].losses.push_back(pm->forward_backward({x, y}));
    pm->finalize();
    pm->step();
    runs[size_t(g.rank())].params = pm->module().named_parameters();
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(runs[size_t(r)].losses[0], ref.losses[2], kTol) << "rank " << r;
    expect_params_match(runs[size_t(r)].params, ref.params, kTol, "resumed at pp 4, rank " + std::to_string(r));
  }
  std::filesystem::remove_all(dir);
}
