// Conv2d layer: parameter slots around the differentiable conv2d().
#include <strata/nn/conv.h>

#include <strata/nn/init.h>

namespace strata::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen, int64_t stride,
               int64_t padding, bool bias)
    : in_(in_channels), out_(out_channels), k_(kernel_size), p_{stride, stride, padding, padding} {
  STRATA_CHECK(in_ > 0 && out_ > 0 && k_ > 0 && stride > 0 && padding >= 0, "[Conv2d] bad sizes: in=", in_,
               " out=", out_, " k=", k_, " stride=", stride, " padding=", padding);
  const int64_t fan_in = in_ * k_ * k_;
  weight_ = &register_parameter("weight", init::kaiming_uniform_default({out_, in_, k_, k_}, fan_in, gen));
  if (bias) bias_ = &register_parameter("bias", init::kaiming_uniform_default({out_}, fan_in, gen));
}

const Tensor& Conv2d::bias() const {
  static const Tensor kNone;
  return bias_ ? *bias_ : kNone;
}

Tensor Conv2d::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() == 4 && x.size(1) == in_, "[Conv2d] expects (N, ", in_, ", H, W), got ",
               shape_str(x.shape()));
  return strata::conv2d(x, *weight_, bias_ ? *bias_ : Tensor(), p_);
}

}  // namespace strata::nn
