// The ZeRO / DDP per-rank memory formulas (see memory_plan.h): shard padding and the
// four stages as plain integer arithmetic.
#include <strata/parallel/memory_plan.h>

#include <algorithm>
#include <deque>

#include <strata/core/error.h>
#include <strata/parallel/data/zero_schedule.h>

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

int64_t dense_rank_elements(const MemoryPlanInput& in) {
  const int64_t all = tp_rank_elements(in);
  STRATA_CHECK(in.expert_elements >= 0 && in.expert_elements <= all, "[plan_memory] ", in.expert_elements,
               " expert elements of the ", all, " this rank holds");
  return all - in.expert_elements;
}

int64_t ep_rank_expert_elements(int64_t expert_elements, int ep) {
  STRATA_CHECK(ep >= 1 && expert_elements >= 0 && expert_elements % ep == 0, "[plan_memory] ", expert_elements,
               " expert elements do not split into ep = ", ep);
  return ep > 1 ? expert_elements / ep : 0;
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
  const int64_t psi = dense_rank_elements(in);  // Ψ of this tp rank (all of it at tp 1), less its experts
  const int64_t ex = in.expert_elements;          // replicated over dp / ep, never sharded
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
  p.params = (in.zero_stage >= 3 ? shard : full) + b * ex;
  p.grads = (in.zero_stage >= 2 ? shard : full) + b * ex;
  const int64_t state_b = in.state_bytes_per_element > 0 ? in.state_bytes_per_element : b;
  const int64_t k = int64_t(in.optimizer_states) * state_b + in.master_bytes_per_element;  // K bytes per element
  p.optimizer = k * ((in.zero_stage >= 1 ? sharded : psi) + ex);
  p.comm = in.zero_stage == 0 ? in.ddp_bucket_bytes : 0;
  return p;
}

MemoryPlan plan_backward_peak(const MemoryPlanInput& in) {
  STRATA_CHECK(in.zero_stage <= 1, "[plan_memory] the backward peak of ZeRO stage ", in.zero_stage,
               " depends on its units: use plan_backward_peak(in, zero_backward_schedule(zero)) (zero_schedule.h)");
  MemoryPlan p = plan_memory(in);
  if (in.zero_stage == 1) {
    const int64_t psi = dense_rank_elements(in);
    const int64_t sharded =
        in.flat_units.empty() ? shard_elements(psi, in.world_size) : sharded_elements(in.flat_units, in.world_size);
    p.comm += in.bytes_per_element * sharded;
  }
  return p;
}

namespace {

// Stages 2-3: the runtime's backward (zero_state.cpp) replayed event by event on byte
// counters, one per category; each event updates the category's high-water mark.
struct BackwardReplay {
  BackwardReplay(const ZeroBackwardSchedule& zs, int64_t bytes, bool s3) : z(zs), b(bytes), stage3(s3) {}
  const ZeroBackwardSchedule& z;
  int64_t b;  // bytes per element of parameters and gradients
  bool stage3;
  int64_t grads = 0, grads_peak = 0, comm = 0, comm_peak = 0;
  std::vector<int> remaining;       // per unit: parameters whose gradient has not arrived
  std::vector<char> gathered, seen;  // per unit (stage 3)
  std::vector<int64_t> param_numel;  // per registration index
  std::vector<int> unit_of;
  std::deque<int64_t> staged;        // bytes of each staged unit, launch order
  size_t next = 0;                   // next unit to launch (index into launch_order)

  void add_grads(int64_t v) {
    grads += v;
    grads_peak = std::max(grads_peak, grads);
  }
  void gather(int u) {
    if (u < 0 || u >= int(z.units.size()) || gathered[size_t(u)] || z.units[size_t(u)].numel == 0) return;
    gathered[size_t(u)] = 1;
    comm += b * z.units[size_t(u)].padded();
    comm_peak = std::max(comm_peak, comm);
  }
  void reshard(int u) {
    if (!gathered[size_t(u)]) return;
    gathered[size_t(u)] = 0;
    comm -= b * z.units[size_t(u)].padded();
  }
  // ZeroState::pre_backward: the unit, and the one backward reaches next (root: the last).
  void pre_backward(int u) {
    gather(u);
    if (z.prefetch) {
      const int j = u == 0 ? int(z.units.size()) - 1 : u - 1;
      if (j >= 1) gather(j);
    }
  }
  // ZeroState::launch_ready, from the hook of parameter `hook_param` (its .grad is
  // released by the engine only after the hook returns).
  // Returns whether the hooked parameter's unit was launched.
  bool launch_ready(int hook_param) {
    bool hooked = false;
    while (next < z.launch_order.size()) {
      const int v = z.launch_order[next];
      if (remaining[size_t(v)] > 0) break;
      ++next;
      const FlatUnit& u = z.units[size_t(v)];
      if (u.numel == 0) continue;
      while (staged.size() > size_t(z.reduce_scatter_depth - 1)) {
        grads -= staged.front();
        staged.pop_front();
      }
      add_grads(b * u.padded());
      staged.push_back(b * u.padded());
      for (int p : u.params)
        if (p != hook_param) grads -= b * param_numel[size_t(p)];
      hooked |= v == unit_of[size_t(hook_param)];
    }
    return hooked;
  }
};

}  // namespace

MemoryPlan plan_backward_peak(const MemoryPlanInput& in, const ZeroBackwardSchedule& z) {
  if (in.zero_stage <= 1) return plan_backward_peak(in);
  MemoryPlan p = plan_memory(in);
  STRATA_CHECK(z.reduce_scatter_depth >= 1, "[plan_memory] reduce_scatter_depth must be >= 1, got ",
               z.reduce_scatter_depth);
  STRATA_CHECK(z.launch_order.size() == z.units.size(), "[plan_memory] ", z.launch_order.size(),
               " units in the launch order, ", z.units.size(), " units");
  BackwardReplay r(z, in.bytes_per_element, in.zero_stage == 3);
  int nparams = 0;
  int64_t total = 0;
  for (const FlatUnit& u : z.units) {
    STRATA_CHECK(u.world == in.world_size, "[plan_memory] unit '", u.name, "' is padded for ", u.world,
                 " ranks, the plan has ", in.world_size);
    total += u.numel;
    for (int q : u.params) nparams = std::max(nparams, q + 1);
  }
  STRATA_CHECK(total == dense_rank_elements(in), "[plan_memory] the units hold ", total,
               " elements but the model has ", dense_rank_elements(in), " (less its experts)");
  r.param_numel.assign(size_t(nparams), 0);
  r.unit_of.assign(size_t(nparams), -1);
  r.remaining.assign(z.units.size(), 0);
  r.gathered.assign(z.units.size(), 0);
  r.seen.assign(z.units.size(), 0);
  for (size_t k = 0; k < z.units.size(); ++k) {
    const FlatUnit& u = z.units[k];
    for (size_t e = 0; e < u.params.size(); ++e) {
      STRATA_CHECK(r.unit_of[size_t(u.params[e])] < 0, "[plan_memory] parameter ", u.params[e], " is in two units");
      r.unit_of[size_t(u.params[e])] = int(k);
      r.param_numel[size_t(u.params[e])] = u.numels[e];
    }
    r.remaining[k] = int(u.params.size());
  }
  r.grads = r.grads_peak = p.grads;  // the gradient slices
  if (r.stage3 && !z.units.empty()) r.pre_backward(0);  // the loss's hook: backward starts in the root
  for (int q = nparams - 1; q >= 0; --q) {
    const int u = r.unit_of[size_t(q)];
    if (u < 0) continue;
    if (r.stage3 && u != 0 && !r.seen[size_t(u)]) r.pre_backward(u);  // backward reaches the unit
    r.seen[size_t(u)] = 1;
    r.add_grads(r.b * r.param_numel[size_t(q)]);
    if (--r.remaining[size_t(u)] > 0) continue;
    if (r.stage3) r.reshard(u);
    if (r.launch_ready(q)) r.grads -= r.b * r.param_numel[size_t(q)];  // the engine drops the hooked gradient
  }
  // finalize(): waits for the staged units and frees them; nothing is allocated.
  p.grads = r.grads_peak;
  p.comm = r.comm_peak;
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
