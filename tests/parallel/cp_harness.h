// The context-parallel test harness: the GPT trained through parallelize() at a layout
// with cp > 1 on one rank of a world, checked against the single-process reference
// (shared by the local-rank and the mpirun tests).
#pragma once
#include <string>

#include <strata/autograd/engine.h>
#include <strata/nn/gpt.h>
#include "tp_harness.h"

namespace strata::testing::cp {

using namespace strata::parallel;  // NOLINT: test harness
namespace st = strata::testing;
namespace tpt = strata::testing::tp;

struct CpCase {
  int dp = 1, cp = 2, tp = 1, stage = 0;
  CpSplit split = CpSplit::zigzag;
  std::string model = "gpt";  // gpt | gpt_ckpt | gpt_untied
  int steps = 3;
  int64_t batch = 4;
  double clip = 0.5;
  /// f64 (model, reference and ring attention): every difference is a bug, so states,
  /// losses and norms must agree to 1e-9. In f32, Adam turns the rounding noise of
  /// near-zero gradient entries (summed in another order over the cp ranks) into
  /// parameter differences of ~1e-5 relative after 3 steps; losses and norms are
  /// compared to 1e-5 and states to 1e-4.
  bool f64 = true;
  /// model.dropout (every dropout of the GPT, the attention's too). Every rank then builds
  /// the model from one seed, as `strata train` does: the cp ranks' generators agree.
  double dropout = 0;
};

/// The harness's GPT (tp_harness's tp_model) with c.dropout.
inline std::shared_ptr<nn::Module> cp_model(const CpCase& c, uint64_t seed) {
  if (c.dropout == 0) return tpt::tp_model(c.model, seed);
  Generator gen(seed);
  return std::make_shared<nn::GPT>(nn::GPTConfig{.vocab = 16,
                                                 .block_size = 8,
                                                 .n_layer = 2,
                                                 .n_head = 4,
                                                 .n_embd = 16,
                                                 .dropout = c.dropout,
                                                 .tie_weights = c.model.find("untied") == std::string::npos,
                                                 .checkpoint = c.model.find("ckpt") != std::string::npos},
                                   gen);
}

inline std::string name_of(const CpCase& c) {
  return std::string(c.f64 ? "f64 " : "f32 ") + "dp " + std::to_string(c.dp) + " x cp " + std::to_string(c.cp) + " x tp " + std::to_string(c.tp) + " zero " +
         std::to_string(c.stage) + " " + cp_split_name(c.split) + " " + c.model +
         (c.dropout > 0 ? " dropout " + std::to_string(c.dropout) : "");
}

// This rank's run: its dp shard of each batch, whole sequences (the model keeps its cp
// part), then the whole model gathered.
inline tpt::Run cp_run(comm::ProcessGroup& world_ref, const CpCase& c, std::string* described) {
  std::shared_ptr<comm::ProcessGroup> world(&world_ref, [](comm::ProcessGroup*) {});
  const ParallelDims dims = ParallelDims{.dp = c.dp, .tp = c.tp, .zero_stage = c.stage, .cp = c.cp}.resolve(world->size());
  const comm::DeviceMesh mesh(world, dims.mesh_shape());
  // Other seeds on the other ranks (rank 0's weights are broadcast), unless dropout.
  auto model = cp_model(c, st::kModelSeed + (c.dropout > 0 ? 0 : 77 * uint64_t(world->rank())));
  model->to(c.f64 ? DType::f64 : DType::f32);  // the Llama of tp_model is f64 (see there)
  auto pm = parallelize(model, mesh,
                        {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {},
                         .tp_plan = c.tp > 1 ? tpt::tp_plan(c.model) : TpPlan{}, .cp_split = c.split,
                         .make_optimizer = tpt::adamw});
  *described = pm->describe();
  EXPECT_EQ(pm->cp() != nullptr, c.cp > 1);
  tpt::Run out;
  const int64_t per = c.batch / c.dp;
  const int dr = mesh.rank("dp");
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = st::make_batch("gpt", c.batch, s);
    Tensor xr = ops::narrow(x, 0, dr * per, per), yr = ops::narrow(y, 0, dr * per, per);
    Tensor loss = pm->forward_with([&] { return st::batch_loss(pm->module(), xr, yr); });
    out.losses.push_back(st::rank_mean(*world, loss.item<double>()));  // equal token counts everywhere
    backward(loss);
    pm->finalize();
    out.norms.push_back(pm->clip_grad_norm(c.clip));
    pm->step();
    pm->zero_grad();
  }
  const ParallelModel::FullParams full = pm->summon_full_params();
  for (const auto& [name, t] : pm->module().state_dict()) out.state.emplace_back(name, ops::clone(t));
  if (world->rank() == 0) {
    auto [x, y] = st::make_batch("gpt", c.batch, c.steps);
    NoGradGuard no_grad;
    out.eval_loss = st::batch_loss(pm->module(), x, y).item<double>();
  }
  return out;
}

/// The single-process reference (the tp harness's, in f64 when c.f64).
inline tpt::Run reference(const CpCase& c) {
  tpt::Run out;
  auto model = cp_model(c, st::kModelSeed);
  model->to(c.f64 ? DType::f64 : DType::f32);  // the Llama of tp_model is f64 (see there)
  auto opt = tpt::adamw(model->named_parameters());
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = st::make_batch("gpt", c.batch, s);
    Tensor loss = st::batch_loss(*model, x, y);
    out.losses.push_back(loss.item<double>());
    backward(loss);
    out.norms.push_back(optim::clip_grad_norm(model->parameters(), c.clip));
    opt->step();
    opt->zero_grad();
  }
  auto [x, y] = st::make_batch("gpt", c.batch, c.steps);
  out.eval_loss = st::batch_loss(*model, x, y).item<double>();
  out.state = model->state_dict();
  return out;
}

/// Runs c on this rank of `world` (dp * cp * tp ranks) against the single-process
/// reference (computed by every rank itself).
inline void check_on(comm::ProcessGroup& w, const CpCase& c) {
  const double tol = c.f64 ? 1e-9 : 1e-5, state_tol = c.f64 ? 1e-9 : 1e-4;
  tpt::Run want = reference(c);
  std::vector<Tensor> want_kb;
  want.state = tpt::without_key_bias(want.state, &want_kb);
  {
    std::string described;
    tpt::Run got = cp_run(w, c, &described);
    std::vector<Tensor> got_kb;
    got.state = tpt::without_key_bias(got.state, &got_kb);
    const std::string what = name_of(c) + ": " + described + ", rank " + std::to_string(w.rank());
    ASSERT_EQ(got_kb.size(), want_kb.size());
    for (size_t i = 0; i < got_kb.size(); ++i) st::expect_close(got_kb[i], want_kb[i], state_tol, what.c_str());
    std::string worst;
    EXPECT_LT(st::max_relative_error(got.state, want.state, &worst), state_tol) << what << " worst " << worst;
    if (w.rank() == 0) {
      EXPECT_NEAR(got.eval_loss, want.eval_loss, tol * std::abs(want.eval_loss)) << what;
    }
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t s = 0; s < got.losses.size(); ++s) {
      EXPECT_NEAR(got.losses[s], want.losses[s], tol * std::abs(want.losses[s])) << what << " loss " << s;
      EXPECT_NEAR(got.norms[s], want.norms[s], tol * want.norms[s]) << what << " norm " << s;
    }
  }
}

}  // namespace strata::testing::cp
