// The 3D (dp x tp x pp, ZeRO on dp) harness, shared by the local-backend gtests and the
// mpirun -np 8 test: a GPT with 4 heads and 4 blocks under its own tensor-parallel and
// pipeline plans (nn/gpt_plans.h), the single-process reference, one rank's run through
// parallelize(), and the comparison of a rank's tp shards with the reference's tensors
// (no gather: each shard's global runs are compared in place).
#pragma once
#include <string>
#include <vector>

#include <strata/comm/device_mesh.h>
#include <strata/nn/gpt.h>
#include <strata/nn/gpt_plans.h>
#include <strata/nn/llama_plans.h>
#include <strata/optim/clip.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/parallelize.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/tensor/checkpoint.h>
#include "tp_harness.h"

namespace strata::testing::threed {

using namespace strata::parallel;  // NOLINT: test harness
namespace st = strata::testing;

/// One layout (dp, tp, pp, zero) and its schedule. The global batch is the same whatever
/// the layout (each dp rank takes batch / dp rows, cut into m micro-batches under pp).
struct Case {
  std::string family = "gpt";  ///< gpt | llama (4 query heads on 2 key/value heads)
  int dp = 1, tp = 2, pp = 2, zero = 0;
  bool sp = false;  ///< sequence parallelism (tp > 1)
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int m = 2, v = 1;
  bool tied = true;
  double clip = 0.0;  ///< > 0: clip the global gradient norm every step
  int steps = 3;      ///< the run trains steps [first, steps)
  int first = 0;
  int64_t batch = 16;
  int dp_shard = 0;   ///< HSDP: ranks per ZeRO shard group (0: all dp ranks)
  int experts = 0;    ///< > 0: blocks 1 and 3 are MoE layers of this many experts (top_k 2)
  int ep = 1;         ///< expert parallelism (carved out of dp)
  double capacity = 0;  ///< MoE capacity factor (0: dropless)
  int top_k = 2;        ///< MoE experts per token
  bool zero_router = false;  ///< MoE routers start at zero: every score ties (hostile routing)
  int shared = 0;       ///< MoE shared experts
  bool overlap = true;  ///< the shared experts compute while the routed rows travel (ep)
  int world() const { return dp * tp * pp; }
  std::string str() const {
    std::string s = "(dp " + std::to_string(dp) + ", tp " + std::to_string(tp) + ", pp " + std::to_string(pp) +
                    ", zero " + std::to_string(zero) + ")";
    if (pp > 1) s += std::string(" ") + schedule_name(kind) + " m " + std::to_string(m) + " v " + std::to_string(v);
    if (sp) s += " sp";
    if (!tied) s += " untied";
    if (dp_shard > 0) s += " dp_shard " + std::to_string(dp_shard);
    if (family != "gpt") s += " " + family;
    if (experts > 0) s += " moe " + std::to_string(experts) + " ep " + std::to_string(ep);
    if (capacity > 0) s += " capacity " + std::to_string(capacity);
    if (shared > 0) s += " shared " + std::to_string(shared);
    return s;
  }
};

/// The MoE keys of a case: top-2 of c.experts on blocks 1 and 3, both auxiliary losses on.
inline nn::MoEConfig moe_config(const Case& c) {
  nn::MoEConfig m;
  m.experts = c.experts;
  m.top_k = c.top_k;
  m.every = 2;
  m.aux_loss_coef = 0.01;
  m.z_loss_coef = 0.001;
  m.capacity_factor = c.capacity;
  m.shared_experts = c.shared;
  m.shared_expert_overlap = c.overlap;
  return m;
}

inline nn::GPTConfig gpt_config(const Case& c) {
  nn::GPTConfig g{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 4, .n_embd = 16, .tie_weights = c.tied};
  g.moe = moe_config(c);
  return g;
}

/// Every rank builds the same model (pipeline stages are not broadcast).
inline std::shared_ptr<nn::GPT> gpt(const Case& c) {
  Generator gen(st::kModelSeed);
  return std::make_shared<nn::GPT>(gpt_config(c), gen);
}

inline nn::LlamaConfig llama_config(const Case& c) {
  nn::LlamaConfig l{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .n_embd = 16,
                    .intermediate_size = 32, .tie_weights = c.tied};
  l.moe = moe_config(c);
  return l;
}

/// The case's model (the same on every rank).
inline std::shared_ptr<nn::Module> model_of(const Case& c) {
  std::shared_ptr<nn::Module> m;
  if (c.family == "gpt") {
    m = gpt(c);
  } else {
    Generator gen(st::kModelSeed);
    m = std::make_shared<nn::Llama>(llama_config(c), gen);
  }
  if (c.zero_router)
    for (const auto& [path, moe] : nn::moe_layers(*m)) {
      Tensor w = moe->parameter("router.weight");
      ops::fill_(w, 0.0);
    }
  return m;
}

struct Run {
  std::vector<double> losses, norms;  ///< of steps [first, steps)
  nn::NamedTensors params;            ///< this rank's (its stages', its tp shards), after the steps
  nn::NamedTensors opt_state;         ///< reference only: the optimizer's tensors
};

/// One process on the whole batch: `c.steps` AdamW steps.
inline Run reference(const Case& c) {
  Run r;
  auto model = model_of(c);
  auto opt = tp::gpt_reference_steps(*model, c.steps, c.batch, c.clip, r.losses, r.norms);
  r.params = model->named_parameters();
  r.opt_state = opt->state_dict().tensors;
  return r;
}

/// The layout of `c` over `world` (c.world() ranks; mesh pp x dp x tp) by parallelize().
inline std::unique_ptr<ParallelModel> build(std::shared_ptr<comm::ProcessGroup> world, const Case& c) {
  const ParallelDims dims =
      ParallelDims{.dp = c.dp, .tp = c.tp, .pp = c.pp, .zero_stage = c.zero, .dp_shard = c.dp_shard, .ep = c.ep}.resolve(
          world->size());
  std::shared_ptr<nn::Module> model = model_of(c);
  const int64_t seq_shards = c.sp && c.tp > 1 ? c.tp : 1;
  const bool llama = c.family != "gpt";
  PipelinePlan plan = llama ? nn::llama_pp_plan(dynamic_cast<const nn::Llama&>(*model), {}, seq_shards)
                            : nn::gpt_pp_plan(dynamic_cast<const nn::GPT&>(*model), {}, seq_shards);
  return parallelize(std::move(model), comm::DeviceMesh(std::move(world), dims.mesh_shape()),
                     {.dims = dims,
                      .ddp = {},
                      .fsdp_prefetch = true,
                      .fsdp_wrap = {},
                      .tp_plan = c.tp <= 1 ? TpPlan{}
                                 : llama  ? nn::llama_tp_plan(llama_config(c), c.sp)
                                          : nn::gpt_tp_plan(gpt_config(c), c.sp),
                      .pipeline = {.schedule = c.kind, .microbatches = c.m, .virtual_stages = c.v},
                      .pp_plan = std::move(plan),
                      .make_optimizer = tp::adamw});
}

/// This rank's run of steps [c.first, c.steps): each dp rank its rows of the global batch;
/// losses are the global batch's mean (averaged over dp).
inline Run train(ParallelModel& pm, const Case& c) {
  Run r;
  const int dr = pm.mesh().rank("dp");
  const int64_t per = c.batch / c.dp;
  for (int s = c.first; s < c.steps; ++s) {
    auto [xb, yb] = st::make_batch("gpt", c.batch, s);
    const Tensor x = ops::contiguous(ops::narrow(xb, 0, dr * per, per)), y = ops::contiguous(ops::narrow(yb, 0, dr * per, per));
    double loss = 0;
    if (pm.pipeline()) {
      loss = pm.forward_backward({x, y});
    } else {
      Tensor l = pm.forward_with([&] { return st::batch_loss(pm.module(), x, y); });
      loss = l.item<double>();
      backward(l);
    }
    pm.finalize();
    r.losses.push_back(st::rank_mean(*pm.mesh()["dp"], loss));
    if (c.clip > 0) r.norms.push_back(pm.clip_grad_norm(c.clip));
    pm.step();
    pm.zero_grad();
  }
  const ParallelModel::FullParams full = pm.summon_full_params();  // ZeRO-3 (and tp at pp 1: whole modules)
  for (const auto& [n, t] : pm.module().named_parameters()) r.params.emplace_back(n, ops::clone(t));
  return r;
}

/// The reference tensor named `name`, or null.
inline const Tensor* find(const nn::NamedTensors& ts, const std::string& name) {
  for (const auto& [n, t] : ts)
    if (n == name) return &t;
  return nullptr;
}

/// Every tensor this rank holds equals the reference's: whole ones directly, tp shards
/// element by element at their places in the global tensor (tp_global_runs).
/// Tolerance tol * (1 + |ref|) per element, as the pipeline tests.
inline void expect_match(const nn::NamedTensors& mine, const nn::NamedTensors& ref, const TpLayout* tp, double tol,
                         const std::string& what) {
  ASSERT_FALSE(mine.empty()) << what;
  for (const auto& [n, t] : mine) {
    const Tensor* rt = find(ref, n);
    ASSERT_NE(rt, nullptr) << what << ": " << n << " is not a tensor of the whole model";
    const std::vector<double> want = rt->to_vector<double>(), got = t.to_vector<double>();
    const TpShardedParam* sp = tp ? tp_sharded_of(*tp, n) : nullptr;
    if (t.shape() == rt->shape() || sp == nullptr) {
      ASSERT_EQ(t.shape(), rt->shape()) << what << ": " << n;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << ": " << n << " element " << i;
      continue;
    }
    int64_t at = 0;
    for (const auto& [gb, ge] : tp_global_runs(*sp, tp->tp->rank(), tp->tp->size(), 0, t.numel()))
      for (int64_t g = gb; g < ge; ++g, ++at)
        ASSERT_NEAR(got[size_t(at)], want[size_t(g)], tol * (1 + std::abs(want[size_t(g)])))
            << what << ": " << n << " shard element " << at << " (global " << g << ")";
    ASSERT_EQ(at, t.numel()) << what << ": " << n;
  }
}

/// Losses (and norms) of steps [c.first, c.steps) equal the reference's.
inline void expect_losses(const Run& got, const Run& want, const Case& c, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), size_t(c.steps - c.first)) << what;
  for (size_t i = 0; i < got.losses.size(); ++i) {
    const size_t s = i + size_t(c.first);
    EXPECT_NEAR(got.losses[i], want.losses[s], tol * std::abs(want.losses[s])) << what << " loss of step " << s;
    if (c.clip > 0) {
      EXPECT_NEAR(got.norms[i], want.norms[s], tol * want.norms[s]) << what << " norm of step " << s;
    }
  }
}

/// Saves pm's checkpoint pieces under `dir` (collective over the world), with the
/// optimizer's scalars, the mesh and the ZeRO stage in the index.
inline void save(ParallelModel& pm, const Case& c, const std::string& dir) {
  CheckpointLayout layout{.mesh = {}, .zero_stage = c.zero};
  for (const auto& d : pm.mesh().shape().dims()) layout.mesh.emplace_back(d.name, d.size);
  save_sharded(dir, *pm.mesh().world(), RankPieces{.ranges = pm.state_pieces(), .boxes = {}}, layout,
               {{kOptimizerMetaKey, pm.optimizer().state_dict().scalars}});
}

}  // namespace strata::testing::threed
