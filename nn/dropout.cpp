// Dropout layer: derives its generator seed from the construction generator.
#include <strata/nn/dropout.h>

#include <limits>

namespace strata::nn {

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(gen.next_below(std::numeric_limits<uint64_t>::max())) {
  STRATA_CHECK(p >= 0.0 && p < 1.0, "[Dropout] p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (fn_ && is_training() && p_ > 0) return fn_(x, p_, gen_);
  return dropout(x, p_, is_training(), gen_);
}

}  // namespace strata::nn
