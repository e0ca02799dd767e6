// Context parallelism composed with pipeline parallelism (the 4D layouts' pp x cp part),
// on local ranks: the GPT (4 heads, 4 blocks, T 8) trained k AdamW steps with clipping
// at cp 2 x pp 2, dp 2 x cp 2 x pp 2 (ZeRO-1) and cp 2 x tp 2 x pp 2 equals one process:
// losses, gradient norms and every parameter a rank holds (its stages', its tp shards)
// to 1e-5; afterwards the stages evaluate whole sequences together (cp suspended by
// summon_full_params) and get the single process's evaluation loss.
#include <gtest/gtest.h>

#include <set>

#include <strata/autograd/grad_mode.h>
#include <strata/comm/local.h>

#include "threed_harness.h"

using namespace strata;
using namespace strata::testing::threed;

namespace {

constexpr double kTol = 1e-5;

struct CpPpCase {
  Case base;  // dp, tp, pp, zero, schedule, batch
  int cp = 2;
  CpSplit split = CpSplit::zigzag;
  double dropout = 0;  ///< every dropout of the GPT (one micro-batch: m splits the batch's masks)
  int world() const { return base.world() * cp; }
  std::string str() const {
    return base.str() + " x cp " + std::to_string(cp) + " " + cp_split_name(split) +
           (dropout > 0 ? " dropout " + std::to_string(dropout) : "");
  }
};

// The harness's GPT with k.dropout, from one seed on every rank.
std::shared_ptr<nn::GPT> cp_gpt(const CpPpCase& k) {
  Generator gen(strata::testing::kModelSeed);
  nn::GPTConfig cfg = gpt_config(k.base);
  cfg.dropout = k.dropout;
  return std::make_shared<nn::GPT>(cfg, gen);
}

void check(const CpPpCase& k) {
  const Case& c = k.base;
  SCOPED_TRACE(k.str());
  Run want;
  auto ref_model = cp_gpt(k);
  strata::testing::tp::gpt_reference_steps(*ref_model, c.steps, c.batch, c.clip, want.losses, want.norms);
  want.params = ref_model->named_parameters();
  auto [ex, ey] = strata::testing::make_batch("gpt", c.batch, c.steps);
  double want_eval = 0;
  {
    NoGradGuard no_grad;
    ref_model->eval();
    want_eval = ref_model->loss(ex, ey).item<double>();
  }
  std::vector<Run> got(size_t(k.world()));
  std::vector<std::set<std::string>> held(size_t(k.world()));
  comm::run_local(k.world(), [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    const ParallelDims dims =
        ParallelDims{.dp = c.dp, .tp = c.tp, .pp = c.pp, .zero_stage = c.zero, .cp = k.cp}.resolve(w->size());
    std::shared_ptr<nn::GPT> model = cp_gpt(k);
    // The GPT's plan at parallel.cp: a stage sends (B, T/cp, C) while cp is applied, whole
    // sequences while it is suspended (evaluation).
    PipelinePlan plan = nn::gpt_pp_plan(*model, {}, 1, k.cp);
    auto pm = parallelize(model, comm::DeviceMesh(w, dims.mesh_shape()),
                          {.dims = dims,
                           .ddp = {},
                           .fsdp_prefetch = true,
                           .fsdp_wrap = {},
                           .tp_plan = c.tp > 1 ? nn::gpt_tp_plan(gpt_config(c)) : TpPlan{},
                           .pipeline = {.schedule = c.kind, .microbatches = c.m, .virtual_stages = c.v},
                           .pp_plan = std::move(plan),
                           .cp_split = k.split,
                           .make_optimizer = strata::testing::tp::adamw});
    const std::string what = k.str() + " rank " + std::to_string(g.rank()) + ": " + pm->describe();
    ASSERT_NE(pm->cp(), nullptr) << what;
    ASSERT_NE(pm->pipeline(), nullptr) << what;
    Run r;
    const int dr = pm->mesh().rank("dp");
    const int64_t per = c.batch / c.dp;
    for (int s = 0; s < c.steps; ++s) {
      auto [xb, yb] = strata::testing::make_batch("gpt", c.batch, s);
      const Tensor x = ops::contiguous(ops::narrow(xb, 0, dr * per, per)),
                   y = ops::contiguous(ops::narrow(yb, 0, dr * per, per));
      // This rank's tokens' mean, on every stage; the dp x cp average is the batch's.
      const double loss = pm->forward_backward({x, y});
      pm->finalize();
      r.losses.push_back(strata::testing::rank_mean(pm->replica_group(), loss));
      r.norms.push_back(pm->clip_grad_norm(c.clip));
      pm->step();
      pm->zero_grad();
    }
    {
      const ParallelModel::FullParams full = pm->summon_full_params();  // cp suspended: whole sequences
      for (const auto& [n, t] : pm->module().named_parameters()) r.params.emplace_back(n, ops::clone(t));
      pm->module().eval();
      const double ev = pm->pipeline()->eval_loss(ex, ey, ex.shape());
      EXPECT_NEAR(ev, want_eval, kTol * std::abs(want_eval)) << what << " evaluation";
      pm->module().train();
    }
    EXPECT_NE(dynamic_cast<nn::GPT&>(pm->module()).lm_hooks().shard_sequence, nullptr) << what << ": cp put back";
    expect_match(r.params, want.params, pm->tp(), kTol, what);
    for (const auto& [n, t] : r.params) held[size_t(g.rank())].insert(n);
    got[size_t(g.rank())] = std::move(r);
  });
  for (int r = 0; r < k.world(); ++r) expect_losses(got[size_t(r)], want, c, kTol, k.str() + " rank " + std::to_string(r));
  std::set<std::string> all;  // together the ranks hold every parameter of the model
  for (const auto& h : held) all.insert(h.begin(), h.end());
  EXPECT_EQ(all.size(), want.params.size());
}

}  // namespace

TEST(ContextParallelPipeline, Cp2Pp2EqualsOneProcess) {
  check({.base = {.dp = 1, .tp = 1, .pp = 2, .zero = 0, .m = 2, .clip = 0.05}});
  check({.base = {.dp = 1, .tp = 1, .pp = 2, .zero = 0, .kind = ScheduleKind::gpipe, .m = 2, .tied = false, .clip = 0.05},
         .split = CpSplit::plain});
}

// Dropout under cp x pp: each stage's masks by global index (one micro-batch, so that
// the pipeline draws the whole batch's masks as one process does).
TEST(ContextParallelPipeline, Cp2Pp2WithDropoutEqualsOneProcess) {
  check({.base = {.dp = 1, .tp = 1, .pp = 2, .zero = 0, .m = 1, .clip = 0.05}, .dropout = 0.2});
}

TEST(ContextParallelPipeline, Dp2Cp2Pp2Zero1EqualsOneProcess) {
  check({.base = {.dp = 2, .tp = 1, .pp = 2, .zero = 1, .m = 2, .clip = 0.05}});
}

// ZeRO-3 over the dp x cp ranks of a stage (its units gathered for the pipeline step);
// the clipping norm sums the shards over dp x cp.
TEST(ContextParallelPipeline, Cp2Pp2Zero3EqualsOneProcess) {
  check({.base = {.dp = 1, .tp = 1, .pp = 2, .zero = 3, .m = 2, .clip = 0.05}});
}

TEST(ContextParallelPipeline, Cp2Tp2Pp2EqualsOneProcess) {
  check({.base = {.dp = 1, .tp = 2, .pp = 2, .zero = 0, .m = 2, .clip = 0.05}});
}
