// ZeRO's runtime (see zero_state.h): for stage 3 the gather/free of each unit's
// parameters around its forward and backward (module forward hooks and an identity node
// on the unit's output that fires when backward reaches the unit), and for every stage
// the gradient reduce-scatter of each unit as soon as its last gradient is in.
#include <strata/parallel/data/zero_state.h>

#include <strata/autograd/grad_mode.h>
#include <strata/autograd/lambda_node.h>
#include <strata/core/memory.h>
#include <strata/core/trace.h>
#include <strata/parallel/data/zero_schedule.h>
#include <strata/tensor/ops.h>

namespace strata::parallel::detail {
namespace {
double seconds_since(ZeroClock::time_point t0) {
  return std::chrono::duration<double>(ZeroClock::now() - t0).count();
}
}  // namespace

Tensor slice1d(const Tensor& flat, int64_t begin, int64_t n) { return ops::narrow(flat, 0, begin, n); }

Tensor ZeroState::entry_view(const Tensor& flat, const ZeroUnit& u, size_t e) const {
  return ops::view(slice1d(flat, u.layout.offsets[e], u.layout.numels[e]), shapes[size_t(u.layout.params[e])]);
}

int64_t ZeroState::all_gather_params(double& wait_s) {
  std::vector<comm::Work> works;
  for (auto& u : units)
    if (u.layout.numel > 0) {
      trace::tag_next_op("unit", &u - units.data());
      works.push_back(group.all_gather(u.param_shard, u.param_flat));
    }
  const auto t = ZeroClock::now();
  for (auto& w : works) w.wait();
  wait_s += seconds_since(t);
  return int64_t(works.size());
}

// ------------------------------------------------------------------ stage 3 gather / free

void ZeroState::start_gather(ZeroUnit& u) {
  if (u.gathered || u.layout.numel == 0) {
    u.gathered = true;
    return;
  }
  u.param_flat.storage()->reallocate(MemCategory::comm);
  trace::tag_next_op("unit", &u - units.data());
  u.ag_work = group.all_gather(u.param_shard, u.param_flat);
  u.gathered = true;
  ++stats.all_gathers;
}

void ZeroState::wait_gather(ZeroUnit& u) {
  if (!u.ag_work) return;
  const auto t = ZeroClock::now();
  u.ag_work->wait();
  stats.wait_s += seconds_since(t);
  u.ag_work.reset();
}

void ZeroState::ensure_gathered(ZeroUnit& u) {
  start_gather(u);
  wait_gather(u);
}

void ZeroState::reshard(ZeroUnit& u) {
  if (!policy.shards_params || !u.gathered || full_params) return;
  wait_gather(u);
  if (u.layout.numel > 0) u.param_flat.storage()->release();
  u.gathered = false;
}

// Forward order = unit order; backward visits it reversed.
void ZeroState::prefetch_after(const ZeroUnit& u, int step) {
  if (!opts.prefetch) return;
  const int j = unit_index(u) + step;
  if (j >= 1 && j < int(units.size())) start_gather(units[size_t(j)]);  // unit 0 (root) is handled apart
}

void ZeroState::pre_forward(ZeroUnit& u) {
  if (full_params) return;
  ensure_gathered(u);
  if (!in_backward) prefetch_after(u, +1);
}

Tensor ZeroState::post_forward(ZeroUnit& u, const Tensor& out) {
  if (full_params || in_backward) return out;  // recompute inside backward: keep for its backward
  Tensor y = out;
  if (grad_enabled() && out.requires_grad()) {
    ZeroUnit* up = &u;
    ZeroState* self = this;
    y = record_fn("FsdpPreBackward", out.detach(), {out}, [self, up](const Tensor& g) -> std::vector<Tensor> {
      self->pre_backward(*up);
      return {g};
    });
  }
  reshard(u);
  return y;
}

void ZeroState::pre_backward(ZeroUnit& u) {
  in_backward = true;
  begin_iteration();
  ensure_gathered(u);
  // Backward visits the root first (the loss), then the units from the last one down.
  if (unit_index(u) == 0)
    prefetch_after(units.back(), 0);
  else
    prefetch_after(u, -1);
}

// ------------------------------------------------------------------ gradient reduce-scatter

void ZeroState::begin_iteration() {
  if (active) return;
  active = true;
  next_launch = 0;
  staged.clear();
  stats = ZeroStepStats{};
  for (auto& u : units) {
    u.pending = int(u.layout.params.size());
    u.ready.assign(u.layout.params.size(), 0);
    u.launched = false;
  }
}

void ZeroState::on_grad(int p) {
  ZeroUnit& u = units[size_t(unit_of[size_t(p)])];
  if (!sync && !policy.shards_params) return;  // no_sync: .grad accumulates locally
  trace::Scope ts("zero hook", trace::Cat::hook);
  begin_iteration();
  const int e = entry_of[size_t(p)];
  if (u.ready[size_t(e)]) return;
  u.ready[size_t(e)] = 1;
  if (--u.pending > 0) return;
  if (!u.launched) reshard(u);  // all of this unit's gradients are in: its parameters can go
  if (sync) launch_ready();
}

void ZeroState::launch_ready() {
  while (next_launch < launch_order.size()) {
    ZeroUnit& u = units[size_t(launch_order[next_launch])];
    if (u.pending > 0) return;
    launch(u);
    ++next_launch;
  }
}

void ZeroState::retire_staged(size_t keep) {
  while (staged.size() > keep) {
    ZeroUnit& u = *staged.front();
    staged.pop_front();
    if (u.rs_work && !u.rs_work->is_completed()) {
      const auto t = ZeroClock::now();
      u.rs_work->wait();
      stats.wait_s += seconds_since(t);
    }
    u.rs_in = Tensor();  // the last reference: the comm thread dropped its own before completing
  }
}

void ZeroState::launch(ZeroUnit& u) {
  u.launched = true;
  if (u.layout.numel == 0) return;
  Tensor rs_in;  // the unit's full gradients; only the queued op keeps it once launched
  if (policy.persistent_flat_grads()) {
    for (size_t e = 0; e < u.layout.params.size(); ++e) {
      Tensor& p = params[size_t(u.layout.params[e])];
      Tensor g = p.grad();
      Tensor slot = entry_view(u.grad_flat, u, e);
      if (g.defined() && !g.shares_storage(u.grad_flat)) ops::copy_(slot, g);  // .grad was replaced
      else if (!g.defined()) ops::fill_(slot, 0.0);
      p.set_grad(slot);
    }
    rs_in = u.grad_flat;
  } else {
    // At most L = kZeroReduceScatterDepth (zero_schedule.h) units staged: unit i-L's reduce-scatter is waited
    // for and its staging freed before unit i's is allocated. The staging is charged to
    // grads: it is the unit's full gradient, moved.
    retire_staged(size_t(kZeroReduceScatterDepth - 1));
    {
      MemoryScope scope(MemCategory::grads);
      rs_in = ops::zeros({u.layout.padded()}, u.dtype, device);
    }
    for (size_t e = 0; e < u.layout.params.size(); ++e) {
      Tensor& p = params[size_t(u.layout.params[e])];
      Tensor g = p.grad();
      if (!g.defined()) continue;  // unused: zeros
      Tensor slot = entry_view(rs_in, u, e);
      ops::copy_(slot, g);
      p.set_grad(Tensor());  // only the slice is kept
    }
  }
  const bool direct = policy.shards_grads && grads_fresh;  // nothing to add to: reduce straight into the slice
  {
    MemoryScope scope(MemCategory::comm);
    u.rs_out = direct ? u.grad_shard : ops::empty({u.layout.shard}, u.dtype, device);
  }
  trace::tag_next_op("unit", &u - units.data());
  u.rs_work = group.reduce_scatter(rs_in, u.rs_out, comm::ReduceOp::avg);
  if (!policy.persistent_flat_grads()) {
    u.rs_in = std::move(rs_in);
    staged.push_back(&u);
  }
  ++stats.reduce_scatters;
}

void ZeroState::reduce_accumulated() {
  STRATA_CHECK(sync, "[zero] reduce_accumulated() inside no_sync(): the accumulated gradients are reduced once sync "
                     "is back on");
  trace::Scope ts("zero reduce accumulated", trace::Cat::hook);
  // Hooks under no_sync may have started bookkeeping (stage 3 tracks readiness there):
  // start afresh with nothing launched, every unit complete.
  active = false;
  begin_iteration();
  for (auto& u : units) {
    u.pending = 0;
    std::fill(u.ready.begin(), u.ready.end(), char(1));
  }
  launch_ready();
}

void ZeroState::finalize() {
  if (!active) return;
  if (!sync) {  // no_sync: gradients stay in .grad; stage 3 frees what backward gathered
    for (auto& u : units) reshard(u);
    active = false;
    in_backward = false;
    return;
  }
  // Units some parameter of which got no gradient (unused this step) count as ready.
  for (size_t k = next_launch; k < launch_order.size(); ++k) {
    ZeroUnit& u = units[size_t(launch_order[k])];
    if (u.pending > 0) {
      u.pending = 0;
      reshard(u);
    }
  }
  launch_ready();
  const auto t = ZeroClock::now();
  // HSDP: each unit's slice, averaged over the shard group, goes on to the replicate
  // group as soon as its reduce-scatter is in, while later units' are still waited on.
  const bool replicated = replicate && replicate->size() > 1;
  for (int k : launch_order) {
    ZeroUnit& u = units[size_t(k)];
    if (!u.rs_work) continue;
    u.rs_work->wait();
    u.rs_work.reset();
    if (replicated) {
      trace::tag_next_op("unit", k);
      u.ar_work = replicate->all_reduce(u.rs_out, comm::ReduceOp::avg);
      ++stats.replicate_all_reduces;
    }
    if (!staged.empty() && staged.front() == &u) retire_staged(staged.size() - 1);  // waited: free its staging
  }
  for (int k : launch_order) {
    ZeroUnit& u = units[size_t(k)];
    if (!u.rs_out.defined()) continue;
    if (u.ar_work) {
      u.ar_work->wait();
      u.ar_work.reset();
    }
    if (!u.rs_out.shares_storage(u.grad_shard)) {
      // Stage 1's slice is part of the flat gradients, which hold this rank's local sum
      // since zero_grad(): the average replaces it (accumulate only through no_sync).
      if (grads_fresh || policy.persistent_flat_grads())
        ops::copy_(u.grad_shard, u.rs_out);
      else
        ops::add_(u.grad_shard, u.rs_out);
    }
    u.rs_out = Tensor();
  }
  stats.wait_s += seconds_since(t);
  STRATA_CHECK(staged.empty(), "[zero] ", staged.size(), " staged units left after finalize");
  for (auto& u : units) reshard(u);  // stage 3: nothing stays gathered
  grads_fresh = false;
  active = false;
  in_backward = false;
  last = stats;
}

}  // namespace strata::parallel::detail
