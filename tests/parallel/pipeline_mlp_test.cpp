// The MLP's pipeline plan (nn/mlp_plans.h, mlp_pp_plan): stages cut between whole
// layers (a Linear with its activation and dropout; the Flatten joins the first), and a
// pipeline of them trains the same model as one process on the whole batch.
#include <gtest/gtest.h>

#include <set>

#include <strata/comm/local.h>
#include <strata/core/error.h>
#include <strata/nn/linear.h>
#include <strata/nn/mlp.h>
#include <strata/nn/mlp_plans.h>
#include <strata/parallel/pipeline/stage.h>
#include "tests/parallel/pipeline_harness.h"

using namespace strata;
using namespace strata::parallel;
using namespace strata::testing;

namespace {

// 16 -> 12 -> 10 -> 8 -> 5: four layers (Flatten, Linear, ReLU | Linear, ReLU | ... | Linear).
std::shared_ptr<nn::MLP> pp_mlp() {
  Generator gen(kModelSeed);
  return std::make_shared<nn::MLP>(nn::MLPConfig{.input = 16, .hidden = {12, 10, 8}, .classes = kClasses}, gen);
}

struct MlpCase {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 2, m = 2, v = 1, dp = 1, zero_stage = 0;
  std::vector<int64_t> layers{};
  int steps = 3;
  int64_t per_mb = 2;
  int64_t batch() const { return per_mb * m * dp; }
  std::string str() const {
    return std::string(schedule_name(kind)) + " pp " + std::to_string(pp) + " m " + std::to_string(m) + " v " +
           std::to_string(v) + " dp " + std::to_string(dp) + " zero " + std::to_string(zero_stage);
  }
};

void check_mlp(const MlpCase& c) {
  // One process, whole batch.
  std::vector<double> ref_losses;
  auto ref = pp_mlp();
  {
    auto opt = tp::adamw(ref->named_parameters());
    for (int s = 0; s < c.steps; ++s) {
      auto [x, y] = make_batch("mlp", c.batch(), s);
      Tensor loss = cross_entropy(ref->forward(x), y);
      ref_losses.push_back(loss.item<double>());
      backward(loss);
      opt->step();
      opt->zero_grad();
    }
  }
  const int world = c.pp * c.dp;
  std::vector<std::vector<double>> losses(static_cast<size_t>(world));
  std::vector<nn::NamedTensors> params(static_cast<size_t>(world));
  comm::run_local(world, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> w(&g, [](comm::ProcessGroup*) {});
    auto model = pp_mlp();
    auto pm = pp_parallelize_with(w, c, model, nn::mlp_pp_plan(*model, c.layers));
    const int dr = pm->mesh().rank("dp");
    const int64_t b = c.batch() / c.dp;
    for (int s = 0; s < c.steps; ++s) {
      auto [x, y] = make_batch("mlp", c.batch(), s);
      x = ops::contiguous(ops::narrow(x, 0, dr * b, b));
      y = ops::contiguous(ops::narrow(y, 0, dr * b, b));
      double loss = pm->forward_backward({x, y});
      pm->finalize();
      if (c.dp > 1) loss = rank_mean(*pm->mesh()["dp"], loss);
      losses[size_t(g.rank())].push_back(loss);
      pm->step();
      pm->zero_grad();
    }
    params[size_t(g.rank())] = pm->module().named_parameters();
  });
  const nn::NamedTensors whole = ref->named_parameters();
  std::set<std::string> seen;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(losses[size_t(r)].size(), ref_losses.size());
    for (size_t s = 0; s < ref_losses.size(); ++s)
      EXPECT_NEAR(losses[size_t(r)][s], ref_losses[s], 1e-5) << c.str() << " rank " << r << " step " << s;
    expect_params_match(params[size_t(r)], whole, 1e-5, c.str() + " rank " + std::to_string(r));
    for (const auto& [n, t] : params[size_t(r)]) seen.insert(n);
  }
  EXPECT_EQ(seen.size(), whole.size()) << c.str() << ": every parameter lives on some stage";
}

}  // namespace

TEST(PipelineMlpPlan, StagesCutBetweenWholeLayers) {
  auto model = pp_mlp();
  const PipelinePlan plan = nn::mlp_pp_plan(*model, {});
  ASSERT_FALSE(plan.empty());
  EXPECT_EQ(plan.blocks, "net");
  // Flatten, Linear, ReLU | Linear, ReLU | Linear, ReLU | Linear
  EXPECT_EQ(plan.layer_blocks, (std::vector<int64_t>{3, 2, 2, 1}));
  const auto children = model->child("net")->named_children();
  for (int stages : {2, 3, 4}) {
    const auto specs = plan_stages(*model, plan, stages);
    ASSERT_EQ(int(specs.size()), stages);
    EXPECT_EQ(specs.front().begin, 0);
    EXPECT_EQ(specs.back().end, int64_t(children.size()));
    for (const auto& s : specs) {
      EXPECT_LT(s.begin, s.end);
      if (s.begin > 0) {
        EXPECT_NE(dynamic_cast<const nn::Linear*>(children[size_t(s.begin)].second.get()), nullptr)
            << "stage " << s.stage << " of " << stages << " starts mid-layer at block " << s.begin;
      }
    }
  }
  // Balanced by parameters at pp 2 (layers of 204, 130, 88, 45): [1 | 3] (204 vs 263)
  // beats [2 | 2] (334 vs 133): the split minimises the largest stage.
  const auto two = plan_stages(*model, plan, 2);
  EXPECT_EQ(two[0].end, 3);
  // Explicit layers count layers, not blocks.
  PipelinePlan explicit_plan = nn::mlp_pp_plan(*model, {3, 1});
  const auto e = plan_stages(*model, explicit_plan, 2);
  EXPECT_EQ(e[0].end, 7);
  // The activation a stage sends: its last Linear's width.
  EXPECT_EQ(plan.activation(two[0], {4, 16}).shape, (Shape{4, 12}));
  EXPECT_EQ(plan.activation(e[0], {4, 16}).shape, (Shape{4, 8}));
  // More stages than layers names the key.
  try {
    (void)plan_stages(*model, plan, 5);
    FAIL() << "5 stages of 4 layers";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("parallel.pp"), std::string::npos) << err.what();
  }
}

TEST(PipelineMlpPlan, TrainsAsOneProcess) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int pp : {2, 4})
      for (int m : {1, pp, 2 * pp + 1}) check_mlp({.kind = k, .pp = pp, .m = m});
  check_mlp({.kind = ScheduleKind::interleaved, .pp = 2, .m = 2, .v = 2});
  check_mlp({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .layers = {3, 1}});
}

TEST(PipelineMlpPlan, Dp2Pp2WithDdpAndZero) {
  check_mlp({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 2, .dp = 2});
  check_mlp({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 3, .dp = 2, .zero_stage = 1});
  check_mlp({.kind = ScheduleKind::gpipe, .pp = 2, .m = 2, .dp = 2, .zero_stage = 2});
}
