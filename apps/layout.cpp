// The degrees, the mesh and the composed model of one `strata train` run.
#include "apps/layout.h"

#include <optional>

#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>

namespace strata::apps {
namespace {

// Seed of replica k's init/dropout generator (k >= 1; replica 0 uses run.seed).
uint64_t replica_seed(uint64_t seed, uint64_t k) { return seed + k * 0x9E3779B97F4A7C15ull; }

}  // namespace

parallel::LayoutChecks layout_checks(const TrainConfig& cfg, int world) {
  const ModelFamily& family = model_family(cfg);
  return {.model = family.limits(cfg),
          .model_type = cfg.model.type,
          .context_parallel = family.sequences.context_parallel,
          .sequence_parallel_ok = family.sequences.sequence_parallel,
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
  const ModelFamily& family = model_family(cfg);
  const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
  parallel::TpPlan plan = family.tp_plan(cfg, sp);
  parallel::PipelinePlan pp_plan = family.pp_plan(*model, cfg.parallel.pp_layers, sp ? dims.tp : 1, dims.cp);
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
