// ZeRO-1/2/3 (see zero.h): setup (broadcast, unit planning, flattening the parameters
// into the units, hooks, the optimizer over this rank's slices) and the training-step
// API. The runtime is zero_state.cpp; checkpoints and full state are zero_checkpoint.cpp.
#include <strata/parallel/data/zero.h>

#include <algorithm>
#include <cmath>

#include <strata/autograd/grad_mode.h>
#include <strata/core/memory.h>
#include <strata/optim/clip.h>
#include <strata/parallel/data/bucket_plan.h>
#include <strata/parallel/data/coalesced.h>
#include <strata/parallel/data/zero_schedule.h>
#include <strata/parallel/data/zero_state.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

using detail::slice1d;

Tensor flat_buffer(int64_t n, DType dt, MemCategory c, Device device) {
  MemoryScope scope(c);
  return ops::zeros({n}, dt, device);
}

}  // namespace

// ---------------------------------------------------------------------------- setup

std::vector<std::string> default_wrap_policy(nn::Module& model) {
  std::vector<std::string> out;
  std::function<void(nn::Module&, const std::string&)> walk = [&](nn::Module& m, const std::string& prefix) {
    const bool container = m.type_name() == "ModuleList" || m.type_name() == "Sequential";
    for (const auto& [name, child] : m.named_children()) {
      const std::string path = prefix.empty() ? name : prefix + "." + name;
      if (container && child->num_parameters() > 0)
        out.push_back(path);
      else
        walk(*child, path);
    }
  };
  walk(model, "");
  return out;
}

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                   const ZeroOptions& opts, const OptimizerFactory& make_optimizer,
                                   comm::ProcessGroup* replicate)
    : module_(std::move(module)), group_(group), replicate_(replicate), opts_(opts) {
  const ZeroPolicy policy = ZeroPolicy::for_stage(opts.stage);  // checks the stage
  STRATA_CHECK(opts.bucket_cap_mb > 0, "[zero] bucket_cap_mb must be > 0, got ", opts.bucket_cap_mb);
  STRATA_CHECK(opts.first_unit_mb > 0, "[zero] first_unit_mb must be > 0, got ", opts.first_unit_mb);
  STRATA_CHECK(opts.last_unit_mb > 0, "[zero] last_unit_mb must be > 0, got ", opts.last_unit_mb);
  s_ = std::make_shared<detail::ZeroState>(group, opts);
  auto& s = *s_;
  s.replicate = replicate;
  // Rank 0's weights everywhere, before flattening (HSDP: replica 0's over the replicate
  // group first, then its rank 0's over the shard group).
  std::vector<Tensor> all;
  for (auto& [n, p] : module_->named_parameters()) all.push_back(p);
  for (auto& [n, b] : module_->named_buffers()) {
    all.push_back(b);
    s.buffers.push_back(b);
  }
  if (replicate) broadcast_coalesced(*replicate, all, 0);
  broadcast_coalesced(group, all, 0);

  std::vector<ZeroPlanParam> plan_params;
  for (auto& [n, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    s.names.push_back(n);
    s.params.push_back(p);
    s.shapes.push_back(p.shape());
    plan_params.push_back({n, p.numel(), p.dtype()});
  }
  const int np = int(s.params.size());
  if (np > 0) s.device = s.params[0].device();
  for (int i = 0; i < np; ++i)
    STRATA_CHECK(s.params[size_t(i)].device() == s.device, "[zero] parameter '", s.names[size_t(i)], "' is on ",
                 s.params[size_t(i)].device().str(), " but '", s.names[0], "' is on ", s.device.str(),
                 ": a sharded model lives on one device");

  ZeroUnitSizing sizing{.world = s.world,
                        .cap_bytes = mib_to_bytes(opts.bucket_cap_mb),
                        .first_cap_bytes = mib_to_bytes(opts.first_unit_mb),
                        .last_cap_bytes = mib_to_bytes(opts.last_unit_mb),
                        .wrap = {}};
  if (policy.units_by_module()) {
    sizing.wrap = opts.wrap.empty() ? default_wrap_policy(*module_) : opts.wrap;
    for (const auto& w : sizing.wrap) (void)module_->child(w);  // throws naming the children on a bad path
  }
  const ZeroUnitPlan plan = plan_zero_units(plan_params, policy, sizing);
  s.unit_of = plan.unit_of;
  s.entry_of = plan.entry_of;
  s.launch_order = plan.launch_order;
  s.units.resize(plan.units.size());
  for (size_t k = 0; k < plan.units.size(); ++k) {
    detail::ZeroUnit& u = s.units[k];
    u.layout = plan.units[k];
    u.slices = shard_slices(u.layout, s.rank);
    u.dtype = plan.dtypes[k];
    if (!plan.modules[k].empty()) u.module = module_->child(plan.modules[k]).get();
    const std::vector<int>& idx = u.layout.params;

    // Flatten: copy the (broadcast) values into the unit, then make the parameters views of it.
    const int64_t lo = int64_t(s.rank) * u.layout.shard;
    u.param_flat = flat_buffer(u.layout.padded(), u.dtype,
                               policy.shards_params ? MemCategory::comm : MemCategory::params, s.device);
    for (size_t e = 0; e < idx.size(); ++e) {
      Tensor dst = s.entry_view(u.param_flat, u, e);
      ops::copy_(dst, s.params[size_t(idx[e])]);
    }
    if (policy.shards_params) {
      u.param_shard = flat_buffer(u.layout.shard, u.dtype, MemCategory::params, s.device);
      ops::copy_(u.param_shard, slice1d(u.param_flat, lo, u.layout.shard));
    } else {
      u.param_shard = slice1d(u.param_flat, lo, u.layout.shard);
    }
    if (policy.persistent_flat_grads()) {
      u.grad_flat = flat_buffer(u.layout.padded(), u.dtype, MemCategory::grads, s.device);
      u.grad_shard = slice1d(u.grad_flat, lo, u.layout.shard);
    } else {
      u.grad_shard = flat_buffer(u.layout.shard, u.dtype, MemCategory::grads, s.device);
    }
    for (size_t e = 0; e < idx.size(); ++e) {
      const int p = idx[e];
      Tensor v = s.entry_view(u.param_flat, u, e);
      v.set_requires_grad(true);
      module_->set_parameter(s.names[size_t(p)], v);
      s.params[size_t(p)] = module_->parameter(s.names[size_t(p)]);
      if (policy.persistent_flat_grads()) s.params[size_t(p)].set_grad(s.entry_view(u.grad_flat, u, e));
    }
    if (policy.shards_params) u.param_flat.storage()->release();
  }

  std::weak_ptr<detail::ZeroState> weak = s_;
  for (int p = 0; p < np; ++p)
    s.params[size_t(p)].register_post_accumulate_grad_hook([weak, p](Tensor&) {
      if (auto st = weak.lock()) st->on_grad(p);
    });
  for (auto& u : s.units) {
    if (!u.module) continue;
    detail::ZeroUnit* up = &u;
    u.hook_id = u.module->register_forward_hooks(
        [weak, up](nn::Module&) {
          if (auto st = weak.lock()) st->pre_forward(*up);
        },
        [weak, up](nn::Module&, const Tensor& out) {
          auto st = weak.lock();
          return st ? st->post_forward(*up, out) : out;
        });
  }

  // The optimizer sees this rank's slices: 1-D views of the parameter and gradient slices.
  optim::NamedTensors pieces;
  for (auto& u : s.units)
    for (const ShardSlice& sl : u.slices) {
      Tensor piece = slice1d(u.param_shard, sl.shard_offset, sl.size());
      piece.set_requires_grad(true);
      piece.set_grad(slice1d(u.grad_shard, sl.shard_offset, sl.size()));
      pieces.emplace_back(s.names[size_t(sl.param)], piece);
    }
  s.optimizer = make_optimizer(std::move(pieces));
  STRATA_CHECK(s.optimizer != nullptr, "[zero] the optimizer factory returned null");
}

ZeroDataParallel::~ZeroDataParallel() {
  for (auto& u : s_->units) {
    if (u.module && u.hook_id >= 0) u.module->remove_forward_hooks(u.hook_id);
    try {
      if (u.ag_work) u.ag_work->wait();
      if (u.rs_work) u.rs_work->wait();
      if (u.ar_work) u.ar_work->wait();
    } catch (...) {  // the group failed; nothing left to wait for
    }
  }
}

// ---------------------------------------------------------------------------- step

Tensor ZeroDataParallel::forward_with(const std::function<Tensor()>& fn) {
  auto& s = *s_;
  STRATA_CHECK(!s.active || !s.sync, "[zero] forward while the previous backward was not finalized: call finalize() "
                                     "after backward");
  if (opts_.broadcast_buffers && !s.buffers.empty()) {
    if (replicate_ && replicate_->size() > 1) broadcast_coalesced(*replicate_, s.buffers, 0);
    if (s.world > 1) broadcast_coalesced(group_, s.buffers, 0);
  }
  if (!s.policy.shards_params || s.units.empty()) return fn();
  detail::ZeroUnit& root = s.units[0];
  s.in_backward = false;
  s.ensure_gathered(root);
  s.prefetch_after(root, +1);
  Tensor out = fn();
  return s.post_forward(root, out);
}

Tensor ZeroDataParallel::forward(const Tensor& x) {
  return forward_with([&] { return module_->forward(x); });
}

void ZeroDataParallel::finalize() { s_->finalize(); }

void ZeroDataParallel::reduce_accumulated() { s_->reduce_accumulated(); }

double ZeroDataParallel::clip_grad_norm(double max_norm) {
  STRATA_CHECK(max_norm > 0, "[zero clip_grad_norm] max_norm must be > 0, got ", max_norm);
  auto& s = *s_;
  double local = 0;
  for (auto& u : s.units)
    if (u.layout.shard > 0) local += ops::sum_squares(u.grad_shard);  // padding is zero
  const double total =
      std::sqrt(comm::all_reduce_host(group_, ops::full({1}, local, DType::f64), comm::ReduceOp::sum).item<double>());
  const double f = optim::clip_factor(total, max_norm);
  if (f < 1.0)
    for (auto& u : s.units)
      if (u.layout.shard > 0) ops::mul_(u.grad_shard, f);
  return total;
}

void ZeroDataParallel::step() {
  auto& s = *s_;
  NoGradGuard no_grad;
  s.optimizer->step();
  if (s.policy.shards_params) return;  // the next forward gathers the updated slices
  s.last.all_gathers = s.all_gather_params(s.last.wait_s);
}

void ZeroDataParallel::zero_grad() {
  auto& s = *s_;
  s.grads_fresh = true;
  for (auto& u : s.units) {
    if (s.policy.persistent_flat_grads()) {
      ops::fill_(u.grad_flat, 0.0);
      for (size_t e = 0; e < u.layout.params.size(); ++e)
        s.params[size_t(u.layout.params[e])].set_grad(s.entry_view(u.grad_flat, u, e));
    } else {
      ops::fill_(u.grad_shard, 0.0);
      for (int p : u.layout.params) s.params[size_t(p)].set_grad(Tensor());
    }
  }
}

ZeroNoSyncGuard ZeroDataParallel::no_sync() { return ZeroNoSyncGuard(*this); }

ZeroNoSyncGuard::ZeroNoSyncGuard(ZeroDataParallel& z) : z_(&z), prev_(z.s_->sync) { z.s_->sync = false; }
ZeroNoSyncGuard::~ZeroNoSyncGuard() {
  if (z_) z_->s_->sync = prev_;
}

ZeroDataParallel::FullParams ZeroDataParallel::summon_full_params() {
  auto& s = *s_;
  if (s.policy.shards_params && !s.full_params) {
    for (auto& u : s.units) s.start_gather(u);
    for (auto& u : s.units) s.wait_gather(u);
    s.full_params = true;
    return FullParams(this);
  }
  return FullParams(nullptr);
}

ZeroDataParallel::FullParams::~FullParams() {
  if (!z_) return;
  auto& s = *z_->s_;
  s.full_params = false;
  for (auto& u : s.units) s.reshard(u);
}

optim::Optimizer& ZeroDataParallel::optimizer() { return *s_->optimizer; }

std::vector<FlatUnit> ZeroDataParallel::units() const {
  std::vector<FlatUnit> out;
  for (auto& u : s_->units) out.push_back(u.layout);
  return out;
}

ZeroBackwardSchedule zero_backward_schedule(const ZeroDataParallel& z) {
  std::vector<FlatUnit> units = z.units();
  const size_t n = units.size();
  return ZeroBackwardSchedule{.units = std::move(units),
                              .launch_order = zero_launch_order(n, ZeroPolicy::for_stage(z.stage()).units_by_module()),
                              .reduce_scatter_depth = kZeroReduceScatterDepth,
                              .prefetch = z.options().prefetch};
}

const ZeroStepStats& ZeroDataParallel::last_stats() const { return s_->last; }

std::unique_ptr<ZeroDataParallel> apply_zero(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                             const ZeroOptions& opts, const OptimizerFactory& make_optimizer,
                                             comm::ProcessGroup* replicate) {
  return std::make_unique<ZeroDataParallel>(std::move(module), group, opts, make_optimizer, replicate);
}

}  // namespace strata::parallel
