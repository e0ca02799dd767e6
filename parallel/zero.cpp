// ZeRO-1/2/3 (see zero.h): flat units, gradient reduce-scatter driven by the parameters'
// post-accumulate hooks, sharded optimizer step, and for stage 3 the gather/free of each
// unit's parameters around its forward and backward (module forward hooks and an
// identity node on the unit's output that fires when backward reaches the unit).
#include "parallel/zero.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/lambda_node.h"
#include "core/memory.h"
#include "optim/clip.h"
#include "parallel/coalesced.h"
#include "tensor/ops.h"

namespace strata::parallel {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Tensor flat_buffer(int64_t n, DType dt, MemCategory c, Device device) {
  MemoryScope scope(c);
  return ops::zeros({n}, dt, device);
}

Tensor slice1d(const Tensor& flat, int64_t begin, int64_t n) { return ops::narrow(flat, 0, begin, n); }

}  // namespace

namespace detail {

struct ZeroUnit {
  FlatUnit layout;
  std::vector<ShardSlice> slices;  // this rank's
  std::vector<int> slot_of;        // per layout entry: index into ZeroState::params
  DType dtype = DType::f32;
  nn::Module* module = nullptr;  // stage 3 wrapped module (null: root)
  int hook_id = -1;

  Tensor param_flat;  // padded; stages 1-2 persistent, stage 3 released while resharded
  Tensor param_shard; // shard elements (view of param_flat, or own buffer at stage 3)
  Tensor grad_flat;   // stage 1: persistent padded gradients (.grad are views)
  Tensor grad_shard;  // shard elements

  // Per iteration.
  int pending = 0;          // parameters whose gradient has not arrived
  std::vector<char> ready;  // per layout entry
  bool launched = false;
  Tensor rs_in, rs_out;
  std::optional<comm::Work> rs_work;
  // Stage 3 gather state.
  bool gathered = false;
  std::optional<comm::Work> ag_work;  // in flight until waited
};

struct ZeroState {
  comm::ProcessGroup& group;
  ZeroOptions opts;
  int rank = 0, world = 1;
  std::vector<std::string> names;  // trainable parameters, registration order
  std::vector<Tensor> params;      // their tensors (views into the units after flattening)
  std::vector<Shape> shapes;
  std::vector<ZeroUnit> units;
  std::vector<int> unit_of;        // per param
  std::vector<int> entry_of;       // per param: index in its unit's layout
  std::vector<int> launch_order;   // units in the order backward completes them
  std::vector<Tensor> buffers;
  std::unique_ptr<optim::Optimizer> optimizer;
  Device device = kCPU;  // where the parameters (and so every flat buffer) live

  bool sync = true;
  bool active = false;       // a synchronized backward is under way (hooks fired)
  bool in_backward = false;  // stage 3: backward reached a unit (recompute forwards keep params)
  bool full_params = false;  // stage 3: summon_full_params() in effect
  bool grads_fresh = true;   // gradient slices hold nothing yet (zero_grad since last finalize)
  size_t next_launch = 0;
  Clock::time_point t0;
  ZeroStepStats stats, last;

  ZeroState(comm::ProcessGroup& g, const ZeroOptions& o) : group(g), opts(o), rank(g.rank()), world(g.size()) {}

  // Entry e of unit u inside one of the unit's padded flat buffers (parameters, gradients
  // or the reduce-scatter staging), shaped like that parameter.
  Tensor entry_view(const Tensor& flat, const ZeroUnit& u, size_t e) const {
    return ops::view(slice1d(flat, u.layout.offsets[e], u.layout.numels[e]), shapes[size_t(u.slot_of[e])]);
  }

  // Stages 1-2: every unit's full parameters from the updated slices (in place); returns
  // how many all-gathers ran and adds the time blocked on them to `wait_s`.
  int64_t all_gather_params(double& wait_s) {
    std::vector<comm::Work> works;
    for (auto& u : units)
      if (u.layout.numel > 0) works.push_back(group.all_gather(u.param_shard, u.param_flat));
    const auto t = Clock::now();
    for (auto& w : works) w.wait();
    wait_s += seconds_since(t);
    return int64_t(works.size());
  }

  // ------------------------------------------------------------ stage 3 gather / free
  void start_gather(ZeroUnit& u) {
    if (u.gathered || u.layout.numel == 0) {
      u.gathered = true;
      return;
    }
    u.param_flat.storage()->reallocate(MemCategory::comm);
    u.ag_work = group.all_gather(u.param_shard, u.param_flat);
    u.gathered = true;
    ++stats.all_gathers;
  }
  void wait_gather(ZeroUnit& u) {
    if (!u.ag_work) return;
    const auto t = Clock::now();
    u.ag_work->wait();
    stats.wait_s += seconds_since(t);
    u.ag_work.reset();
  }
  void ensure_gathered(ZeroUnit& u) {
    start_gather(u);
    wait_gather(u);
  }
  void reshard(ZeroUnit& u) {
    if (!u.gathered || full_params) return;
    wait_gather(u);
    if (u.layout.numel > 0) u.param_flat.storage()->release();
    u.gathered = false;
  }
  int unit_index(const ZeroUnit& u) const { return int(&u - units.data()); }
  // Forward order = unit order; backward visits it reversed.
  void prefetch_after(const ZeroUnit& u, int step) {
    if (!opts.prefetch) return;
    const int j = unit_index(u) + step;
    if (j >= 1 && j < int(units.size())) start_gather(units[size_t(j)]);  // unit 0 (root) is handled apart
  }

  void pre_forward(ZeroUnit& u) {
    if (full_params) return;
    ensure_gathered(u);
    if (!in_backward) prefetch_after(u, +1);
  }
  Tensor post_forward(ZeroUnit& u, const Tensor& out) {
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
  void pre_backward(ZeroUnit& u) {
    in_backward = true;
    begin_iteration();
    ensure_gathered(u);
    // Backward visits the root first (the loss), then the units from the last one down.
    if (unit_index(u) == 0)
      prefetch_after(units.back(), 0);
    else
      prefetch_after(u, -1);
  }

  // ------------------------------------------------------------ gradient reduce-scatter
  void begin_iteration() {
    if (active) return;
    active = true;
    next_launch = 0;
    stats = ZeroStepStats{};
    t0 = Clock::now();
    for (auto& u : units) {
      u.pending = int(u.layout.params.size());
      u.ready.assign(u.layout.params.size(), 0);
      u.launched = false;
    }
  }

  void on_grad(int p) {
    ZeroUnit& u = units[size_t(unit_of[size_t(p)])];
    if (!sync && opts.stage < 3) return;  // no_sync: .grad accumulates locally
    begin_iteration();
    const int e = entry_of[size_t(p)];
    if (u.ready[size_t(e)]) return;
    u.ready[size_t(e)] = 1;
    if (--u.pending > 0) return;
    if (opts.stage == 3 && !u.launched) reshard(u);  // all of this unit's gradients are in
    if (sync) launch_ready();
  }

  void launch_ready() {
    while (next_launch < launch_order.size()) {
      ZeroUnit& u = units[size_t(launch_order[next_launch])];
      if (u.pending > 0) return;
      launch(u);
      ++next_launch;
    }
  }

  void launch(ZeroUnit& u) {
    u.launched = true;
    if (u.layout.numel == 0) return;
    if (opts.stage == 1) {
      for (size_t e = 0; e < u.layout.params.size(); ++e) {
        Tensor& p = params[size_t(u.slot_of[e])];
        Tensor g = p.grad();
        Tensor slot = entry_view(u.grad_flat, u, e);
        if (g.defined() && !g.shares_storage(u.grad_flat)) ops::copy_(slot, g);  // .grad was replaced
        else if (!g.defined()) ops::fill_(slot, 0.0);
        p.set_grad(slot);
      }
      u.rs_in = u.grad_flat;
    } else {
      u.rs_in = flat_buffer(u.layout.padded(), u.dtype, MemCategory::comm, device);
      for (size_t e = 0; e < u.layout.params.size(); ++e) {
        Tensor& p = params[size_t(u.slot_of[e])];
        Tensor g = p.grad();
        if (!g.defined()) continue;  // unused: zeros
        Tensor slot = entry_view(u.rs_in, u, e);
        ops::copy_(slot, g);
        p.set_grad(Tensor());  // only the slice is kept
      }
    }
    const bool direct = opts.stage >= 2 && grads_fresh;  // nothing to add to: reduce straight into the slice
    {
      MemoryScope scope(MemCategory::comm);
      u.rs_out = direct ? u.grad_shard : ops::empty({u.layout.shard}, u.dtype, device);
    }
    u.rs_work = group.reduce_scatter(u.rs_in, u.rs_out, comm::ReduceOp::avg);
    ++stats.reduce_scatters;
  }

  void finalize() {
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
        if (opts.stage == 3) reshard(u);
      }
    }
    launch_ready();
    const auto t = Clock::now();
    for (int k : launch_order) {
      ZeroUnit& u = units[size_t(k)];
      if (!u.rs_work) continue;
      u.rs_work->wait();
      u.rs_work.reset();
      if (!u.rs_out.shares_storage(u.grad_shard)) {
        // Stage 1's slice is part of the flat gradients, which hold this rank's local sum
        // since zero_grad(): the average replaces it (accumulate only through no_sync).
        if (grads_fresh || opts.stage == 1)
          ops::copy_(u.grad_shard, u.rs_out);
        else
          ops::add_(u.grad_shard, u.rs_out);
      }
      u.rs_in = u.rs_out = Tensor();
    }
    stats.wait_s += seconds_since(t);
    for (auto& u : units) reshard(u);  // stage 3: nothing stays gathered
    grads_fresh = false;
    active = false;
    in_backward = false;
    last = stats;
  }
};

}  // namespace detail

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
                                   const ZeroOptions& opts, const OptimizerFactory& make_optimizer)
    : module_(std::move(module)), group_(group), opts_(opts) {
  STRATA_CHECK(opts.stage >= 1 && opts.stage <= 3, "[zero] stage must be 1, 2 or 3, got ", opts.stage);
  STRATA_CHECK(opts.bucket_cap_mb > 0, "[zero] bucket_cap_mb must be > 0, got ", opts.bucket_cap_mb);
  s_ = std::make_shared<detail::ZeroState>(group, opts);
  auto& s = *s_;
  // Rank 0's weights everywhere, before flattening.
  std::vector<Tensor> all;
  for (auto& [n, p] : module_->named_parameters()) all.push_back(p);
  for (auto& [n, b] : module_->named_buffers()) {
    all.push_back(b);
    s.buffers.push_back(b);
  }
  broadcast_coalesced(group, all, 0);

  for (auto& [n, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    s.names.push_back(n);
    s.params.push_back(p);
    s.shapes.push_back(p.shape());
  }
  const int np = int(s.params.size());
  if (np > 0) s.device = s.params[0].device();
  for (int i = 0; i < np; ++i)
    STRATA_CHECK(s.params[size_t(i)].device() == s.device, "[zero] parameter '", s.names[size_t(i)], "' is on ",
                 s.params[size_t(i)].device().str(), " but '", s.names[0], "' is on ", s.device.str(),
                 ": a sharded model lives on one device");
  std::vector<int64_t> numel(static_cast<size_t>(np));
  for (int i = 0; i < np; ++i) numel[size_t(i)] = s.params[size_t(i)].numel();

  // Units: stage 3 by the wrap policy (root first, then wrapped modules in registration
  // order); stages 1-2 by size, in backward order.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::vector<nn::Module*> group_module;
  if (opts.stage == 3) {
    const std::vector<std::string> wrap = opts.wrap.empty() ? default_wrap_policy(*module_) : opts.wrap;
    std::vector<int> owner(size_t(np), -1);
    for (size_t w = 0; w < wrap.size(); ++w) {
      auto m = module_->child(wrap[w]);  // throws naming the children on a bad path
      const std::string pre = wrap[w] + ".";
      for (int i = 0; i < np; ++i)
        if (owner[size_t(i)] < 0 && s.names[size_t(i)].compare(0, pre.size(), pre) == 0) owner[size_t(i)] = int(w);
    }
    groups.push_back({"root", {}});
    group_module.push_back(nullptr);
    for (size_t w = 0; w < wrap.size(); ++w) {
      groups.push_back({wrap[w], {}});
      group_module.push_back(module_->child(wrap[w]).get());
    }
    for (int i = 0; i < np; ++i) groups[size_t(owner[size_t(i)] + 1)].second.push_back(i);
  } else {
    const int64_t es = np > 0 ? int64_t(element_size(s.params[0].dtype())) : 4;
    const int64_t cap = std::max<int64_t>(1, int64_t(opts.bucket_cap_mb * 1024.0 * 1024.0) / es);
    int k = 0;
    for (auto& g : group_params_by_cap(numel, cap)) {
      // A unit holds one dtype: split where it changes.
      std::vector<int> cur;
      for (int i : g) {
        if (!cur.empty() && s.params[size_t(i)].dtype() != s.params[size_t(cur[0])].dtype()) {
          groups.push_back({"bucket" + std::to_string(k++), cur});
          group_module.push_back(nullptr);
          cur.clear();
        }
        cur.push_back(i);
      }
      if (!cur.empty()) {
        groups.push_back({"bucket" + std::to_string(k++), cur});
        group_module.push_back(nullptr);
      }
    }
  }

  s.unit_of.assign(size_t(np), -1);
  s.entry_of.assign(size_t(np), -1);
  s.units.resize(groups.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    auto& [uname, idx] = groups[k];
    detail::ZeroUnit& u = s.units[k];
    std::vector<int64_t> ns;
    for (int i : idx) ns.push_back(numel[size_t(i)]);
    u.layout = make_flat_unit(uname, idx, ns, s.world);
    u.slices = shard_slices(u.layout, s.rank);
    u.slot_of = idx;
    u.module = group_module[k];
    if (!idx.empty()) u.dtype = s.params[size_t(idx[0])].dtype();
    for (size_t e = 0; e < idx.size(); ++e) {
      STRATA_CHECK(s.params[size_t(idx[e])].dtype() == u.dtype, "[zero] unit '", uname, "' mixes dtypes: ",
                   s.names[size_t(idx[e])], " is ", dtype_name(s.params[size_t(idx[e])].dtype()), ", ",
                   s.names[size_t(idx[0])], " is ", dtype_name(u.dtype), " (wrap them separately)");
      s.unit_of[size_t(idx[e])] = int(k);
      s.entry_of[size_t(idx[e])] = int(e);
    }

    // Flatten: copy the (broadcast) values into the unit, then make the parameters views of it.
    const int64_t lo = int64_t(s.rank) * u.layout.shard;
    u.param_flat =
        flat_buffer(u.layout.padded(), u.dtype, opts.stage == 3 ? MemCategory::comm : MemCategory::params, s.device);
    for (size_t e = 0; e < idx.size(); ++e) {
      Tensor dst = s.entry_view(u.param_flat, u, e);
      ops::copy_(dst, s.params[size_t(idx[e])]);
    }
    if (opts.stage == 3) {
      u.param_shard = flat_buffer(u.layout.shard, u.dtype, MemCategory::params, s.device);
      ops::copy_(u.param_shard, slice1d(u.param_flat, lo, u.layout.shard));
    } else {
      u.param_shard = slice1d(u.param_flat, lo, u.layout.shard);
    }
    if (opts.stage == 1) {
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
      if (opts.stage == 1)
        s.params[size_t(p)].set_grad(s.entry_view(u.grad_flat, u, e));
    }
    if (opts.stage == 3) u.param_flat.storage()->release();
  }

  // Backward completes stage-3 units in reverse forward order (root, holding the tied
  // embedding, last); stages 1-2 units are already in backward order.
  for (size_t k = 0; k < s.units.size(); ++k) s.launch_order.push_back(int(k));
  if (opts.stage == 3) {
    std::reverse(s.launch_order.begin() + 1, s.launch_order.end());
    std::rotate(s.launch_order.begin(), s.launch_order.begin() + 1, s.launch_order.end());
  }

  std::weak_ptr<detail::ZeroState> weak = s_;
  for (int p = 0; p < np; ++p)
    s.params[size_t(p)].register_post_accumulate_grad_hook([weak, p](Tensor&) {
      if (auto st = weak.lock()) st->on_grad(p);
    });
  if (opts.stage == 3)
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
    } catch (...) {  // the group failed; nothing left to wait for
    }
  }
}

// ---------------------------------------------------------------------------- step

Tensor ZeroDataParallel::forward_with(const std::function<Tensor()>& fn) {
  auto& s = *s_;
  STRATA_CHECK(!s.active || !s.sync, "[zero] forward while the previous backward was not finalized: call finalize() "
                                     "after backward");
  if (opts_.broadcast_buffers && !s.buffers.empty() && s.world > 1) broadcast_coalesced(group_, s.buffers, 0);
  if (opts_.stage < 3 || s.units.empty()) return fn();
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
  if (opts_.stage == 3) return;  // the next forward gathers the updated slices
  s.last.all_gathers = s.all_gather_params(s.last.wait_s);
}

void ZeroDataParallel::zero_grad() {
  auto& s = *s_;
  s.grads_fresh = true;
  for (auto& u : s.units) {
    if (opts_.stage == 1) {
      ops::fill_(u.grad_flat, 0.0);
      for (size_t e = 0; e < u.layout.params.size(); ++e)
        s.params[size_t(u.slot_of[e])].set_grad(s.entry_view(u.grad_flat, u, e));
    } else {
      ops::fill_(u.grad_shard, 0.0);
      for (int p : u.slot_of) s.params[size_t(p)].set_grad(Tensor());
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
  if (opts_.stage == 3 && !s.full_params) {
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

nn::NamedTensors ZeroDataParallel::full_state_dict() {
  // Buffers as rank 0 holds them (what broadcast_buffers gives every rank's next forward).
  if (!s_->buffers.empty() && s_->world > 1) broadcast_coalesced(group_, s_->buffers, 0);
  auto full = summon_full_params();
  nn::NamedTensors out;
  for (auto& [n, t] : module_->state_dict()) out.emplace_back(n, ops::clone(t));
  return out;
}

// ---------------------------------------------------------------------------- checkpoints

std::vector<ShardPiece> ZeroDataParallel::state_pieces() const {
  const auto& s = *s_;
  std::vector<ShardPiece> out;
  std::unordered_map<std::string, std::pair<int, const ShardSlice*>> slice_of;  // param name -> (unit, slice)
  for (size_t k = 0; k < s.units.size(); ++k)
    for (const ShardSlice& sl : s.units[k].slices) {
      const std::string& name = s.names[size_t(sl.param)];
      slice_of[name] = {int(k), &sl};
      out.push_back({name, s.shapes[size_t(sl.param)], sl.param_begin, sl.param_end,
                     slice1d(s.units[k].param_shard, sl.shard_offset, sl.size())});
    }
  // Optimizer state tensors are named "<state>.<param>" and shaped like this rank's slice.
  for (auto& [sname, t] : s.optimizer->state_dict().tensors) {
    const size_t dot = sname.find('.');
    const std::string param = dot == std::string::npos ? sname : sname.substr(dot + 1);
    auto it = slice_of.find(param);
    STRATA_CHECK(it != slice_of.end(), "[zero] optimizer state '", sname, "' names no parameter slice of rank ", s.rank);
    const ShardSlice& sl = *it->second.second;
    out.push_back({sname, s.shapes[size_t(sl.param)], sl.param_begin, sl.param_end, ops::flatten(t)});
  }
  if (s.rank == 0)
    for (auto& [n, b] : module_->named_buffers()) out.push_back({n, b.shape(), 0, b.numel(), ops::flatten(b)});
  return out;
}

void ZeroDataParallel::load_state(const RangeReader& read, const nlohmann::json* optimizer_scalars) {
  auto& s = *s_;
  // Read everything first (a DataError leaves the model untouched).
  std::vector<Tensor> param_vals;
  for (auto& u : s.units)
    for (const ShardSlice& sl : u.slices) {
      Tensor v = read(s.names[size_t(sl.param)], sl.param_begin, sl.param_end);
      STRATA_CHECK(v.numel() == sl.size(), "[zero load] '", s.names[size_t(sl.param)], "' [", sl.param_begin, ", ",
                   sl.param_end, ") read ", v.numel(), " elements");
      param_vals.push_back(v);
    }
  std::vector<Tensor> buffer_vals;
  const auto bufs = module_->named_buffers();
  for (auto& [n, b] : bufs) buffer_vals.push_back(read(n, 0, b.numel()));
  optim::OptimizerState st;
  if (optimizer_scalars) {
    st.scalars = *optimizer_scalars;
    // Before the first step a checkpoint holds no state tensors.
    const std::vector<std::string> kinds =
        st.scalars.value("step", int64_t(0)) > 0 ? s.optimizer->state_kinds() : std::vector<std::string>{};
    for (const auto& u : s.units)
      for (const ShardSlice& sl : u.slices)
        for (const auto& kind : kinds) {
          const std::string name = kind + "." + s.names[size_t(sl.param)];
          st.tensors.emplace_back(name, read(name, sl.param_begin, sl.param_end));
        }
  }
  // Apply.
  size_t i = 0;
  for (auto& u : s.units)
    for (const ShardSlice& sl : u.slices) {
      Tensor dst = slice1d(u.param_shard, sl.shard_offset, sl.size());
      ops::copy_(dst, ops::reshape(param_vals[i++], {sl.size()}));
    }
  for (size_t b = 0; b < bufs.size(); ++b) {
    Tensor dst = bufs[b].second;
    ops::copy_(dst, ops::reshape(buffer_vals[b], dst.shape()));
  }
  if (optimizer_scalars) s.optimizer->load_state_dict(st);
  if (opts_.stage < 3) {
    double wait_s = 0;
    s.all_gather_params(wait_s);
  }
}

optim::Optimizer& ZeroDataParallel::optimizer() { return *s_->optimizer; }

std::vector<FlatUnit> ZeroDataParallel::units() const {
  std::vector<FlatUnit> out;
  for (auto& u : s_->units) out.push_back(u.layout);
  return out;
}

const ZeroStepStats& ZeroDataParallel::last_stats() const { return s_->last; }

std::unique_ptr<ZeroDataParallel> apply_zero(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                             const ZeroOptions& opts, const OptimizerFactory& make_optimizer) {
  return std::make_unique<ZeroDataParallel>(std::move(module), group, opts, make_optimizer);
}

}  // namespace strata::parallel
