// Linear: y = x @ W^T + b, the layer tensor parallelism later splits by rows or columns.
#pragma once
#include <optional>

#include <strata/nn/module.h>

namespace strata::nn {

/// weight (out, in), bias (out). Default init like PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for
/// both; with normal_std (GPT-2 style) weight ~ N(0, normal_std) and bias = 0.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true,
         std::optional<double> normal_std = std::nullopt);
  /// A Linear over given tensors: weight (out, in) and bias (out) or undefined for none,
  /// registered as parameters as they are (shared, not copied).
  Linear(Tensor weight, Tensor bias);
  /// x (..., in) -> (..., out)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool has_bias() const { return bias_ != nullptr; }
  /// The registered slots (a set_parameter replacement shows here).
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const;

 private:
  int64_t in_, out_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

}  // namespace strata::nn
