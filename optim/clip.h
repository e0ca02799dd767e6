// Global-norm gradient clipping, split into norm and scale so a sharded optimizer can
// all-reduce the partial squared norm in between.
#pragma once
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata::optim {

/// Sum over params with a defined .grad of sum(grad^2), accumulated in f64.
double grad_norm_sq(const std::vector<Tensor>& params);
/// grad *= factor in place for every defined .grad.
void scale_grads(const std::vector<Tensor>& params, double factor);
/// Like torch.nn.utils.clip_grad_norm_: total = sqrt(grad_norm_sq); if
/// max_norm / (total + 1e-6) < 1 the grads are scaled by it. Returns total (pre-clip).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
/// The factor clip_grad_norm applies for a given total norm (1 when no clipping).
double clip_factor(double total_norm, double max_norm);

}  // namespace strata::optim
