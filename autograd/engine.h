// The backward engine: walks the graph from one or more roots in dependency order.
#pragma once
#include <functional>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata {

/// Backpropagates from `root`. A scalar root may omit grad_output (ones); any other
/// root (e.g. a pipeline stage's output) needs its incoming gradient. Leaves
/// accumulate into .grad and fire their post-accumulate hooks; retain_graph keeps
/// saved tensors for another backward.
void backward(const Tensor& root, const Tensor& grad_output = Tensor(), bool retain_graph = false);
/// Several roots at once (each with its gradient), one traversal.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_outputs,
              bool retain_graph = false);

/// Weight gradients a backward left for later (zero-bubble pipeline schedules split a
/// backward into the input gradient B and the weight gradients W): each entry computes one
/// parameter's gradient and accumulates it as the engine would.
using DeferredGrads = std::vector<std::function<void()>>;

/// RAII: while alive on this thread, the backward formulas of linear, linear_gelu and
/// linear_residual whose weight is a leaf compute their input's and bias' gradients and
/// append the weight's (dY^T X, keeping dY and X alive until then) to `into` instead.
/// Scopes nest: the innermost collects. Other parameters' gradients are not deferred.
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(DeferredGrads& into);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;
  /// The innermost scope's list on this thread, or nullptr.
  static DeferredGrads* active();

 private:
  DeferredGrads* prev_;
};

/// Runs and clears `work` (in order, without recording a graph).
void run_deferred(DeferredGrads& work);

/// Adds `g` to leaf `t`'s gradient exactly as the engine's AccumulateGrad does (the
/// gradient taken over or copied, post-accumulate hooks fired).
void accumulate_grad(const Tensor& t, const Tensor& g);

}  // namespace strata
