// The tensor-parallel test harness: small models with their TP plans, the single-process
// reference, and one rank's run through parallelize() (with optional checkpoint save and
// resume), shared by the equivalence and checkpoint tests.
#pragma once
#include <string>
#include <vector>

#include <strata/comm/local.h>
#include <strata/nn/gpt.h>
#include <strata/nn/gpt_plans.h>
#include <strata/nn/llama_plans.h>
#include <strata/optim/adam.h>
#include <strata/parallel/parallelize.h>
#include "zero_equivalence.h"

namespace strata::testing::tp {

using namespace strata::parallel;  // NOLINT: test harness
namespace st = strata::testing;

struct TpCase {
  // mlp | gpt | gpt_ckpt | gpt_untied | gpt_untied_ckpt | llama | llama_ckpt | llama_tied | llama_mqa
  std::string model = "mlp";
  bool vocab = true;           // the GPT's wte (and untied lm_head) vocab_parallel
  bool sp = false;             // sequence parallelism (sequence_norm entries)
  int dp = 1, tp = 2, stage = 0;
  int steps = 3;       // the run trains steps [first, steps)
  int first = 0;
  int64_t batch = 8;
  double clip = 0.5;
  std::string load{};  // resume from this checkpoint before step `first`
  std::string save{};  // save a checkpoint here after step `save_after` (collective)
  int save_after = -1;
  Device device = kCPU;  // where each rank trains (the reference always runs on the CPU)
  double tol = 1e-5;     // losses, norms, eval loss and state: relative; the q/k bias: absolute
};

inline bool has(const std::string& kind, const char* part) { return kind.find(part) != std::string::npos; }

// Heads divisible by 4 (the shared harness's GPT has 2).
inline nn::GPTConfig tp_gpt_config(const std::string& kind) {
  return {.vocab = 16,
          .block_size = 8,
          .n_layer = 2,
          .n_head = 4,
          .n_embd = 16,
          .tie_weights = !has(kind, "untied"),
          .checkpoint = has(kind, "ckpt")};
}

inline bool is_llama(const std::string& kind) { return kind.rfind("llama", 0) == 0; }

// 4 query heads on 2 key/value heads (grouped-query attention: tp 2 holds one kv head per
// rank), untied unless "tied"; llama_mqa: one key/value head (tp 1 only).
inline nn::LlamaConfig tp_llama_config(const std::string& kind) {
  return {.vocab = 16,
          .block_size = 8,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = has(kind, "mqa") ? 1 : 2,
          .n_embd = 16,
          .intermediate_size = 32,
          .tie_weights = has(kind, "tied"),
          .checkpoint = has(kind, "ckpt")};
}

inline std::shared_ptr<nn::Module> tp_model(const std::string& kind, uint64_t seed) {
  if (kind == "mlp") return st::make_model("mlp", seed);
  Generator gen(seed);
  if (is_llama(kind)) {  // in f64, as st::make_model's Llama (see there)
    auto m = std::make_shared<nn::Llama>(tp_llama_config(kind), gen);
    m->to(DType::f64);
    return m;
  }
  return std::make_shared<nn::GPT>(tp_gpt_config(kind), gen);
}

// The MLP's first hidden pair (net.1 colwise, net.3 rowwise); the GPT's own plan
// (nn/gpt_plans.h), without its vocab_parallel entries unless `vocab`.
inline TpPlan tp_plan(const std::string& kind, bool vocab = true, bool sp = false) {
  if (kind == "mlp") return {{"net.1", TpStyle::colwise}, {"net.3", TpStyle::rowwise}};
  TpPlan p = is_llama(kind) ? nn::llama_tp_plan(tp_llama_config(kind), sp) : nn::gpt_tp_plan(tp_gpt_config(kind), sp);
  if (!vocab)
    for (const char* head : {"wte", "lm_head", "tok_embeddings", "output"}) p.erase(head);
  return p;
}

/// AdamW at lr 1e-3 (weight decay 0.1). Adam divides each gradient element by its own
/// running magnitude, so an element whose gradient is a near-cancelling sum turns the
/// sum's rounding (which differs with the reduction order of each layout) into a
/// difference of up to ~lr in its update: at lr 1e-2 a few such elements of this model
/// differed by 1-3e-5 after 3 steps (tp, pipeline and 3D layouts alike, and more with the
/// AVX-512 loops, whose f32 sums run in another order); at 1e-3 every layout of the tp,
/// pipeline and 3D harnesses is within 1e-5.
inline std::unique_ptr<optim::Optimizer> adamw(optim::NamedTensors params) {
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.1});
}

inline std::string data_kind(const std::string& model) { return model == "mlp" ? "mlp" : "gpt"; }

/// The one-process reference of the pipeline and 3D harnesses: `steps` AdamW steps of the
/// GPT on whole batches of `batch` sequences; the losses, and the clipped norms when
/// clip > 0. Returns the optimizer (its state is compared by the 3D tests).
inline std::unique_ptr<optim::Optimizer> gpt_reference_steps(nn::Module& model, int steps, int64_t batch, double clip,
                                                             std::vector<double>& losses, std::vector<double>& norms) {
  auto opt = adamw(model.named_parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = st::make_batch("gpt", batch, s);
    Tensor loss = st::batch_loss(model, x, y);
    losses.push_back(loss.item<double>());
    backward(loss);
    if (clip > 0) norms.push_back(optim::clip_grad_norm(model.parameters(), clip));
    opt->step();
    opt->zero_grad();
  }
  return opt;
}

struct Run {
  nn::NamedTensors state;
  std::vector<double> losses, norms;
  double eval_loss = 0;  // of batch `steps` after the last step (rank 0 of a parallel run)
};

inline Run reference(const TpCase& c) {
  Run out;
  auto model = tp_model(c.model, st::kModelSeed);
  auto opt = adamw(model->named_parameters());
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = st::make_batch(data_kind(c.model), c.batch, s);
    Tensor loss = st::batch_loss(*model, x, y);
    out.losses.push_back(loss.item<double>());
    backward(loss);
    out.norms.push_back(optim::clip_grad_norm(model->parameters(), c.clip));
    opt->step();
    opt->zero_grad();
  }
  auto [x, y] = st::make_batch(data_kind(c.model), c.batch, c.steps);
  out.eval_loss = st::batch_loss(*model, x, y).item<double>();
  out.state = model->state_dict();
  return out;
}

// This rank's run through parallelize() (each rank starts from its own init: the layout
// must broadcast rank 0's over tp and dp); the state is gathered over tp.
inline Run parallel_run(comm::ProcessGroup& world_ref, const TpCase& c, std::string* described) {
  std::shared_ptr<comm::ProcessGroup> world(&world_ref, [](comm::ProcessGroup*) {});
  const ParallelDims dims = ParallelDims{.dp = c.dp, .tp = c.tp, .zero_stage = c.stage}.resolve(world->size());
  const comm::DeviceMesh mesh(world, dims.mesh_shape());
  auto model = tp_model(c.model, st::kModelSeed + 77 * uint64_t(world->rank()));
  if (!c.device.is_cpu()) model->to(c.device);  // before the optimizer: its state follows the parameters
  auto pm = parallelize(model, mesh,
                        {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = tp_plan(c.model, c.vocab, c.sp),
                         .make_optimizer = adamw});
  *described = pm->describe();
  EXPECT_EQ(pm->tp() != nullptr, c.tp > 1);
  if (!c.load.empty()) pm->load_state(CheckpointReader(c.load), /*with_optimizer=*/true);
  Run out;
  const int64_t per = c.batch / c.dp;
  const int dr = mesh.rank("dp");
  for (int s = c.first; s < c.steps; ++s) {
    auto [x, y] = st::make_batch(data_kind(c.model), c.batch, s);
    Tensor xr = ops::narrow(x, 0, dr * per, per).to(c.device), yr = ops::narrow(y, 0, dr * per, per).to(c.device);
    Tensor loss = pm->forward_with([&] { return st::batch_loss(pm->module(), xr, yr); });
    out.losses.push_back(st::rank_mean(*mesh["dp"], loss.item<double>()));
    backward(loss);
    pm->finalize();
    out.norms.push_back(pm->clip_grad_norm(c.clip));
    pm->step();
    pm->zero_grad();
    if (s == c.save_after) {
      CheckpointLayout layout{.mesh = {}, .zero_stage = c.stage};
      for (const auto& d : mesh.shape().dims()) layout.mesh.emplace_back(d.name, d.size);
      save_sharded(c.save, *world, RankPieces{.ranges = pm->state_pieces(), .boxes = {}}, layout,
                   {{kOptimizerMetaKey, pm->optimizer().state_dict().scalars}});
    }
  }
  // The whole model on every rank (tp shards gathered): rank 0 evaluates it alone.
  const ParallelModel::FullParams full = pm->summon_full_params();
  for (const auto& [name, t] : pm->module().state_dict()) {
    EXPECT_EQ(t.device(), c.device) << name;
    out.state.emplace_back(name, ops::clone(t));
  }
  if (world->rank() == 0) {
    auto [x, y] = st::make_batch(data_kind(c.model), c.batch, c.steps);
    NoGradGuard no_grad;
    out.eval_loss = st::batch_loss(pm->module(), x.to(c.device), y.to(c.device)).item<double>();
  }
  return out;
}

// The key bias of attention has a zero gradient in exact arithmetic (a constant added to
// every key's score), so Adam turns its rounding noise into updates of ~lr * wd-bounded
// size (1e-6 here) whose sign depends on summation order. The query bias's gradient,
// sum_j dS_ij k_j with sum_j dS_ij = 0, is a difference of nearly equal terms at this
// init, and Adam (scale-free) turns its relative rounding noise into updates of ~1e-6
// too (seen at tp 4 with the untied head). Both thirds are compared absolutely (1e-5);
// the value third relatively, with everything else.
inline nn::NamedTensors without_key_bias(const nn::NamedTensors& state, std::vector<Tensor>* key_bias) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state) {
    if (name.size() < 16 || name.compare(name.size() - 16, 16, "attn.c_attn.bias") != 0) {
      out.emplace_back(name, t);
      continue;
    }
    const int64_t c = t.size(0) / 3;
    key_bias->push_back(ops::narrow(t, 0, 0, 2 * c));  // q | k
    out.emplace_back(name, ops::narrow(t, 0, 2 * c, c));
  }
  return out;
}

/// Runs c on this rank of `world` (c.dp * c.tp ranks) and compares the gathered state
/// after the last step, and the losses and norms of steps [c.first, c.steps), with the
/// single-process reference (computed by every rank itself).
inline void check_on(comm::ProcessGroup& world, const TpCase& c) {
  TpCase ref = c;
  ref.first = 0;
  Run want = reference(ref);
  std::vector<Tensor> want_kb;
  want.state = without_key_bias(want.state, &want_kb);
  std::string described;
  Run got = parallel_run(world, c, &described);
  std::vector<Tensor> got_kb;
  got.state = without_key_bias(got.state, &got_kb);
  ASSERT_EQ(got_kb.size(), want_kb.size());
  for (size_t i = 0; i < got_kb.size(); ++i) st::expect_close(got_kb[i], want_kb[i], c.tol, "query/key bias");
  const std::string what = c.model + (c.vocab ? " vocab" : "") + (c.sp ? " sp" : "") + ", " + described + ", rank " +
                           std::to_string(world.rank());
  std::string worst;
  EXPECT_LT(st::max_relative_error(got.state, want.state, &worst), c.tol) << what << " worst " << worst;
  if (world.rank() == 0) {
    EXPECT_NEAR(got.eval_loss, want.eval_loss, c.tol * std::abs(want.eval_loss)) << what;
  }
  ASSERT_EQ(got.losses.size(), size_t(c.steps - c.first));
  for (size_t i = 0; i < got.losses.size(); ++i) {
    const size_t s = i + size_t(c.first);
    EXPECT_NEAR(got.losses[i], want.losses[s], c.tol * std::abs(want.losses[s])) << what << " loss " << s;
    EXPECT_NEAR(got.norms[i], want.norms[s], c.tol * want.norms[s]) << what << " norm " << s;
  }
}

/// check_on over c.dp * c.tp local ranks.
inline void check(const TpCase& c) {
  comm::run_local(c.dp * c.tp, [&](comm::ProcessGroup& w) { check_on(w, c); });
}

}  // namespace strata::testing::tp
