// DistributedDataParallel as a function over the Module tree: apply_ddp() broadcasts
// rank 0's weights, hangs a Reducer on the parameters' post-accumulate-grad hooks and
// returns the handle a training step talks to (forward, finalize, no_sync).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/parallel/data/reducer.h>

namespace strata::parallel {

/// The DDP keys of the `parallel:` config section (see ParallelConfig).
struct DDPOptions {
  double bucket_cap_mb = 25.0;   ///< parallel.bucket_cap_mb: MiB per bucket (PyTorch default)
  double first_bucket_mb = 1.0;  ///< parallel.first_bucket_mb: the first (earliest ready) bucket
  double last_bucket_mb = 1.0;   ///< parallel.last_bucket_mb: the last bucket, reduced after backward ends
  bool find_unused_parameters = false;  ///< parallel.find_unused_parameters
  bool broadcast_buffers = true;        ///< parallel.broadcast_buffers: rank 0's buffers before each forward
  bool gradient_as_bucket_view = false;  ///< parallel.gradient_as_bucket_view: .grad aliases the buckets

  /// ConfigError naming the parallel.* key of the first bad value.
  void validate() const;
};

class DistributedDataParallel;

/// RAII: while alive, backward accumulates gradients locally and nothing is
/// communicated (PyTorch's no_sync). The first synchronized backward after it reduces the
/// accumulated sum. Obtain from DistributedDataParallel::no_sync().
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& r) : r_(&r), prev_(r.sync()) { r.set_sync(false); }
  ~NoSyncGuard() {
    if (r_) r_->set_sync(prev_);
  }
  NoSyncGuard(NoSyncGuard&& o) noexcept : r_(o.r_), prev_(o.prev_) { o.r_ = nullptr; }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  Reducer* r_;
  bool prev_;
};

/// The handle apply_ddp() returns; owns the Reducer. The module itself is unchanged
/// (same parameter names, so checkpoints need no "module." prefix; see state_dict_keys.h).
///
/// One training step on every rank (same number of steps on every rank):
///   Tensor loss = loss_fn(ddp->forward(x_shard), y_shard);  // or forward_with(...)
///   backward(loss);
///   ddp->finalize();          // waits for the bucket all-reduces; .grad = rank average
///   optimizer.step();
///   ddp->zero_grad();         // or optimizer.zero_grad() (slower with bucket views)
/// Gradient accumulation: run the first k-1 micro-batches inside `auto g = ddp->no_sync();`
/// (finalize() there is a no-op) and the last one outside it.
///
/// The group and the module must outlive the handle. Not thread-safe.
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group, const DDPOptions& opts);

  /// pre_forward(), module.forward(x), post_forward({y}). x: this rank's shard.
  Tensor forward(const Tensor& x);
  /// The same around any forward signature: fn() runs the model (e.g. gpt.loss(x, y)).
  Tensor forward_with(const std::function<Tensor()>& fn);
  /// Broadcasts rank 0's buffers when broadcast_buffers (every forward, also in no_sync
  /// and eval: all ranks must call it; a rank evaluating alone uses module() directly).
  void pre_forward();
  /// When grad mode is on: starts the Reducer's iteration; with find_unused_parameters,
  /// marks the parameters the outputs do not depend on as ready.
  void post_forward(const std::vector<Tensor>& outputs);
  /// Call after backward, before optimizer.step(): waits for the outstanding buckets and
  /// writes the averaged gradients to .grad. Throws naming the parameters that got no
  /// gradient (find_unused_parameters off). No-op inside no_sync().
  void finalize();
  /// Reducer::reduce_accumulated(): launches the reduction of the gradients accumulated
  /// under no_sync without another backward (pipeline parallelism); then finalize().
  void reduce_accumulated() { reducer_->reduce_accumulated(); }
  /// See NoSyncGuard.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }
  /// Reducer::zero_grad(): keeps .grad aliasing the buckets with gradient_as_bucket_view.
  void zero_grad() { reducer_->zero_grad(); }

  /// Broadcasts rank 0's buffers now (e.g. before evaluating or saving).
  void sync_buffers();
  /// Broadcasts rank 0's parameters and buffers now (done once at construction).
  void sync_parameters();

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  comm::ProcessGroup& group() { return group_; }
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }
  const DDPOptions& options() const { return opts_; }

 private:
  std::shared_ptr<nn::Module> module_;
  comm::ProcessGroup& group_;
  DDPOptions opts_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<Tensor> buffers_;
};
using DDP = DistributedDataParallel;

/// Wraps `module` for data-parallel training over `group` (collective: every rank calls
/// it with the same architecture). Broadcasts rank 0's parameters and buffers, builds the
/// buckets and registers the gradient hooks.
std::unique_ptr<DistributedDataParallel> apply_ddp(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                                   const DDPOptions& opts = {});

}  // namespace strata::parallel
