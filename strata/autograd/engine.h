// The backward engine: walks the graph from one or more roots in dependency order.
#pragma once
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

}  // namespace strata
