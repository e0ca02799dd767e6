// Normalization layers: LayerNorm (GPT), RMSNorm (Llama) and BatchNorm2d (CNNs, with
// running stats).
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// Normalizes over the last dim D; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  /// x (..., D) -> (..., D)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  double eps() const { return eps_; }
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const;

 private:
  int64_t dim_;
  double eps_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

/// RMSNorm over the last dim D (Llama): y = x / sqrt(mean(x^2) + eps) * weight, no mean
/// subtraction and no bias; weight ones.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  /// x (..., D) -> (..., D)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RMSNorm"; }
  double eps() const { return eps_; }
  const Tensor& weight() const { return *weight_; }

 private:
  double eps_;
  Tensor* weight_;
};

/// Per-channel batch norm of (N, C, H, W). Buffers running_mean (C), running_var (C),
/// num_batches_tracked (i64 scalar). Training normalizes with batch stats and updates the
/// running ones (running = (1-momentum)*running + momentum*batch, unbiased var); eval uses them.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  /// relu(forward(x)) as one op (batch_norm's fused pass): a Sequential runs a BatchNorm2d
  /// and the ReLU after it this way. The same values and gradients as the two modules.
  Tensor forward_relu(const Tensor& x);
  /// max_pool2d(forward_relu(x)) with a 2x2 window and stride 2 as one op
  /// (batch_norm_relu_max_pool2): a Sequential runs BatchNorm2d, ReLU, MaxPool2d(2) this way.
  Tensor forward_relu_max_pool2(const Tensor& x);
  std::string type_name() const override { return "BatchNorm2d"; }
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  const Tensor& running_mean() const { return *running_mean_; }
  const Tensor& running_var() const { return *running_var_; }
  int64_t num_batches_tracked() const;

 private:
  enum class Tail { none, relu, relu_max_pool2 };  // what runs after the normalisation, fused
  Tensor run(const Tensor& x, Tail tail);

  int64_t channels_;
  double eps_, momentum_;
  Tensor *weight_, *bias_, *running_mean_, *running_var_, *num_batches_;
};

}  // namespace strata::nn
