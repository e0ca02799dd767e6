// The ZeRO / DDP per-rank memory formulas (see memory_plan.h): shard padding and the
// four stages as plain integer arithmetic.
#include <strata/parallel/memory_plan.h>

#include <strata/core/error.h>

namespace strata::parallel {

int64_t shard_elements(int64_t n, int world) {
  STRATA_CHECK(n >= 0, "[plan_memory] a flat unit has a negative element count: ", n);
  STRATA_CHECK(world >= 1, "[plan_memory] world size must be >= 1, got ", world);
  return (n + world - 1) / world;
}

int64_t sharded_elements(std::span<const int64_t> units, int world) {
  int64_t s = 0;
  for (int64_t n : units) s += shard_elements(n, world);
  return s;
}

int optimizer_state_count(const std::string& optim_name, double momentum) {
  if (optim_name == "adam" || optim_name == "adamw") return 2;
  if (optim_name == "sgd") return momentum > 0 ? 1 : 0;
  STRATA_CHECK(false, "[plan_memory] unknown optimizer '", optim_name, "' (expected sgd|adam|adamw)");
  return 0;
}

int64_t tp_rank_elements(const MemoryPlanInput& in) {
  STRATA_CHECK(in.tp >= 1, "[plan_memory] tp must be >= 1, got ", in.tp);
  STRATA_CHECK(in.tp_sharded_elements >= 0 && in.tp_sharded_elements <= in.param_elements &&
                   in.tp_sharded_elements % in.tp == 0,
               "[plan_memory] ", in.tp_sharded_elements, " tensor-parallel elements of ", in.param_elements,
               " do not split into tp = ", in.tp);
  return in.tp_sharded_elements / in.tp + (in.param_elements - in.tp_sharded_elements);
}

MemoryPlanInput sixteen_bit_states(MemoryPlanInput in) {
  in.bytes_per_element = 2;
  in.state_bytes_per_element = 4;
  in.master_bytes_per_element = 4;
  return in;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  STRATA_CHECK(in.param_elements >= 0, "[plan_memory] param_elements must be >= 0, got ", in.param_elements);
  STRATA_CHECK(in.bytes_per_element >= 1, "[plan_memory] bytes_per_element must be >= 1, got ", in.bytes_per_element);
  STRATA_CHECK(in.optimizer_states >= 0, "[plan_memory] optimizer_states must be >= 0, got ", in.optimizer_states);
  STRATA_CHECK(in.world_size >= 1, "[plan_memory] world_size must be >= 1, got ", in.world_size);
  STRATA_CHECK(in.zero_stage >= 0 && in.zero_stage <= 3, "[plan_memory] zero_stage must be 0..3, got ",
               in.zero_stage);
  STRATA_CHECK(in.state_bytes_per_element >= 0 && in.master_bytes_per_element >= 0,
               "[plan_memory] state and master bytes per element must be >= 0, got ", in.state_bytes_per_element,
               " and ", in.master_bytes_per_element);
  STRATA_CHECK(in.ddp_bucket_bytes >= 0, "[plan_memory] ddp_bucket_bytes must be >= 0, got ", in.ddp_bucket_bytes);
  const int64_t psi = tp_rank_elements(in);  // Ψ of this tp rank (all of it at tp 1)
  int64_t sharded = 0;                       // Ψ': elements per rank of the padded flat shards
  if (in.flat_units.empty()) {
    sharded = shard_elements(psi, in.world_size);
  } else {
    int64_t sum = 0;
    for (int64_t n : in.flat_units) sum += n;
    STRATA_CHECK(sum == psi, "[plan_memory] flat units hold ", sum, " elements but the model has ", psi,
                 " parameters (per tp rank)");
    sharded = sharded_elements(in.flat_units, in.world_size);
  }
  const int64_t b = in.bytes_per_element;
  const int64_t full = b * psi;  // BΨ
  const int64_t shard = b * sharded;           // BΨ'
  MemoryPlan p;
  p.params = in.zero_stage >= 3 ? shard : full;
  p.grads = in.zero_stage >= 2 ? shard : full;
  const int64_t state_b = in.state_bytes_per_element > 0 ? in.state_bytes_per_element : b;
  const int64_t k = int64_t(in.optimizer_states) * state_b + in.master_bytes_per_element;  // K bytes per element
  p.optimizer = k * (in.zero_stage >= 1 ? sharded : psi);
  p.comm = in.zero_stage == 0 ? in.ddp_bucket_bytes : 0;
  return p;
}

MemoryPlan plan_backward_peak(const MemoryPlanInput& in) {
  STRATA_CHECK(in.zero_stage <= 1, "[plan_memory] the backward peak of ZeRO stage ", in.zero_stage,
               " depends on when the comm thread completes each unit (bounded in docs/zero.md), not planned exactly");
  MemoryPlan p = plan_memory(in);
  if (in.zero_stage == 1) {
    const int64_t psi = tp_rank_elements(in);
    const int64_t sharded =
        in.flat_units.empty() ? shard_elements(psi, in.world_size) : sharded_elements(in.flat_units, in.world_size);
    p.comm += in.bytes_per_element * sharded;
  }
  return p;
}

int64_t sequence_region_activation_bytes(const SequenceRegionInput& in) {
  STRATA_CHECK(in.batch > 0 && in.seq > 0 && in.embd > 0 && in.layers > 0 && in.tp >= 1,
               "[plan_memory] batch, seq, embd, layers and tp must be positive");
  const bool sp = in.sequence_parallel && in.tp > 1;
  STRATA_CHECK(!sp || in.seq % in.tp == 0, "[plan_memory] a sequence of ", in.seq, " does not split into tp = ",
               in.tp);
  const int64_t rows = in.batch * (sp ? in.seq / in.tp : in.seq), regions = 2 * in.layers + 1;
  const int64_t norm = rows * in.embd * in.bytes_per_element + 2 * rows * 4;
  const int64_t mask = in.dropout ? rows * in.embd : 0;
  return regions * (norm + mask);
}

}  // namespace strata::parallel
