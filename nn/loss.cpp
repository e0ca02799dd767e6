// CrossEntropyLoss: flattens leading dims and calls the fused cross_entropy().
#include <strata/nn/loss.h>

namespace strata::nn {

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) const {
  STRATA_CHECK(logits.dim() >= 2 && target.dim() == logits.dim() - 1, "[CrossEntropyLoss] logits ",
               shape_str(logits.shape()), " and target ", shape_str(target.shape()), " do not match (expect (..., C) and (...))");
  const int64_t c = logits.size(-1);
  if (logits.dim() == 2) return cross_entropy(logits, target, ignore_index_);
  return cross_entropy(reshape(logits, {-1, c}), ops::reshape(target, {-1}), ignore_index_);
}

}  // namespace strata::nn
