// Linear layer: parameters plus one call to the fused differentiable linear().
#include <strata/nn/linear.h>

#include <strata/nn/init.h>

namespace strata::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias,
               std::optional<double> normal_std)
    : in_(in_features), out_(out_features) {
  STRATA_CHECK(in_features > 0 && out_features > 0, "[Linear] features must be positive, got in=", in_features,
               " out=", out_features);
  if (normal_std) {
    weight_ = &register_parameter("weight", init::normal({out_, in_}, *normal_std, gen));
    if (bias) bias_ = &register_parameter("bias", init::zeros({out_}));
  } else {
    weight_ = &register_parameter("weight", init::kaiming_uniform_default({out_, in_}, in_, gen));
    if (bias) bias_ = &register_parameter("bias", init::kaiming_uniform_default({out_}, in_, gen));
  }
}

Linear::Linear(Tensor weight, Tensor bias) {
  STRATA_CHECK(weight.dim() == 2 && (!bias.defined() || bias.shape() == Shape{weight.size(0)}),
               "[Linear] expects weight (out, in) and bias (out), got ", shape_str(weight.shape()), " and ",
               bias.defined() ? shape_str(bias.shape()) : std::string("none"));
  out_ = weight.size(0);
  in_ = weight.size(1);
  weight_ = &register_parameter("weight", std::move(weight));
  if (bias.defined()) bias_ = &register_parameter("bias", std::move(bias));
}

const Tensor& Linear::bias() const {
  static const Tensor kNone;
  return bias_ ? *bias_ : kNone;
}

Tensor Linear::forward(const Tensor& x) { return linear(x, *weight_, bias_ ? *bias_ : Tensor()); }

}  // namespace strata::nn
