// 16-bit model states with pipeline parallelism: a bf16 GPT split over 2 stages (1F1B,
// tied wte on the first and last stage, its gradient summed between them in bf16) and
// dp 2 x pp 2 with ZeRO-1 train the same bf16 model as one process does. Stages send
// bf16 activations and receive bf16 gradients (the plan's ActivationSpec names the
// model's dtype).
//
// Tolerance: as the DDP/ZeRO bf16 tests (half_states_train_test.cpp): a pipeline computes
// the same arithmetic per micro-batch, but accumulates the micro-batches' 16-bit
// gradients in bf16 (each accumulation rounds) where one process computes the whole
// batch's at once; about one bf16 ulp (2^-8) per rounding. Parameters within 2 bf16 ulps
// of each tensor's largest element (2^-6), losses within 1%.
#include <gtest/gtest.h>

#include "pipeline_harness.h"

namespace strata::testing {
namespace {

constexpr double kParamTol = 1.0 / 64;
constexpr double kLossTol = 1e-2;

std::unique_ptr<optim::Optimizer> adam16(optim::NamedTensors ps) {
  return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-2, .eps = 1e-3, .weight_decay = 0.0});
}

std::shared_ptr<nn::GPT> gpt16(const PpCase& c) {
  auto m = pp_gpt(c);
  m->to(DType::bf16);
  return m;
}

PpRun reference16(const PpCase& c) {
  PpRun r;
  auto model = gpt16(c);
  auto opt = adam16(model->named_parameters());
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = make_batch("gpt", c.batch(), s);
    Tensor loss = batch_loss(*model, x, y);
    r.losses.push_back(loss.item<double>());
    backward(loss);
    opt->step();
    opt->zero_grad();
  }
  r.params = model->named_parameters();
  return r;
}

void check16(const PpCase& c) {
  const PpRun want = reference16(c);
  comm::run_local(c.pp * c.dp, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
    auto model = gpt16(c);
    parallel::PipelinePlan plan = pp_gpt_plan(model->config());
    const int64_t width = model->config().n_embd;
    plan.activation = [width](const parallel::PipelineStageSpec&, const Shape& in) {
      return parallel::ActivationSpec{{in[0], in[1], width}, DType::bf16};
    };
    auto pm = pp_parallelize_with(world, c, model, std::move(plan), adam16);
    const PpRun got = pp_train(*pm, c);
    const std::string what = "pp " + std::to_string(c.pp) + " dp " + std::to_string(c.dp) + " zero " +
                             std::to_string(c.zero_stage) + " rank " + std::to_string(g.rank());
    nn::NamedTensors mine, ref;  // this rank's stages' parameters and the reference's of the same names
    for (const auto& [n, t] : got.params) {
      EXPECT_EQ(t.dtype(), DType::bf16) << what << " " << n;
      for (const auto& [rn, rt] : want.params)
        if (rn == n) {
          mine.emplace_back(n, t);
          ref.emplace_back(n, rt);
        }
    }
    ASSERT_EQ(mine.size(), got.params.size()) << what;
    ASSERT_FALSE(mine.empty()) << what;
    std::string worst;
    EXPECT_LT(max_relative_error(mine, ref, &worst), kParamTol) << what << " worst " << worst;
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t s = 0; s < got.losses.size(); ++s)
      EXPECT_NEAR(got.losses[s], want.losses[s], kLossTol * want.losses[s]) << what << " step " << s;
  });
}

TEST(HalfStatesPp, Gpt1F1BEqualsOneProcess) { check16({.pp = 2, .m = 2, .layers = 4}); }

TEST(HalfStatesPp, GptDp2Pp2Zero1EqualsOneProcess) { check16({.pp = 2, .m = 2, .dp = 2, .zero_stage = 1, .layers = 4}); }

}  // namespace
}  // namespace strata::testing
