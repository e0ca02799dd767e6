// DataParallel: scatter / parallel forward / gather (across devices when the replicas sit
// on several), and the gather's backward node that runs the replica backwards in parallel
// and reduces their gradients onto replica 0.
#include <strata/parallel/data/data_parallel.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <thread>

#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/autograd/node.h>
#include <strata/core/memory.h>
#include <strata/tensor/ops.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::parallel {
namespace {

// Makes `d` the calling thread's current CUDA device while alive (nothing for the CPU),
// so whatever the replica's thread allocates or launches outside the kernels' own guards
// lands on its device.
class ReplicaDeviceScope {
 public:
  explicit ReplicaDeviceScope([[maybe_unused]] Device d) {
#ifdef STRATA_WITH_CUDA
    if (d.type == DeviceType::CUDA) guard_.emplace(d.index);
#endif
  }

 private:
#ifdef STRATA_WITH_CUDA
  std::optional<cuda::DeviceGuard> guard_;
#endif
};

// Runs fn(k) for k in [0, n): k = 0 on this thread, the others on their own threads,
// which inherit this thread's grad mode, autocast mode and memory category; each with
// devices[k] as its current device. Rethrows the first error.
template <class F>
void run_replicas(int n, const std::vector<Device>& devices, F&& fn) {
  const bool grad = grad_enabled();
  const MemCategory cat = current_mem_category();
  const std::optional<DType> amp = autocast_dtype();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int k = 1; k < n; ++k)
    threads.emplace_back([&, k] {
      try {
        set_grad_enabled(grad);
        MemoryScope scope(cat);
        AutocastGuard autocast(amp);
        ReplicaDeviceScope dev(devices[size_t(k)]);
        fn(k);
      } catch (...) {
        errors[size_t(k)] = std::current_exception();
      }
    });
  try {
    ReplicaDeviceScope dev(devices[0]);
    fn(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

int64_t grads_bytes(const nn::Module& m) {
  int64_t b = 0;
  for (const auto& p : m.parameters())
    if (p.grad().defined()) b += p.grad().nbytes();
  return b;
}

// The replicas' devices: opts.devices checked (all CPU, or distinct CUDA devices; count
// agreeing with opts.replicas), or K copies of `home` (the wrapped module's device).
// Makes no CUDA call.
std::vector<Device> replica_devices(const DataParallelOptions& opts, Device home) {
  STRATA_CHECK(opts.replicas >= 0, "[DataParallel] parallel.replicas must be >= 1 (or 0 to derive it), got ",
               opts.replicas);
  const auto& d = opts.devices;
  if (d.empty()) return std::vector<Device>(size_t(opts.replicas == 0 ? 2 : opts.replicas), home);
  STRATA_CHECK(opts.replicas == 0 || size_t(opts.replicas) == d.size(), "[DataParallel] parallel.replicas is ",
               opts.replicas, " but ", d.size(), " devices were given (one replica per device; leave replicas 0 "
               "to derive it)");
  for (size_t k = 0; k < d.size(); ++k) {
    STRATA_CHECK(d[k].index >= 0, "[DataParallel] devices[", k, "] has a negative index ", d[k].index);
    STRATA_CHECK(d[k].type == d[0].type, "[DataParallel] devices mix ", d[0].str(), " (devices[0]) and ", d[k].str(),
                 " (devices[", k, "]); give all cpu, or distinct CUDA devices");
    if (d[k].type == DeviceType::CUDA)
      for (size_t j = 0; j < k; ++j)
        STRATA_CHECK(d[j] != d[k], "[DataParallel] ", d[k].str(), " is listed twice (devices[", j, "] and devices[",
                     k, "]); each CUDA device holds one replica");
  }
  return d;
}

// Error unless every parameter and buffer of `m` sits on `want` (torch's "module must
// have its parameters and buffers on device cuda:0").
void check_on_device(const nn::NamedTensors& state, Device want, bool given) {
  for (const auto& [name, t] : state)
    STRATA_CHECK(t.device() == want, "[DataParallel] module must have its parameters and buffers on device ",
                 want.str(), given ? " (devices[0])" : " (the device of its first tensor)", " but '", name,
                 "' is on ", t.device().str(), "; call module->to(", want.str(), ") before wrapping it");
}

}  // namespace

/// Backward of the gather: splits the incoming gradient, runs each replica's backward
/// from its output on its own thread, then reduces the gradients onto replica 0.
class GatherBackward final : public Node {
 public:
  GatherBackward(DataParallel* dp, std::vector<Tensor> outs) : dp_(dp), outs_(std::move(outs)) {}
  std::string name() const override { return "DataParallelGatherBackward"; }
  void release_saved() override {
    outs_.clear();
    Node::release_saved();
  }

  std::vector<Tensor> apply(const Tensor& grad) override {
    STRATA_CHECK(!outs_.empty(), "[DataParallel] backward ran twice on one forward; pass retain_graph=true");
    const int n = int(outs_.size());
    std::vector<Tensor> g(static_cast<size_t>(n));
    int64_t off = 0;
    for (int k = 0; k < n; ++k) {
      const int64_t len = outs_[size_t(k)].size(0);
      g[size_t(k)] = ops::narrow(grad, 0, off, len);
      off += len;
    }
    dp_->last_[0].outputs += grad.nbytes();
    // retain_graph: the replica graphs are dropped by release_saved(), so a retained
    // outer graph can run this node again.
    run_replicas(n, dp_->devices_, [&](int k) {
      const Tensor& out = outs_[size_t(k)];
      if (out.requires_grad()) {
        Tensor gk = g[size_t(k)];
        if (gk.device() != out.device()) {  // scatter the gradient: device(0) -> device(k)
          gk = gk.to(out.device());
          dp_->last_[size_t(k)].outputs += gk.nbytes();
        }
        strata::backward(out, gk, /*retain_graph=*/true);
      }
      dp_->last_[size_t(k)].grads = grads_bytes(*dp_->replicas_[size_t(k)]);
    });
    dp_->reduce_grads(n);
    return {};
  }

 private:
  DataParallel* dp_;
  std::vector<Tensor> outs_;
};

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, const ReplicaFactory& make_replica,
                           DataParallelOptions opts) {
  STRATA_CHECK(module != nullptr, "[DataParallel] the module is null");
  const auto want = module->state_dict();
  // Checked before any CUDA call: counts, device list, then replica 0's placement.
  devices_ = replica_devices(opts, want.empty() ? kCPU : want[0].second.device());
  const int k_replicas = int(devices_.size());
  check_on_device(want, devices_[0], !opts.devices.empty());
  STRATA_CHECK(k_replicas == 1 || make_replica, "[DataParallel] ", k_replicas, " replicas need a replica factory");
  register_module("module", module);
  replicas_.push_back(module);
  for (int k = 1; k < k_replicas; ++k) {
    auto r = make_replica();
    STRATA_CHECK(r != nullptr, "[DataParallel] the replica factory returned null for replica ", k);
    const auto got = r->state_dict();
    bool same = got.size() == want.size();
    for (size_t i = 0; same && i < got.size(); ++i)
      same = got[i].first == want[i].first && got[i].second.shape() == want[i].second.shape() &&
             got[i].second.dtype() == want[i].second.dtype();
    STRATA_CHECK(same, "[DataParallel] replica ", k, " (", r->type_name(), ", ", got.size(),
                 " tensors) does not have the wrapped module's (", module->type_name(), ", ", want.size(),
                 " tensors) names, shapes and dtypes; the factory must build the same architecture");
    r->to(devices_[size_t(k)]);  // no-op for tensors already there
    replicas_.push_back(std::move(r));
  }
  last_.resize(replicas_.size());
}

void DataParallel::sync_replicas(int k) {
  nn::Module& dst = *replicas_[size_t(k)];
  dst.train(replicas_[0]->is_training());
  const auto src = replicas_[0]->state_dict();
  auto out = dst.state_dict();
  NoGradGuard ng;
  // device(0) -> device(k) straight into replica k's tensors (copy_ transfers across devices)
  for (size_t i = 0; i < src.size(); ++i) ops::copy_(out[i].second, src[i].second);
}

void DataParallel::reduce_grads(int used) {
  auto p0 = replicas_[0]->parameters();
  for (int k = 1; k < used; ++k) {
    auto pk = replicas_[size_t(k)]->parameters();
    for (size_t i = 0; i < p0.size(); ++i) {
      Tensor gk = pk[i].grad();
      if (!gk.defined()) continue;
      Tensor g0 = p0[i].grad();
      const bool moved = gk.device() != p0[i].device();
      if (!g0.defined()) {
        MemoryScope scope(MemCategory::grads);
        p0[i].set_grad(moved ? gk.to(p0[i].device()) : ops::clone(gk));  // to(): a fresh tensor already
      } else {
        ops::add_(g0, moved ? gk.to(g0.device()) : gk);
      }
      pk[i].set_grad(Tensor());
    }
  }
}

Tensor DataParallel::forward(const Tensor& x) {
  STRATA_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 1, "[DataParallel] input must have a batch dim, got ",
               x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  STRATA_CHECK(!x.requires_grad(), "[DataParallel] inputs that require grad are not supported (",
               shape_str(x.shape()), ")");
  const int64_t b = x.size(0);
  const int n = int(std::min<int64_t>(b, int64_t(replicas_.size())));
  std::vector<Tensor> chunks, outs(static_cast<size_t>(n)), detached(static_cast<size_t>(n));
  int64_t off = 0;
  for (int k = 0; k < n; ++k) {
    const int64_t len = b / n + (k < b % n ? 1 : 0);
    chunks.push_back(ops::narrow(x, 0, off, len));
    off += len;
  }
  for (auto& m : last_) m = ReplicaMemory{};
  // The broadcast completes before any replica runs: replica 0's forward updates its
  // BatchNorm running statistics in place, which the copies read.
  if (n > 1) {
    run_replicas(n, devices_, [&](int k) {
      if (k > 0) sync_replicas(k);
    });
  }
  const Device out_dev = devices_[0];
  run_replicas(n, devices_, [&](int k) {
    const Tensor xk = chunks[size_t(k)].to(devices_[size_t(k)]);  // scatter (a view when already there)
    outs[size_t(k)] = replicas_[size_t(k)]->forward(xk);
    if (n > 1) detached[size_t(k)] = outs[size_t(k)].detach().to(out_dev);  // gather onto the output device
  });
  for (size_t k = 0; k < replicas_.size(); ++k) {
    for (const auto& p : replicas_[k]->parameters()) last_[k].params += p.nbytes();
    if (k < size_t(n)) last_[k].outputs = outs[k].nbytes();
  }
  if (n == 1) return outs[0];  // replica 0 alone: its own graph already ends in its .grad
  bool record = false;
  for (auto& o : outs) record |= o.requires_grad();
  Tensor gathered = ops::cat(detached, 0);
  detached.clear();
  last_[0].outputs += gathered.nbytes();
  if (record && grad_enabled()) set_history(gathered, std::make_shared<GatherBackward>(this, std::move(outs)), {});
  return gathered;
}

std::vector<ReplicaMemory> DataParallel::memory_report(const optim::Optimizer* opt) const {
  std::vector<ReplicaMemory> m = last_;
  if (opt)
    for (const auto& [name, t] : opt->state_dict().tensors) m[0].optimizer += t.nbytes();
  return m;
}

std::string DataParallel::format_memory(const std::vector<ReplicaMemory>& m) {
  std::string s = "replica      params       grads     outputs   optimizer       total\n";
  char line[160];
  double others = 0;
  for (size_t k = 0; k < m.size(); ++k) {
    std::snprintf(line, sizeof line, "%7zu %11lld %11lld %11lld %11lld %11lld\n", k, (long long)m[k].params,
                  (long long)m[k].grads, (long long)m[k].outputs, (long long)m[k].optimizer,
                  (long long)m[k].total());
    s += line;
    if (k > 0) others += double(m[k].total());
  }
  if (m.size() > 1) {
    others /= double(m.size() - 1);
    std::snprintf(line, sizeof line, "replica 0 holds %.2fx the mean of the others (%+lld bytes)\n",
                  others > 0 ? double(m[0].total()) / others : 0.0, (long long)(double(m[0].total()) - others));
    s += line;
  }
  return s;
}

}  // namespace strata::parallel
