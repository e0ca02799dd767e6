// 16-bit model states (bf16 parameters, activations and gradients; f32 masters and
// moments) with tensor parallelism: the GPT at tp 2 (vocabulary-parallel tied wte/head,
// whose cross-entropy widens the 16-bit logit shard to f32 as the one-process kernel
// does) and dp 2 x tp 2 with ZeRO-1 train the same bf16 model as one process does.
//
// Tolerance, as half_states_train_test.cpp's: a tp rank computes its half of each GEMM's
// output columns (column-parallel) or a partial sum over half of K (row-parallel, then
// all-reduced in bf16), so activations and gradients round at other places than in one
// process: about one bf16 ulp (2^-8 relative) per rounding, in the forward too, where
// data parallelism only reorders the gradient sum. Parameters must agree to 3 bf16 ulps
// of each tensor's largest element (3 x 2^-7; measured worst 0.0188, wpe, which collects
// every block's gradient; the DDP/ZeRO tests hold 2 ulps), losses to 1%. A layout that
// dropped a shard's gradient or trained on stale masters misses both by far.
#include <gtest/gtest.h>

#include "tp_harness.h"

namespace strata::parallel {
namespace {

namespace st = strata::testing;
using namespace strata::testing::tp;  // NOLINT: test harness

constexpr double kParamTol = 3.0 / 128;
// The Llama's tok_embeddings collects every block's gradient through the RMSNorms (no
// LayerNorm mean subtraction damping it): measured worst 0.033 at tp 2 (4.2 ulps), so 5.
constexpr double kLlamaParamTol = 5.0 / 128;
constexpr double kLossTol = 1e-2;
constexpr int kSteps = 3;

// Adam with eps 1e-3, as the bf16 DDP/ZeRO tests: the key bias's exactly-zero gradient is
// rounding noise, which eps 1e-8 would turn into full-size steps of either sign.
std::unique_ptr<optim::Optimizer> adam16(optim::NamedTensors ps) {
  return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-2, .eps = 1e-3, .weight_decay = 0.0});
}

Run reference16(const std::string& kind) {
  Run out;
  auto model = tp_model(kind, st::kModelSeed);
  model->to(DType::bf16);
  auto opt = adam16(model->named_parameters());
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = st::make_batch("gpt", 8, s);
    Tensor loss = st::batch_loss(*model, x, y);
    out.losses.push_back(loss.item<double>());
    backward(loss);
    opt->step();
    opt->zero_grad();
  }
  out.state = model->state_dict();
  return out;
}

Run parallel16(comm::ProcessGroup& world_ref, int dp, int tp, int stage, const std::string& kind) {
  std::shared_ptr<comm::ProcessGroup> world(&world_ref, [](comm::ProcessGroup*) {});
  const ParallelDims dims = ParallelDims{.dp = dp, .tp = tp, .zero_stage = stage}.resolve(world->size());
  const comm::DeviceMesh mesh(world, dims.mesh_shape());
  auto model = tp_model(kind, st::kModelSeed + 77 * uint64_t(world->rank()));
  model->to(DType::bf16);
  auto pm = parallelize(model, mesh,
                        {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = tp_plan(kind),
                         .make_optimizer = adam16});
  Run out;
  const int64_t per = 8 / dp;
  const int dr = mesh.rank("dp");
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = st::make_batch("gpt", 8, s);
    Tensor xr = ops::narrow(x, 0, dr * per, per), yr = ops::narrow(y, 0, dr * per, per);
    Tensor loss = pm->forward_with([&] { return st::batch_loss(pm->module(), xr, yr); });
    out.losses.push_back(st::rank_mean(*mesh["dp"], loss.item<double>()));
    backward(loss);
    pm->finalize();
    for (const auto& [n, p] : pm->module().named_parameters()) {
      EXPECT_EQ(p.dtype(), DType::bf16) << n;
    }
    pm->step();
    pm->zero_grad();
  }
  const ParallelModel::FullParams full = pm->summon_full_params();
  for (const auto& [name, t] : pm->module().state_dict()) out.state.emplace_back(name, ops::clone(t));
  return out;
}

void check16(int dp, int tp, int stage, const std::string& kind = "gpt") {
  const Run want = reference16(kind);
  comm::run_local(dp * tp, [&](comm::ProcessGroup& w) {
    const Run got = parallel16(w, dp, tp, stage, kind);
    const std::string what = "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " stage " +
                             std::to_string(stage) + " rank " + std::to_string(w.rank());
    std::string worst;
    EXPECT_LT(st::max_relative_error(got.state, want.state, &worst), kind == "gpt" ? kParamTol : kLlamaParamTol)
        << what << " worst " << worst;
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t s = 0; s < got.losses.size(); ++s)
      EXPECT_NEAR(got.losses[s], want.losses[s], kLossTol * want.losses[s]) << what << " step " << s;
  });
}

TEST(HalfStatesTp, GptTp2EqualsOneProcess) { check16(1, 2, 0); }

TEST(HalfStatesTp, GptDp2Tp2Zero1EqualsOneProcess) { check16(2, 2, 1); }

// The Llama in bf16 (RMSNorm, rotary and SwiGLU kernels on 16-bit storage): tp 2 and dp 2
// x tp 2 with ZeRO-1.
TEST(HalfStatesTp, LlamaTp2AndDp2Tp2Zero1EqualsOneProcess) {
  check16(1, 2, 0, "llama");
  check16(2, 2, 1, "llama");
}

}  // namespace
}  // namespace strata::parallel
