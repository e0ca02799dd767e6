// Conv2d: square-kernel 2-D convolution (im2col + GEMM underneath).
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// weight (out, in, k, k), bias (out); PyTorch init U(-1/sqrt(in*k*k), +) for both.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen, int64_t stride = 1,
         int64_t padding = 0, bool bias = true);
  /// x (N, in, H, W) -> (N, out, (H + 2p - k)/s + 1, (W + 2p - k)/s + 1)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const;
  const ops::Conv2dParams& params() const { return p_; }

 private:
  int64_t in_, out_, k_;
  ops::Conv2dParams p_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

}  // namespace strata::nn
