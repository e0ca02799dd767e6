// The pipeline equivalence harness (local-backend gtests and the mpirun test): a GPT's
// pipeline plan (as apps/layout.cpp builds it), one process's reference on the whole
// batch, and a pipeline rank trained through parallelize() on the same batches.
#pragma once
#include <strata/comm/device_mesh.h>
#include <strata/nn/gpt.h>
#include <strata/nn/llama_plans.h>
#include <strata/optim/clip.h>
#include <strata/parallel/parallelize.h>
#include "tp_harness.h"

namespace strata::testing {

struct PpCase {
  std::string family = "gpt";  // gpt | llama (2 query heads on 1 key/value head, the family's own plan)
  parallel::ScheduleKind kind = parallel::ScheduleKind::one_f_one_b;
  int pp = 2;
  int m = 2;
  int v = 1;
  int dp = 1;
  int zero_stage = 0;
  bool tied = true;
  bool checkpoint = false;
  int steps = 3;
  int64_t per_mb = 2;   // sequences per micro-batch per dp rank
  int64_t layers = 8;
  double clip = 0.0;    // > 0: clip the global gradient norm every step
  std::vector<int64_t> pp_layers{};  // parallel.pp_layers; empty: balanced
  Device device = kCPU;  // where each rank trains (pp_reference always runs on the CPU)
  int64_t batch() const { return per_mb * m * dp; }
};

inline nn::GPTConfig pp_gpt_config(const PpCase& c) {
  return {.vocab = 16, .block_size = 8, .n_layer = c.layers, .n_head = 2, .n_embd = 8, .tie_weights = c.tied,
          .checkpoint = c.checkpoint};
}

inline std::shared_ptr<nn::GPT> pp_gpt(const PpCase& c) {
  Generator gen(kModelSeed);
  return std::make_shared<nn::GPT>(pp_gpt_config(c), gen);
}

inline nn::LlamaConfig pp_llama_config(const PpCase& c) {
  return {.vocab = 16, .block_size = 8, .n_layer = c.layers, .n_head = 2, .n_kv_head = 1, .n_embd = 8,
          .intermediate_size = 16, .tie_weights = c.tied, .checkpoint = c.checkpoint};
}

/// The case's model: pp_gpt, or the Llama of pp_llama_config.
inline std::shared_ptr<nn::Module> pp_model(const PpCase& c) {
  if (c.family == "gpt") return pp_gpt(c);
  Generator gen(kModelSeed);
  return std::make_shared<nn::Llama>(pp_llama_config(c), gen);
}

/// The GPT's split: embeddings first, ln_f and the head (wte when tied) last.
inline parallel::PipelinePlan pp_gpt_plan(const nn::GPTConfig& cfg) {
  parallel::PipelinePlan p;
  p.blocks = "h";
  p.first = {"wte", "wpe", "drop"};
  p.last = {"ln_f", cfg.tie_weights ? "wte" : "lm_head"};
  if (cfg.tie_weights) p.tied = {"wte.weight"};
  p.forward = [](nn::Module& m, const parallel::PipelineStageSpec& s, const Tensor& in) {
    return dynamic_cast<nn::GPT&>(m).forward_stage(in, s.begin, s.end, s.first(), s.last());
  };
  p.loss = [](const Tensor& out, const Tensor& y) {
    return cross_entropy(reshape(out, {-1, out.size(out.dim() - 1)}), ops::reshape(y, {-1}), -1);
  };
  const int64_t c = cfg.n_embd;
  p.activation = [c](const parallel::PipelineStageSpec&, const Shape& in) {
    return parallel::ActivationSpec{{in[0], in[1], c}, DType::f32};
  };
  return p;
}

/// A max_norm no gradient reaches: clip_grad_norm only measures the norm. Every run
/// records each step's gradient norm before the optimizer so a wrong gradient scale
/// (AdamW is invariant to one) shows even when the case does not clip.
inline constexpr double kMeasureOnly = 1e300;

struct PpRun {
  std::vector<double> losses;
  std::vector<double> norms;  // each step's global gradient norm before clipping
  nn::NamedTensors params;  // this rank's (its stages'), after the steps
};

/// One process on the whole batch: `c.steps` AdamW steps.
inline PpRun pp_reference(const PpCase& c) {
  PpRun r;
  auto model = pp_model(c);
  tp::gpt_reference_steps(*model, c.steps, c.batch(), c.clip > 0 ? c.clip : kMeasureOnly, r.losses, r.norms);
  r.params = model->named_parameters();
  return r;
}

/// The layout dp x pp (mesh pp x dp) of case `c` (any case with kind, pp, m, v, dp and
/// zero_stage) over `world` built by parallelize(), with `plan` splitting `model`.
template <class Case>
std::unique_ptr<parallel::ParallelModel> pp_parallelize_with(std::shared_ptr<comm::ProcessGroup> world, const Case& c,
                                                             std::shared_ptr<nn::Module> model, parallel::PipelinePlan plan,
                                                             parallel::OptimizerFactory make_optimizer = tp::adamw) {
  const parallel::ParallelDims dims = parallel::ParallelDims{.dp = c.dp, .tp = 1, .pp = c.pp, .zero_stage = c.zero_stage}
                                          .resolve(world->size());
  return parallel::parallelize(std::move(model), comm::DeviceMesh(std::move(world), dims.mesh_shape()),
                               {.dims = dims,
                                .pipeline = {.schedule = c.kind, .microbatches = c.m, .virtual_stages = c.v},
                                .pp_plan = std::move(plan),
                                .make_optimizer = std::move(make_optimizer)});
}

/// The GPT of `c` over `world` with the test pipeline plan (pp_gpt_plan).
inline std::unique_ptr<parallel::ParallelModel> pp_parallelize(std::shared_ptr<comm::ProcessGroup> world,
                                                               const PpCase& c, std::shared_ptr<nn::GPT> model) {
  parallel::PipelinePlan plan = pp_gpt_plan(model->config());
  plan.layers = c.pp_layers;
  if (!c.device.is_cpu()) model->to(c.device);  // before the optimizer: its state follows the parameters
  return pp_parallelize_with(std::move(world), c, std::move(model), std::move(plan));
}

/// The model of `c` over `world`: the GPT with the test plan (pp_gpt_plan), the Llama with
/// its family's own plan (nn::llama_pp_plan, c.pp_layers).
inline std::unique_ptr<parallel::ParallelModel> pp_parallelize_family(std::shared_ptr<comm::ProcessGroup> world,
                                                                      const PpCase& c) {
  if (c.family == "gpt") return pp_parallelize(std::move(world), c, pp_gpt(c));
  Generator gen(kModelSeed);
  auto model = std::make_shared<nn::Llama>(pp_llama_config(c), gen);
  parallel::PipelinePlan plan = nn::llama_pp_plan(*model, c.pp_layers);
  if (!c.device.is_cpu()) model->to(c.device);
  return pp_parallelize_with(std::move(world), c, std::move(model), std::move(plan));
}

/// This rank's dp share of step s's batch (rows [dp_rank * B/dp, ...)), on c.device.
inline std::pair<Tensor, Tensor> pp_batch(const PpCase& c, int step, int dp_rank) {
  auto [x, y] = make_batch("gpt", c.batch(), step);
  const int64_t b = c.batch() / c.dp;
  return {ops::contiguous(ops::narrow(x, 0, dp_rank * b, b)).to(c.device),
          ops::contiguous(ops::narrow(y, 0, dp_rank * b, b)).to(c.device)};
}

/// One rank of the pipeline: `c.steps` steps through pm (losses: the batch mean, the same
/// on every rank).
inline PpRun pp_train(parallel::ParallelModel& pm, const PpCase& c) {
  PpRun r;
  const int dp_rank = pm.mesh().rank("dp");
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = pp_batch(c, s, dp_rank);
    double loss = pm.forward_backward({x, y});
    pm.finalize();
    if (c.dp > 1) loss = rank_mean(*pm.mesh()["dp"], loss);
    r.losses.push_back(loss);
    r.norms.push_back(pm.clip_grad_norm(c.clip > 0 ? c.clip : kMeasureOnly));
    pm.step();
    pm.zero_grad();
  }
  r.params = pm.module().named_parameters();
  return r;
}

/// Every parameter this rank holds equals the reference's of the same name.
inline void expect_params_match(const nn::NamedTensors& mine, const nn::NamedTensors& ref, double tol,
                                const std::string& what) {
  ASSERT_FALSE(mine.empty()) << what;
  for (const auto& [n, t] : mine) {
    const Tensor* r = nullptr;
    for (const auto& [rn, rt] : ref)
      if (rn == n) r = &rt;
    ASSERT_NE(r, nullptr) << what << ": " << n << " is not a parameter of the whole model";
    expect_close(t, *r, tol, (what + ": " + n).c_str());
  }
}

/// Trains the model of `c` (pp_parallelize_family) on this rank of `world` and compares
/// each step's loss and gradient norm (absolute tol, norms tol * (1 + norm)) and every
/// parameter this rank holds (expect_params_match) with pp_reference; the parameters
/// must be on c.device. Collective over `world`.
inline void pp_check_on(std::shared_ptr<comm::ProcessGroup> world, const PpCase& c, double tol) {
  const PpRun ref = pp_reference(c);
  auto pm = pp_parallelize_family(world, c);
  const PpRun run = pp_train(*pm, c);
  const std::string what = c.family + " " + parallel::schedule_name(c.kind) + " rank " + std::to_string(world->rank());
  ASSERT_EQ(run.losses.size(), ref.losses.size()) << what;
  for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(run.losses[s], ref.losses[s], tol) << what << " step " << s;
  // The gradient norm before each step (AdamW hides a common gradient scale).
  ASSERT_EQ(run.norms.size(), ref.norms.size()) << what;
  ASSERT_EQ(ref.norms.size(), size_t(c.steps)) << what;
  for (size_t s = 0; s < ref.norms.size(); ++s)
    EXPECT_NEAR(run.norms[s], ref.norms[s], tol * (1 + ref.norms[s])) << what << " gradient norm, step " << s;
  for (const auto& [n, t] : run.params) EXPECT_EQ(t.device(), c.device) << what << ": " << n;
  expect_params_match(run.params, ref.params, tol, what);
}

}  // namespace strata::testing
