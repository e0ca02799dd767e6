// ParallelDims: resolving dp: auto and the checks every layout must pass.
#include <strata/parallel/parallel_dims.h>

#include <strata/core/config.h>

namespace strata::parallel {

ParallelDims ParallelDims::resolve(int world) const {
  ParallelDims d = *this;
  const auto positive = [](const char* key, int v) {
    if (v < 1) config_fail(std::string("parallel.") + key, "must be >= 1, got " + std::to_string(v));
  };
  positive("tp", tp);
  positive("pp", pp);
  if (dp != kAuto) positive("dp", dp);
  if (zero_stage < 0 || zero_stage > 3)
    config_fail("parallel.zero_stage", "expected a value in [0, 3], got " + std::to_string(zero_stage));
  if (dp == kAuto) {
    if (world % (tp * pp) != 0)
      config_fail("parallel.dp", "is auto but the world of " + std::to_string(world) +
                                     " rank(s) is not divisible by tp x pp = " + std::to_string(tp * pp));
    d.dp = world / (tp * pp);
  }
  if (d.world() != world)
    config_fail("parallel", "dp x tp x pp = " + std::to_string(d.dp) + " x " + std::to_string(tp) + " x " +
                                std::to_string(pp) + " = " + std::to_string(d.world()) + " rank(s), but the world has " +
                                std::to_string(world) + " (start with mpirun -np " + std::to_string(d.world()) +
                                ", or set parallel.dp: auto)");
  return d;
}

void ParallelDims::check_model(const ModelLimits& m) const {
  if (m.heads && *m.heads % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but model.n_head = " + std::to_string(*m.heads) +
                                   " is not divisible by it (each tp rank holds whole heads)");
  if (m.vocab && *m.vocab % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but the vocabulary of " + std::to_string(*m.vocab) +
                                   " is not divisible by it (each tp rank holds a vocabulary range)");
  if (m.layers && *m.layers < pp)
    config_fail("parallel.pp", "is " + std::to_string(pp) + " but model.n_layer = " + std::to_string(*m.layers) +
                                   " (each stage needs at least one block)");
}

comm::MeshShape ParallelDims::mesh_shape() const {
  STRATA_CHECK(dp >= 1, "[ParallelDims] mesh_shape() needs a resolved dp (call resolve(world) first)");
  return comm::MeshShape({{"pp", pp}, {"dp", dp}, {"tp", tp}});
}

std::string ParallelDims::dp_strategy() const {
  if (zero_stage > 0) return "ZeRO-" + std::to_string(zero_stage);
  return dp > 1 ? "DDP" : "single process";
}

std::string ParallelDims::str() const {
  return "dp " + (dp == kAuto ? std::string("auto") : std::to_string(dp)) + " x tp " + std::to_string(tp) +
         " x pp " + std::to_string(pp) + ", zero_stage " + std::to_string(zero_stage);
}

}  // namespace strata::parallel
