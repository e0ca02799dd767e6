// The DDP Reducer (as in PyTorch / flashlight): owns the flat gradient buffers and their
// buckets, listens to every parameter's post-accumulate-grad hook, launches a bucket's
// averaging all-reduce as soon as all its gradients are in (while backward goes on) and,
// in finalize(), waits for the outstanding buckets and hands the averages back to .grad.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/parallel/data/bucket_plan.h>

namespace strata::parallel {

struct ReducerOptions {
  int64_t cap_bytes = int64_t(25) << 20;       ///< bucket cap
  int64_t first_cap_bytes = int64_t(1) << 20;  ///< cap of each buffer's first bucket (launched first)
  int64_t last_cap_bytes = int64_t(1) << 20;   ///< cap of each buffer's last bucket (exposed after backward)
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

/// What the last synchronized backward cost (reset at its first hook, filled by finalize()).
struct ReducerStats {
  int64_t buckets = 0;        ///< all-reduces launched
  int64_t bytes = 0;          ///< payload bytes all-reduced
  int64_t unused_params = 0;  ///< parameters find_unused_parameters marked ready without a gradient
  /// Buckets launched while some parameter's gradient was still missing, i.e. during
  /// backward rather than by the last gradient hook (the more, the more overlap).
  int64_t launched_in_backward = 0;
  double hook_s = 0;      ///< time inside the gradient hooks (slot copies, bookkeeping, launching)
  double copy_s = 0;      ///< time spent copying gradients into and out of the buckets
  double wait_s = 0;      ///< time finalize() blocked on all-reduces still running
  double finalize_s = 0;  ///< all of finalize(): the wait, the copies back to .grad, a rebuild
  /// Timeline, in seconds since the first gradient hook of the backward: when finalize()
  /// was called (≈ end of backward), and per bucket when it was launched and when its
  /// wait returned in finalize().
  double finalize_at_s = 0;
  std::vector<double> launched_at_s, done_at_s;
};

namespace detail {
struct ReducerState;
}

/// Gradient synchronisation of one model replica over `group`.
///
/// Every parameter (requires_grad, registration order) gets a slot in a flat buffer per
/// dtype (MemCategory::comm), laid out by plan_buckets(): last-registered first, buckets
/// of at most cap_bytes, the first and last ones smaller. Like PyTorch's Reducer, the
/// first synchronized backward records the order in which gradients actually become
/// ready; its finalize() broadcasts rank 0's order and, if it differs, lays the buffers
/// out again in that order (same caps; slot values kept, .grad bucket views re-pointed),
/// so from the second iteration on buckets fill, and launch, in backward's real order.
/// Per backward:
///  - each parameter's post-accumulate hook copies its .grad into its slot (or, with
///    gradient_as_bucket_view, finds .grad already living there) and counts down its
///    buckets; buckets whose count reaches zero are launched in plan order as
///    ProcessGroup::all_reduce(bucket, avg) on the group's comm thread;
///  - finalize() (call it after backward, before optimizer.step()) waits for them and
///    writes the averages back into .grad (a copy, or nothing to do with bucket views).
/// While sync is off (no_sync) hooks only let gradients accumulate locally; the next
/// synchronized backward reduces the accumulated sum.
///
/// Errors: a parameter that got no gradient in a synchronized backward is named by
/// finalize() (unless find_unused_parameters); a second backward before finalize() is
/// refused. The group must outlive the Reducer. Not thread-safe: use it from the
/// thread that runs forward/backward. Hooks stay registered on the parameters but do
/// nothing once the Reducer is destroyed. Wrap a model with at most one live Reducer.
class Reducer {
 public:
  Reducer(nn::NamedTensors params, comm::ProcessGroup& group, const ReducerOptions& opts);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Starts an iteration. With find_unused_parameters, walks the autograd graph from
  /// `outputs` and marks every parameter it cannot reach as ready (its slot holds its
  /// current .grad, or zeros), so buckets holding it can still complete.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  /// Waits for every bucket of this backward and writes the averaged gradients to .grad.
  /// A no-op when no synchronized backward ran since the last call.
  void finalize();
  /// Reduces the gradients accumulated so far (under no_sync, e.g. by a pipeline's
  /// micro-batches) as a synchronized backward would have: every parameter is marked
  /// ready now, bucket by bucket in launch order, so every bucket's all-reduce is
  /// launched; finalize() then waits and writes the averages to .grad. Call outside
  /// no_sync with no synchronized backward under way. A parameter with no gradient
  /// contributes zeros (with find_unused_parameters: left as it was if no rank has one).
  void reduce_accumulated();

  /// Off: backward accumulates gradients locally without communicating (no_sync).
  void set_sync(bool on);
  bool sync() const;
  /// gradient_as_bucket_view: zeroes the buffers and points every .grad at its view (so
  /// the next backward accumulates straight into the buckets); otherwise drops .grad.
  void zero_grad();

  /// The current layout (it changes once, in the first synchronized finalize()).
  const BucketPlan& plan() const;
  /// The flat buffer of dtype group `i` of plan().
  const Tensor& buffer(size_t i) const;
  /// Bytes of all flat buffers.
  int64_t buffer_bytes() const;
  const ReducerStats& last_stats() const;
  /// Buckets of the current synchronized backward launched so far (0 before its first
  /// hook; all of them once every gradient is in). Shows the overlap in tests.
  int64_t launched_buckets() const;
  const std::vector<std::string>& param_names() const;

 private:
  std::shared_ptr<detail::ReducerState> s_;
};

}  // namespace strata::parallel
