// 2-D pooling layers (no parameters).
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// Square window; stride defaults to the kernel size (PyTorch).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);
  /// x (N, C, H, W) -> (N, C, Ho, Wo)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  const ops::Pool2dParams& params() const { return p_; }

 private:
  ops::Pool2dParams p_;
};

/// Average pooling, padding counted in the divisor (count_include_pad = true).
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  ops::Pool2dParams p_;
};

}  // namespace strata::nn
