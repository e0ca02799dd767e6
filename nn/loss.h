// Loss modules. They take (input, target), so they do not use Module::forward(x).
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// Mean cross-entropy over targets != ignore_index.
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100) : ignore_index_(ignore_index) {}
  /// logits (N, C) or (..., C), target (N) or (...) i64 -> scalar loss.
  Tensor forward(const Tensor& logits, const Tensor& target) const;
  Tensor operator()(const Tensor& logits, const Tensor& target) const { return forward(logits, target); }
  using Module::forward;
  std::string type_name() const override { return "CrossEntropyLoss"; }
  int64_t ignore_index() const { return ignore_index_; }

 private:
  int64_t ignore_index_;
};

}  // namespace strata::nn
