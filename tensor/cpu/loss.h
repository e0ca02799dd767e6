// CPU kernels for fused softmax cross-entropy over the rows of (N, C) logits.
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// probs (N,C) = softmax(logits); loss (scalar) = mean over rows whose target is not
/// ignore_index of logsumexp(row) - row[target]; 0 when every row is ignored.
/// Targets i64 or i32; throws on a target outside [0, C) that is not ignore_index.
void cross_entropy_kernel(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor& loss,
                          Tensor& probs);
/// dlogits = dloss / count * (probs - onehot(target)); ignored rows are zero.
void cross_entropy_backward_kernel(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                                   int64_t ignore_index, Tensor& dlogits);

}  // namespace strata::cpu
