// The world, the degrees, the mesh and the composed model of one `strata train` run.
#include "apps/layout.h"

#include "apps/factory.h"
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/nn/gpt.h>
#include <strata/nn/linear.h>
#include <strata/nn/mlp.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::apps {
namespace {

// Seed of replica k's init/dropout generator (k >= 1; replica 0 uses run.seed).
uint64_t replica_seed(uint64_t seed, uint64_t k) { return seed + k * 0x9E3779B97F4A7C15ull; }

}  // namespace

Device resolve_device(const RunSection& run) {
  Device d = parse_device(run.device);
  if (d.is_cpu()) return d;
  if (run.device == "cuda" && comm::launched_by_mpi()) d.index = comm::local_rank();
#ifdef STRATA_WITH_CUDA
  const int count = cuda::device_count();
  if (count == 0)
    config_fail("run.device", "'" + run.device + "': no CUDA device is visible (" + cuda::unavailable_reason() + ")");
  if (d.index >= count)
    config_fail("run.device", "'" + run.device + "' resolves to cuda:" + std::to_string(d.index) + " but only " +
                                  std::to_string(count) + " CUDA device(s) are visible" +
                                  (run.device == "cuda" ? " (one GPU per rank: start at most that many ranks per node)"
                                                        : ""));
#endif
  return d;
}

std::shared_ptr<comm::ProcessGroup> init_world(const TrainConfig& cfg, Device device) {
  if (!comm::launched_by_mpi()) return comm::make_local_world(1, cfg.comm)[0];
  const bool nccl = cfg.comm_backend == "nccl" || (cfg.comm_backend == "auto" && !device.is_cpu());
  return nccl ? comm::init_nccl_world(cfg.comm, device.index) : comm::init_mpi_world(cfg.comm);
}

parallel::ModelLimits model_limits(const TrainConfig& cfg) {
  if (cfg.model.type != "gpt") return {};
  return {.heads = cfg.model.n_head, .vocab = gpt_vocab(cfg), .layers = cfg.model.n_layer, .block_size = cfg.model.block_size};
}

parallel::TpPlan model_tp_plan(const nn::Module& model, bool sequence_parallel) {
  using parallel::TpStyle;
  parallel::TpPlan plan;
  if (const auto* gpt = dynamic_cast<const nn::GPT*>(&model)) {
    for (int64_t i = 0; i < gpt->config().n_layer; ++i) {
      const std::string h = "h." + std::to_string(i) + ".";
      plan[h + "attn.c_attn"] = TpStyle::colwise_qkv;
      plan[h + "attn.c_proj"] = TpStyle::rowwise;
      plan[h + "mlp.c_fc"] = TpStyle::colwise;
      plan[h + "mlp.c_proj"] = TpStyle::rowwise;
      plan[h + "attn.attn_dropout"] = TpStyle::parallel_rng;  // on this rank's heads
      if (!sequence_parallel) continue;
      for (const char* ln : {"ln_1", "ln_2"}) plan[h + ln] = TpStyle::sequence_norm;
      // On this rank's sequence shard: masks of its own (Megatron forks the tracker there).
      for (const char* d : {"attn.resid_dropout", "mlp.dropout"}) plan[h + d] = TpStyle::parallel_rng;
    }
    plan["wte"] = TpStyle::vocab_parallel;  // with the tied head
    if (!gpt->config().tie_weights) plan["lm_head"] = TpStyle::vocab_parallel;
    if (sequence_parallel) {
      plan["ln_f"] = TpStyle::sequence_norm;
      plan["drop"] = TpStyle::parallel_rng;
    }
  } else if (dynamic_cast<const nn::MLP*>(&model)) {
    // net.<i> in order: Linears (the last is the output layer) and the modules with their
    // own generator (Dropout) after each Linear.
    std::vector<std::string> linears;
    std::vector<std::vector<std::string>> rng_after;
    for (const auto& [name, m] : model.child("net")->named_children()) {
      if (dynamic_cast<const nn::Linear*>(m.get())) {
        linears.push_back("net." + name);
        rng_after.emplace_back();
      } else if (m->own_generator() && !rng_after.empty()) {
        rng_after.back().push_back("net." + name);
      }
    }
    for (size_t i = 0; i + 2 < linears.size(); i += 2) {
      plan[linears[i]] = TpStyle::colwise;
      plan[linears[i + 1]] = TpStyle::rowwise;
      // Dropout between the pair acts on this rank's columns: masks of its own.
      for (const std::string& d : rng_after[i]) plan[d] = TpStyle::parallel_rng;
    }
  }
  return plan;
}

// The MLP by layers: net's children grouped as [Flatten, Linear, act, Dropout],
// [Linear, act, Dropout], ..., [Linear], a stage a run of whole layers; nothing outside
// net. A stage sends its last Linear's (activated) output, (b, width).
// Stages send activations in the model's dtype: bf16 under run.precision bf16_params
// (16-bit activations end to end), f32 otherwise (autocast keeps f32 between layers).
static DType activation_dtype(const nn::Module& model) {
  const auto ps = model.parameters();
  return ps.empty() ? DType::f32 : ps.front().dtype();
}

static parallel::PipelinePlan mlp_pp_plan(const nn::MLP& mlp, const std::vector<int64_t>& layers) {
  parallel::PipelinePlan p;
  p.blocks = "net";
  p.layers = layers;
  std::vector<int64_t> width;  // per block: the feature width of its output
  int64_t w = mlp.config().input;
  bool seen_linear = false;
  for (const auto& [name, m] : mlp.child("net")->named_children()) {
    if (const auto* lin = dynamic_cast<const nn::Linear*>(m.get())) {
      if (seen_linear) p.layer_blocks.push_back(0);  // a Linear starts the next layer
      seen_linear = true;
      w = lin->out_features();
    }
    if (p.layer_blocks.empty()) p.layer_blocks.push_back(0);  // the Flatten joins the first layer
    ++p.layer_blocks.back();
    width.push_back(w);
  }
  p.forward = [](nn::Module& m, const parallel::PipelineStageSpec& s, const Tensor& in) {
    const auto children = m.child("net")->named_children();
    Tensor x = in;
    for (int64_t i = s.begin; i < s.end; ++i) x = (*children[size_t(i)].second)(x);
    return x;
  };
  p.loss = [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
  const DType act = activation_dtype(mlp);
  p.activation = [width, act](const parallel::PipelineStageSpec& s, const Shape& in) {
    return parallel::ActivationSpec{{in[0], width[size_t(s.end) - 1]}, act};
  };
  return p;
}

parallel::PipelinePlan model_pp_plan(const nn::Module& model, const std::vector<int64_t>& layers, int64_t seq_shards,
                                     int64_t cp) {
  parallel::PipelinePlan p;
  if (const auto* mlp = dynamic_cast<const nn::MLP*>(&model)) return mlp_pp_plan(*mlp, layers);
  const auto* gpt = dynamic_cast<const nn::GPT*>(&model);
  if (!gpt) return p;
  const nn::GPTConfig& c = gpt->config();
  p.blocks = "h";
  p.first = {"wte", "wpe", "drop"};
  p.last = {"ln_f", c.tie_weights ? "wte" : "lm_head"};
  if (c.tie_weights) p.tied = {"wte.weight"};
  p.layers = layers;
  p.forward = [](nn::Module& m, const parallel::PipelineStageSpec& s, const Tensor& in) {
    return dynamic_cast<nn::GPT&>(m).forward_stage(in, s.begin, s.end, s.first(), s.last());
  };
  // As GPT::loss: the mean over the B*T positions (from the vocabulary shards under tp).
  p.loss = [gpt](const Tensor& out, const Tensor& y) { return gpt->stage_loss(out, y); };
  p.activation = [n = c.n_embd, seq_shards, cp, gpt, act = activation_dtype(model)](
                     const parallel::PipelineStageSpec&, const Shape& in) {
    const int64_t t = cp > 1 && gpt->lm_hooks().shard_sequence ? in[1] / cp : in[1];  // cp suspended: whole
    return parallel::ActivationSpec{{in[0], t / seq_shards, n}, act};
  };
  return p;
}

parallel::LayoutChecks layout_checks(const TrainConfig& cfg, int world) {
  return {.model = model_limits(cfg),
          .model_type = cfg.model.type,
          .sequences = cfg.model.type == "gpt",
          .global_batch = cfg.train.batch_size,
          .grad_accum_steps = int(cfg.train.grad_accum_steps),
          .precision = cfg.run.precision,
          .cuda = !parse_device(cfg.run.device).is_cpu(),
          .sequence_parallel = cfg.parallel.sequence_parallel,
          .microbatches = cfg.parallel.pipeline.microbatches,
          .virtual_stages = cfg.parallel.pipeline.virtual_stages,
          .replicas = cfg.parallel.replicas,
          .world = world};
}

parallel::ParallelDims resolve_dims(const TrainConfig& cfg, int world) {
  const parallel::LayoutChecks checks = layout_checks(cfg, world);
  if (checks.replicas > 0 && world > 1) cfg.parallel.dims.validate(checks);  // before resolve's world message
  const parallel::ParallelDims dims = cfg.parallel.dims.resolve(world);
  dims.validate(checks);
  return dims;
}

std::unique_ptr<parallel::ParallelModel> build_parallel_model(const TrainConfig& cfg,
                                                              std::shared_ptr<comm::ProcessGroup> world,
                                                              const parallel::ParallelDims& dims,
                                                              std::shared_ptr<nn::Module> model) {
  const parallel::LayoutChecks checks = layout_checks(cfg, world->size());
  const comm::DeviceMesh mesh(std::move(world), dims.mesh_shape());
  const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
  parallel::TpPlan plan = model_tp_plan(*model, sp);
  parallel::PipelinePlan pp_plan = model_pp_plan(*model, cfg.parallel.pp_layers, sp ? dims.tp : 1, dims.cp);
  uint64_t next_replica = 1;
  return parallel::parallelize(
      std::move(model), mesh,
      {.dims = dims,
       .ddp = cfg.parallel.ddp,
       .fsdp_prefetch = cfg.parallel.fsdp_prefetch,
       .fsdp_wrap = {},
       .tp_plan = std::move(plan),
       .pipeline = cfg.parallel.pipeline,
       .pp_plan = std::move(pp_plan),
       .cp_split = cfg.parallel.cp_split == "plain" ? parallel::CpSplit::plain : parallel::CpSplit::zigzag,
       .make_optimizer = [&cfg](optim::NamedTensors p) { return build_optimizer(cfg, std::move(p)); },
       .loss = [&cfg](nn::Module& m, const Tensor& x, const Tensor& y) { return batch_loss(m, cfg, {x, y}); },
       .replicas = cfg.parallel.dp_options(),
       .make_replica =
           [&] {
             Generator g(replica_seed(cfg.run.seed, next_replica++));
             return build_model(cfg, g);
           },
       .checks = checks});
}

std::shared_ptr<data::Sampler> build_sampler(const parallel::ParallelModel& pm, int64_t train_size, uint64_t seed) {
  const comm::DeviceMesh& m = pm.mesh();
  return std::make_shared<data::DistributedSampler>(
      train_size, data::DistributedSamplerOptions{.num_replicas = m.size("dp"), .rank = m.rank("dp"), .seed = seed});
}

}  // namespace strata::apps
