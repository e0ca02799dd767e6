// The world, the degrees, the mesh and the composed model of one `strata train` run.
#include "apps/layout.h"

#include <optional>

#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
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

// The pipeline keys against the model and the batch.
static void check_pipeline(const TrainConfig& cfg, const parallel::ParallelDims& dims) {
  if (dims.pp == 1) return;
  const auto& pl = cfg.parallel.pipeline;
  const std::optional<int64_t> blocks = model_family(cfg).limits(cfg).layers;
  if (blocks && *blocks < int64_t(dims.pp) * pl.virtual_stages)
    config_fail("parallel.pp_virtual", detail::str_cat("gives pp x pp_virtual = ", dims.pp * pl.virtual_stages,
                                               " stages but model.n_layer = ", *blocks,
                                               " (each stage needs at least one block)"));
  const int64_t per_rank = cfg.train.batch_size / dims.dp;
  if (per_rank % pl.microbatches != 0)
    config_fail("parallel.microbatches", detail::str_cat("is ", pl.microbatches, " but each data-parallel rank's batch of ",
                                                 per_rank, " is not divisible by it"));
  if (cfg.run.precision == "f16")
    config_fail("run.precision", "is f16 but the pipeline does not scale its micro-batch losses (use bf16 or f32 with pp > 1)");
  if (cfg.train.grad_accum_steps != 1)
    config_fail("train.grad_accum_steps", detail::str_cat("is ", cfg.train.grad_accum_steps,
                                                  " but the pipeline accumulates over its micro-batches: use "
                                                  "parallel.microbatches instead (grad_accum_steps: 1)"));
}

// Context parallelism (parallel.cp > 1): what it supports in this version.
static void check_context_parallel(const TrainConfig& cfg, const parallel::ParallelDims& dims) {
  if (dims.cp == 1) return;
  const std::string cp = detail::str_cat("is ", dims.cp, " but ");
  if (!model_family(cfg).sequences.context_parallel)
    config_fail("parallel.cp", cp + "model.type is '" + cfg.model.type + "': only the gpt has sequences to split");
  if (cfg.run.precision != "f32")
    config_fail("run.precision", "is " + cfg.run.precision + " but ring attention (parallel.cp > 1) runs in f32 only");
  if (cfg.run.device != "cpu")
    config_fail("run.device", "is " + cfg.run.device + " but ring attention (parallel.cp > 1) has no CUDA kernel yet");
  if (cfg.parallel.sequence_parallel && dims.tp > 1)
    config_fail("parallel.sequence_parallel", "is true but does not compose with parallel.cp > 1 in this version");
}

parallel::ParallelDims resolve_dims(const TrainConfig& cfg, int world) {
  if (cfg.parallel.thread_replicas() && world > 1)
    config_fail("parallel.replicas", "runs thread replicas inside one process (DataParallel), but this process is "
                                     "one of " + std::to_string(world) +
                                     " MPI ranks: drop parallel.replicas (the ranks train with DDP), or start one process");
  const parallel::ParallelDims dims = cfg.parallel.dims.resolve(world);
  dims.check_model(model_family(cfg).limits(cfg));
  if (cfg.train.batch_size % dims.dp != 0)
    config_fail("train.batch_size", "is " + std::to_string(cfg.train.batch_size) + " but must be divisible by the " +
                                        std::to_string(dims.dp) +
                                        " data-parallel ranks (the global batch is split evenly)");
  check_pipeline(cfg, dims);
  check_context_parallel(cfg, dims);
  return dims;
}

std::unique_ptr<parallel::ParallelModel> build_parallel_model(const TrainConfig& cfg,
                                                              std::shared_ptr<comm::ProcessGroup> world,
                                                              const parallel::ParallelDims& dims,
                                                              std::shared_ptr<nn::Module> model) {
  const comm::DeviceMesh mesh(std::move(world), dims.mesh_shape());
  const ModelFamily& family = model_family(cfg);
  const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
  if (sp && !family.sequences.sequence_parallel)
    config_fail("parallel.sequence_parallel",
                detail::str_cat("is true but the model (", model->type_name(), ") has no sequence dimension (only the GPT's)"));
  if (sp && cfg.model.block_size % dims.tp != 0)
    config_fail("parallel.sequence_parallel", detail::str_cat("is true but model.block_size = ", cfg.model.block_size,
                                                      " is not divisible by parallel.tp = ", dims.tp));
  parallel::TpPlan plan = family.tp_plan(cfg, sp);
  parallel::PipelinePlan pp_plan = family.pp_plan(*model, cfg.parallel.pp_layers, sp ? dims.tp : 1, dims.cp);
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
       .make_optimizer = [&cfg](optim::NamedTensors p) { return build_optimizer(cfg, std::move(p)); }});
}

bool needs_data(const parallel::ParallelModel&) { return true; }

std::shared_ptr<data::Sampler> build_sampler(const parallel::ParallelModel& pm, int64_t train_size, uint64_t seed) {
  const comm::DeviceMesh& m = pm.mesh();
  return std::make_shared<data::DistributedSampler>(
      train_size, data::DistributedSamplerOptions{.num_replicas = m.size("dp"), .rank = m.rank("dp"), .seed = seed});
}

std::shared_ptr<parallel::DataParallel> build_replicas(const TrainConfig& cfg, std::shared_ptr<nn::Module> model) {
  uint64_t next = 1;
  return std::make_shared<parallel::DataParallel>(
      std::move(model),
      [&] {
        Generator g(replica_seed(cfg.run.seed, next++));
        return build_model(cfg, g);
      },
      cfg.parallel.dp_options());
}

Tensor replicated_batch_loss(parallel::DataParallel& replicas, const data::Batch& batch) {
  Tensor out = replicas.forward(batch.input);  // classifier (B, classes) | GPT (B, T, vocab)
  if (out.dim() == 3)  // as GPT::loss: mean next-token cross-entropy over B*T positions
    return cross_entropy(reshape(out, {-1, out.size(out.dim() - 1)}), ops::reshape(batch.target, {-1}), -1);
  return cross_entropy(out, batch.target);
}

}  // namespace strata::apps
