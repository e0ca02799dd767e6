// Reducer: bucket bookkeeping driven by post-accumulate-grad hooks (see reducer.h).
#include <strata/parallel/data/reducer.h>

#include <chrono>
#include <unordered_set>

#include <strata/autograd/node.h>
#include <strata/core/memory.h>
#include <strata/core/trace.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

namespace detail {

struct ReducerState {
  std::vector<std::string> names;
  std::vector<Tensor> params;
  comm::ProcessGroup& group;
  ReducerOptions opts;
  BucketPlan plan;
  std::vector<BucketParam> bucket_params;  // per param (registration order): what the planner needs
  std::vector<Tensor> buffers;       // per dtype, 1-D, MemCategory::comm
  std::vector<Tensor> param_views;   // per param: its slot, shaped like the parameter
  std::vector<Tensor> bucket_views;  // per bucket: 1-D slice of its buffer
  std::vector<int> bucket_size;      // per bucket: number of parameters overlapping it

  bool sync = true;
  // Per synchronized iteration.
  bool active = false;     // a hook fired or prepare_for_backward ran since the last finalize
  bool expecting = false;  // prepare_for_backward ran: a backward must follow
  bool any_hook = false;   // a real gradient arrived
  std::vector<char> marked;     // per param: ready this iteration
  std::vector<char> premarked;  // per param: marked by the unused-parameter search
  std::vector<int> pending;     // per bucket: parameters still missing
  std::vector<comm::Work> works;
  size_t next_launch = 0;
  int64_t missing = 0;  // parameters (with elements) still without a gradient this iteration
  // Bucket rebuild: the order gradients became ready in the first synchronized backward
  // (recorded until `rebuilt`), and the order the current plan was laid out in.
  bool rebuilt = false;
  std::vector<int> ready_order, layout_order;
  // find_unused_parameters: per param, 1 once it got a gradient since the last sync
  // (accumulates over no_sync iterations).
  Tensor used;
  ReducerStats stats, last;
  Clock::time_point t_begin;  // first hook (or prepare) of the iteration

  ReducerState(comm::ProcessGroup& g, const ReducerOptions& o) : group(g), opts(o) {}

  int64_t numel(size_t i) const { return plan.slots[i].numel; }

  void begin_iteration() {
    if (active) return;
    active = true;
    expecting = false;
    any_hook = false;
    marked.assign(params.size(), 0);
    premarked.assign(params.size(), 0);
    pending = bucket_size;
    works.assign(plan.buckets.size(), comm::Work());
    next_launch = 0;
    missing = 0;
    for (size_t i = 0; i < params.size(); ++i) missing += numel(i) > 0;
    if (!rebuilt) ready_order.clear();
    stats = ReducerStats{};
    stats.launched_at_s.assign(plan.buckets.size(), 0.0);
    stats.done_at_s.assign(plan.buckets.size(), 0.0);
    t_begin = Clock::now();
  }

  void launch_ready() {
    while (next_launch < plan.buckets.size() && pending[next_launch] == 0) {
      trace::tag_next_op("bucket", int64_t(next_launch));
      works[next_launch] = group.all_reduce(bucket_views[next_launch], comm::ReduceOp::avg);
      stats.launched_at_s[next_launch] = seconds_since(t_begin);
      ++stats.buckets;
      if (missing > 0) ++stats.launched_in_backward;
      stats.bytes += bucket_views[next_launch].nbytes();
      ++next_launch;
    }
  }

  // Points .grad at the parameter's bucket view, moving an existing gradient there.
  void bind_view(size_t i) {
    Tensor g = params[i].grad();
    Tensor& v = param_views[i];
    if (g.defined() && g.impl() == v.impl()) return;
    if (g.defined()) {
      ops::copy_(v, g);
    } else {
      ops::zero_(v);
    }
    params[i].set_grad(v);
  }

  // Puts parameter i's current local gradient into its slot and counts its buckets down.
  void mark_ready(size_t i) {
    marked[i] = 1;
    if (numel(i) > 0) --missing;
    if (!rebuilt) ready_order.push_back(int(i));
    const auto t0 = Clock::now();
    Tensor g = params[i].grad();
    Tensor& v = param_views[i];
    if (!g.defined()) {
      ops::zero_(v);  // no local contribution (unused here); .grad stays undefined for now
    } else if (opts.gradient_as_bucket_view) {
      bind_view(i);
    } else {
      ops::copy_(v, g);
    }
    stats.copy_s += seconds_since(t0);
    for (int b : plan.param_buckets[i]) --pending[size_t(b)];
    launch_ready();
  }

  void on_grad_ready(size_t i) {
    if (used.defined()) used.data<int32_t>()[i] = 1;
    if (!sync) {
      if (opts.gradient_as_bucket_view) bind_view(i);
      return;
    }
    trace::Scope ts("ddp hook", trace::Cat::hook);
    const auto t0 = Clock::now();
    if (!any_hook) {
      begin_iteration();
      t_begin = Clock::now();  // the timeline starts at the first gradient, not at prepare
    }
    any_hook = true;
    if (marked[i]) {
      STRATA_CHECK(!premarked[i], "[ddp] parameter '", names[i],
                   "' received a gradient after find_unused_parameters marked it unused: it was not reachable "
                   "from the forward outputs (activation checkpointing hides parameters from that search; turn "
                   "find_unused_parameters off when every parameter is used)");
      STRATA_THROW(Error, "[ddp] parameter '", names[i],
                   "' received a second gradient before finalize(): call finalize() after each backward, or "
                   "accumulate inside no_sync()");
    }
    mark_ready(i);
    stats.hook_s += seconds_since(t0);
  }

  void reduce_accumulated() {
    STRATA_CHECK(sync, "[ddp] reduce_accumulated() inside no_sync(): the accumulated gradients are reduced once "
                       "sync is back on");
    STRATA_CHECK(!any_hook, "[ddp] reduce_accumulated() while a synchronized backward is under way; call finalize() "
                            "first");
    trace::Scope ts("ddp reduce accumulated", trace::Cat::hook);
    begin_iteration();  // keeps what prepare_for_backward marked (find_unused_parameters)
    t_begin = Clock::now();
    any_hook = true;
    for (const Bucket& b : plan.buckets)
      for (int i : b.params)
        if (!marked[size_t(i)]) mark_ready(size_t(i));
  }

  void prepare(const std::vector<Tensor>& outputs) {
    if (!sync) return;
    STRATA_CHECK(!any_hook, "[ddp] a new forward started before finalize() of the previous backward; call "
                            "finalize() after backward and before optimizer.step()");
    // A second forward before any backward re-plans; buckets the first one launched
    // (all-unused ones) must land before their slots are rewritten.
    for (auto& w : works) w.wait();
    active = false;
    begin_iteration();
    expecting = true;
    if (!opts.find_unused_parameters) return;
    // Every node reachable from the outputs; a parameter is used when its AccumulateGrad is.
    std::unordered_set<const Node*> seen;
    std::vector<Node*> stack;
    for (const auto& o : outputs) {
      if (!o.defined() || !o.requires_grad()) continue;
      Node* n = o.grad_fn() ? o.grad_fn().get() : o.impl()->grad_accumulator.get();
      if (n && seen.insert(n).second) stack.push_back(n);
    }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (auto& e : n->next_edges())
        if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Node* acc = params[i].impl()->grad_accumulator.get();
      if (acc && seen.count(acc)) continue;
      premarked[i] = 1;
      ++stats.unused_params;
      mark_ready(i);
    }
  }

  // Lays the buffers out in `order` (ready first), keeping every slot's values and
  // re-pointing .grad that aliased an old slot at its new one.
  void lay_out(const std::vector<int>& order) {
    const Device device = params.empty() ? kCPU : params[0].device();
    BucketPlan np = plan_buckets_in_order(bucket_params, order, opts.cap_bytes, opts.first_cap_bytes,
                                          opts.last_cap_bytes);
    std::vector<Tensor> nbuf;
    {
      MemoryScope scope(MemCategory::comm);
      for (size_t b = 0; b < np.buffer_numel.size(); ++b)
        nbuf.push_back(ops::zeros({np.buffer_numel[b]}, np.buffer_dtypes[b], device));
    }
    std::vector<Tensor> nviews;
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSlot& sl = np.slots[i];
      nviews.push_back(ops::view(ops::narrow(nbuf[size_t(sl.buffer)], 0, sl.offset, sl.numel), params[i].shape()));
      if (param_views.empty()) continue;
      ops::copy_(nviews[i], param_views[i]);
      const Tensor g = params[i].grad();
      if (g.defined() && g.impl() == param_views[i].impl()) params[i].set_grad(nviews[i]);
    }
    plan = std::move(np);
    buffers = std::move(nbuf);
    param_views = std::move(nviews);
    bucket_views.clear();
    bucket_size.clear();
    for (const auto& b : plan.buckets) {
      bucket_views.push_back(ops::narrow(buffers[size_t(b.buffer)], 0, b.begin, b.numel()));
      bucket_size.push_back(int(b.params.size()));
    }
    layout_order = order;
  }

  // After the first synchronized backward (as PyTorch's Reducer does): rank 0's recorded
  // ready order, broadcast so every rank lays out the same buckets, becomes the layout
  // from the next iteration on. Collective; runs once.
  void rebuild_buckets() {
    rebuilt = true;
    std::vector<char> seen(params.size(), 0);
    std::vector<int64_t> order;
    for (int i : ready_order) {
      if (seen[size_t(i)]) continue;
      seen[size_t(i)] = 1;
      order.push_back(i);
    }
    for (size_t i = params.size(); i-- > 0;)  // zero-element parameters: never ready, never reduced
      if (!seen[i]) order.push_back(int64_t(i));
    ready_order.clear();
    Tensor t = ops::from_vector(order, {int64_t(order.size())}).to(group.device());
    group.broadcast(t, 0).wait();
    const std::vector<int64_t> agreed = ops::to_cpu(t).to_vector<int64_t>();
    const std::vector<int> o(agreed.begin(), agreed.end());
    if (o != layout_order) lay_out(o);
  }

  void finalize() {
    if (!active) return;
    const auto t_finalize = Clock::now();
    if (!sync) {  // forward ran synchronized, backward under no_sync: nothing to reduce
      for (auto& w : works) w.wait();
      active = expecting = any_hook = false;
      return;
    }
    if (!any_hook && !expecting) {  // only possible after an aborted prepare
      active = false;
      return;
    }
    std::vector<std::string> missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!marked[i] && numel(i) > 0) missing.push_back(names[i]);
    if (!missing.empty()) {
      active = false;
      expecting = false;
      any_hook = false;
      std::string list;
      for (size_t k = 0; k < missing.size() && k < 20; ++k) list += (k ? ", '" : "'") + missing[k] + "'";
      if (missing.size() > 20) list += ", ... (" + std::to_string(missing.size() - 20) + " more)";
      STRATA_THROW(Error, "[ddp] rank ", group.rank(), ": ", missing.size(), " of ", params.size(),
                   " parameters received no gradient in this backward: ", list,
                   ". Their buckets were never reduced. If these parameters are unused in forward, wrap with "
                   "find_unused_parameters=true; otherwise make sure their outputs reach the loss.");
    }
    // Zero-element parameters are in no bucket; everything else was launched.
    STRATA_CHECK(next_launch == plan.buckets.size(), "[ddp] internal: ", next_launch, " of ",
                 plan.buckets.size(), " buckets launched with every parameter ready");
    // The used flags are kept on the host; a device group reduces a device copy.
    comm::Work used_work;
    Tensor used_reduced = used;
    if (opts.find_unused_parameters) {
      const Device d = buffers.empty() ? kCPU : buffers[0].device();
      if (!d.is_cpu()) used_reduced = used.to(d);
      used_work = group.all_reduce(used_reduced, comm::ReduceOp::max);
    }

    const auto t_wait = Clock::now();
    stats.finalize_at_s = std::chrono::duration<double>(t_wait - t_begin).count();
    for (size_t b = 0; b < works.size(); ++b) {
      works[b].wait();
      stats.done_at_s[b] = seconds_since(t_begin);
    }
    used_work.wait();
    if (used_reduced.defined() && !used_reduced.device().is_cpu()) {
      Tensor host = used_reduced.to(kCPU);
      ops::copy_(used, host);
    }
    stats.wait_s = seconds_since(t_wait);

    const auto t_copy = Clock::now();
    const int32_t* u = used.defined() ? used.data<int32_t>() : nullptr;
    for (size_t i = 0; i < params.size(); ++i) {
      if (numel(i) == 0) continue;
      if (u && u[i] == 0) continue;  // no rank produced a gradient: leave .grad as it was
      Tensor g = params[i].grad();
      if (opts.gradient_as_bucket_view) {
        if (!g.defined() || g.impl() != param_views[i].impl()) params[i].set_grad(param_views[i]);
      } else if (g.defined()) {
        ops::copy_(g, param_views[i]);
      } else {
        MemoryScope scope(MemCategory::grads);
        params[i].set_grad(ops::clone(param_views[i]));
      }
    }
    stats.copy_s += seconds_since(t_copy);
    if (used.defined()) ops::zero_(used);
    if (!rebuilt) rebuild_buckets();
    stats.finalize_s = seconds_since(t_finalize);
    last = stats;
    active = false;
    expecting = false;
    any_hook = false;
  }
};

}  // namespace detail

Reducer::Reducer(nn::NamedTensors params, comm::ProcessGroup& group, const ReducerOptions& opts)
    : s_(std::make_shared<detail::ReducerState>(group, opts)) {
  auto& s = *s_;
  for (auto& [name, t] : params) {
    if (!t.requires_grad()) continue;
    STRATA_CHECK(t.is_leaf(), "[ddp] parameter '", name, "' is not a leaf tensor (", t.str(), ")");
    STRATA_CHECK(t.is_contiguous(), "[ddp] parameter '", name, "' is not contiguous (", t.str(),
                 "); DDP lays gradients out as contiguous slots");
    STRATA_CHECK(is_floating(t.dtype()), "[ddp] parameter '", name, "' has non-floating dtype ",
                 dtype_name(t.dtype()));
    s.names.push_back(name);
    s.params.push_back(t);
    s.bucket_params.push_back({t.numel(), t.dtype()});
  }
  // Buckets live where the parameters do (one device per replica).
  const Device device = s.params.empty() ? kCPU : s.params[0].device();
  for (size_t i = 0; i < s.params.size(); ++i)
    STRATA_CHECK(s.params[i].device() == device, "[ddp] parameter '", s.names[i], "' is on ", s.params[i].device().str(),
                 " but '", s.names[0], "' is on ", device.str(), ": a DDP replica lives on one device");
  // Until the first backward shows the real order: reverse registration order.
  std::vector<int> reverse(s.params.size());
  for (size_t k = 0; k < reverse.size(); ++k) reverse[k] = int(reverse.size() - 1 - k);
  s.lay_out(reverse);
  if (opts.find_unused_parameters) {
    MemoryScope scope(MemCategory::comm);
    s.used = ops::zeros({int64_t(s.params.size())}, DType::i32);
  }
  if (opts.gradient_as_bucket_view)
    for (size_t i = 0; i < s.params.size(); ++i)
      if (s.params[i].grad().defined()) s.bind_view(i);

  std::weak_ptr<detail::ReducerState> weak = s_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.numel(i) == 0) continue;
    s.params[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto st = weak.lock()) st->on_grad_ready(i);
    });
  }
}

Reducer::~Reducer() = default;

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) { s_->prepare(outputs); }
void Reducer::finalize() { s_->finalize(); }
void Reducer::reduce_accumulated() { s_->reduce_accumulated(); }

void Reducer::set_sync(bool on) { s_->sync = on; }

bool Reducer::sync() const { return s_->sync; }

void Reducer::zero_grad() {
  auto& s = *s_;
  if (s.opts.gradient_as_bucket_view) {
    for (auto& b : s.buffers) ops::zero_(b);
    for (size_t i = 0; i < s.params.size(); ++i) s.params[i].set_grad(s.param_views[i]);
  } else {
    for (auto& p : s.params) p.set_grad(Tensor());
  }
}

const BucketPlan& Reducer::plan() const { return s_->plan; }
const Tensor& Reducer::buffer(size_t i) const { return s_->buffers.at(i); }
int64_t Reducer::buffer_bytes() const { return s_->plan.total_bytes(); }
const ReducerStats& Reducer::last_stats() const { return s_->last; }
int64_t Reducer::launched_buckets() const { return s_->active ? int64_t(s_->next_launch) : 0; }
const std::vector<std::string>& Reducer::param_names() const { return s_->names; }

}  // namespace strata::parallel
