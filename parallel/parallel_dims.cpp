// ParallelDims: resolving dp: auto and the checks every layout must pass.
#include <strata/parallel/parallel_dims.h>

#include <strata/core/config.h>

namespace strata::parallel {
namespace {

// HSDP's dp_shard / dp_replicate against the resolved dp: fills dp_shard from dp_replicate.
void resolve_hybrid(ParallelDims& d) {
  int& dp_shard = d.dp_shard;
  const int dp_replicate = d.dp_replicate, dp = d.dp, zero_stage = d.zero_stage;
  if (dp_shard < 0) config_fail("parallel.dp_shard", "must be >= 0 (0 = every dp rank), got " + std::to_string(dp_shard));
  if (dp_replicate < 0)
    config_fail("parallel.dp_replicate", "must be >= 0 (0 = dp / dp_shard), got " + std::to_string(dp_replicate));
  if (dp_replicate > 0) {
    if (dp % dp_replicate != 0)
      config_fail("parallel.dp_replicate", detail::str_cat("is ", dp_replicate, " but does not divide parallel.dp = ", dp));
    if (dp_shard == 0) dp_shard = dp / dp_replicate;
    if (dp_shard * dp_replicate != dp)
      config_fail("parallel.dp_replicate", detail::str_cat("is ", dp_replicate, " but parallel.dp_shard x dp_replicate = ",
                                                           dp_shard, " x ", dp_replicate, " = ", dp_shard * dp_replicate,
                                                           " is not parallel.dp = ", dp));
  }
  if (dp_shard == 0) return;
  if (dp % dp_shard != 0)
    config_fail("parallel.dp_shard", detail::str_cat("is ", dp_shard, " but does not divide parallel.dp = ", dp,
                                                     " (the dp ranks are cut into dp / dp_shard shard groups)"));
  if (zero_stage == 0 && dp_shard < dp)
    config_fail("parallel.dp_shard", detail::str_cat("is ", dp_shard, " but parallel.zero_stage is 0: hybrid sharding "
                                                     "shards ZeRO's state within groups of dp_shard ranks (set "
                                                     "zero_stage: 1|2|3, or drop dp_shard for DDP)"));
}

}  // namespace

ParallelDims ParallelDims::resolve(int world) const {
  ParallelDims d = *this;
  const auto positive = [](const char* key, int v) {
    if (v < 1) config_fail(std::string("parallel.") + key, "must be >= 1, got " + std::to_string(v));
  };
  positive("tp", tp);
  positive("pp", pp);
  positive("cp", cp);
  positive("ep", ep);
  if (dp != kAuto) positive("dp", dp);
  if (zero_stage < 0 || zero_stage > 3)
    config_fail("parallel.zero_stage", "expected a value in [0, 3], got " + std::to_string(zero_stage));
  if (dp == kAuto) {
    const int rest = cp * tp * pp;
    if (world % rest != 0)
      config_fail("parallel.dp", "is auto but the world of " + std::to_string(world) + " rank(s) is not divisible by " +
                                     (cp > 1 ? "cp x tp x pp = " : "tp x pp = ") + std::to_string(rest));
    d.dp = world / rest;
  }
  if (d.world() != world)
    config_fail("parallel", std::string(cp > 1 ? "dp x cp x tp x pp = " : "dp x tp x pp = ") + std::to_string(d.dp) +
                                (cp > 1 ? " x " + std::to_string(cp) : std::string()) + " x " + std::to_string(tp) + " x " +
                                std::to_string(pp) + " = " + std::to_string(d.world()) + " rank(s), but the world has " +
                                std::to_string(world) + " (start with mpirun -np " + std::to_string(d.world()) +
                                ", or set parallel.dp: auto)");
  resolve_hybrid(d);
  if (d.dp % d.ep != 0)
    config_fail("parallel.ep", detail::str_cat("is ", d.ep, " but does not divide parallel.dp = ", d.dp,
                                               " (expert parallelism is carved out of the data-parallel ranks)"));
  return d;
}

void ParallelDims::check_model(const ModelLimits& m) const {
  if (m.heads && *m.heads % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but model.n_head = " + std::to_string(*m.heads) +
                                   " is not divisible by it (each tp rank holds whole heads)");
  if (m.vocab && *m.vocab % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but the vocabulary of " + std::to_string(*m.vocab) +
                                   " is not divisible by it (each tp rank holds a vocabulary range)");
  if (m.block_size && cp > 1 && *m.block_size % (2 * cp) != 0)
    config_fail("parallel.cp", "is " + std::to_string(cp) + " but model.block_size = " + std::to_string(*m.block_size) +
                                   " is not divisible by 2 x cp = " + std::to_string(2 * cp) +
                                   " (the zigzag split gives each rank two chunks of every sequence)");
  if (m.experts && *m.experts % ep != 0)
    config_fail("parallel.ep", "is " + std::to_string(ep) + " but model.moe.experts = " + std::to_string(*m.experts) +
                                   " is not divisible by it (each ep rank holds experts / ep whole experts)");
  if (m.layers && *m.layers < pp)
    config_fail("parallel.pp", "is " + std::to_string(pp) + " but model.n_layer = " + std::to_string(*m.layers) +
                                   " (each stage needs at least one block)");
}

void ParallelDims::validate(const LayoutChecks& c) const {
  if (c.replicas > 0 && c.world > 1)
    config_fail("parallel.replicas", "runs thread replicas inside one process (DataParallel), but this process is "
                                     "one of " + std::to_string(c.world) +
                                     " MPI ranks: drop parallel.replicas (the ranks train with DDP), or start one process");
  check_model(c.model);
  if (c.global_batch && *c.global_batch % dp != 0)
    config_fail("train.batch_size", "is " + std::to_string(*c.global_batch) + " but must be divisible by the " +
                                        std::to_string(dp) + " data-parallel ranks (the global batch is split evenly)");
  if (pp > 1) {
    if (c.model.layers && *c.model.layers < int64_t(pp) * c.virtual_stages)
      config_fail("parallel.pp_virtual", detail::str_cat("gives pp x pp_virtual = ", pp * c.virtual_stages,
                                                         " stages but model.n_layer = ", *c.model.layers,
                                                         " (each stage needs at least one block)"));
    if (c.global_batch && (*c.global_batch / dp) % c.microbatches != 0)
      config_fail("parallel.microbatches", detail::str_cat("is ", c.microbatches, " but each data-parallel rank's batch of ",
                                                           *c.global_batch / dp, " is not divisible by it"));
    if (c.precision == Precision::f16)
      config_fail("run.precision",
                  "is f16 but the pipeline does not scale its micro-batch losses (use bf16 or f32 with pp > 1)");
    if (c.grad_accum_steps != 1)
      config_fail("train.grad_accum_steps", detail::str_cat("is ", c.grad_accum_steps,
                                                            " but the pipeline accumulates over its micro-batches: use "
                                                            "parallel.microbatches instead (grad_accum_steps: 1)"));
  }
  if (cp > 1) {
    if (c.context_parallel == false)
      config_fail("parallel.cp", detail::str_cat("is ", cp, " but model.type is '", c.model_type,
                                                 "': its family has no sequences to split"));
    if (c.precision != Precision::f32)
      config_fail("run.precision", detail::str_cat("is ", precision_name(c.precision),
                                                   " but ring attention (parallel.cp > 1) runs in f32 only"));
    if (c.sequence_parallel && tp > 1)
      config_fail("parallel.sequence_parallel", "is true but does not compose with parallel.cp > 1 in this version");
  }
  if (c.model.experts) {
    if (c.cuda) config_fail("run.device", "is a CUDA device but the mixture-of-experts layer has no CUDA path yet");
    if (c.replicas > 0)
      config_fail("parallel.replicas", "runs thread replicas, which do not carry the MoE auxiliary losses: use ranks");
    if (c.sequence_parallel && tp > 1)
      config_fail("parallel.sequence_parallel", "is true but does not compose with model.moe in this version (the "
                                                "MoE layers run replicated over tp on whole sequences)");
    if (c.model.moe_capacity && cp > 1)
      config_fail("model.moe.capacity_factor", detail::str_cat("is set but parallel.cp = ", cp,
                                                               " splits each sequence, and the capacity is decided per "
                                                               "whole sequence: use dropless routing (0) with cp"));
    if (ep > 1 && (c.precision == Precision::f16_params || c.precision == Precision::f16))
      config_fail("run.precision", detail::str_cat("is ", precision_name(c.precision),
                                                   " but expert parallelism does not unscale its experts' gradients "
                                                   "with the loss scaler in this version (use bf16 or bf16_params)"));
  }
  if (c.sequence_parallel && tp > 1) {
    if (c.sequence_parallel_ok == false)
      config_fail("parallel.sequence_parallel", detail::str_cat("is true but the model (", c.model_type,
                                                                ") has no sequence dimension to shard"));
    if (c.model.block_size && *c.model.block_size % tp != 0)
      config_fail("parallel.sequence_parallel", detail::str_cat("is true but model.block_size = ", *c.model.block_size,
                                                                " is not divisible by parallel.tp = ", tp));
  }
}

comm::MeshShape ParallelDims::mesh_shape() const {
  STRATA_CHECK(dp >= 1, "[ParallelDims] mesh_shape() needs a resolved dp (call resolve(world) first)");
  if (cp > 1) return comm::MeshShape({{"pp", pp}, {"dp", dp}, {"cp", cp}, {"tp", tp}});
  return comm::MeshShape({{"pp", pp}, {"dp", dp}, {"tp", tp}});
}

std::string ParallelDims::dp_strategy() const {
  if (hybrid()) return "HSDP ZeRO-" + std::to_string(zero_stage);
  if (zero_stage > 0) return "ZeRO-" + std::to_string(zero_stage);
  return dp * cp > 1 ? "DDP" : "single process";  // at cp > 1 over the dp x cp ranks
}

std::string ParallelDims::str() const {
  return "dp " + (dp == kAuto ? std::string("auto") : std::to_string(dp)) +
         (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) + " x tp " + std::to_string(tp) +
         " x pp " + std::to_string(pp) + ", zero_stage " + std::to_string(zero_stage) +
         (dp != kAuto && hybrid() ? ", dp_shard " + std::to_string(shard_size()) + " x dp_replicate " +
                                        std::to_string(replicate_size())
                                  : std::string()) +
         (ep > 1 ? ", ep " + std::to_string(ep) : std::string());
}

}  // namespace strata::parallel
