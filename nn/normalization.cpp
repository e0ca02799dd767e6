// LayerNorm, RMSNorm and BatchNorm2d: parameter/buffer slots around the fused kernels.
#include <strata/nn/normalization.h>

#include <strata/nn/init.h>

namespace strata::nn {

LayerNorm::LayerNorm(int64_t dim, double eps, bool bias) : dim_(dim), eps_(eps) {
  STRATA_CHECK(dim > 0, "[LayerNorm] dim must be positive, got ", dim);
  weight_ = &register_parameter("weight", init::full({dim}, 1.0));
  if (bias) bias_ = &register_parameter("bias", init::full({dim}, 0.0));
}

const Tensor& LayerNorm::bias() const {
  static const Tensor kNone;
  return bias_ ? *bias_ : kNone;
}

Tensor LayerNorm::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() >= 1 && x.size(-1) == weight_->size(0), "[LayerNorm] input ", shape_str(x.shape()),
               " does not end in ", weight_->size(0));
  return layer_norm(x, *weight_, bias_ ? *bias_ : Tensor(), eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps) : eps_(eps) {
  STRATA_CHECK(dim > 0, "[RMSNorm] dim must be positive, got ", dim);
  STRATA_CHECK(eps > 0, "[RMSNorm] eps must be positive, got ", eps);
  weight_ = &register_parameter("weight", init::full({dim}, 1.0));
}

Tensor RMSNorm::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() >= 1 && x.size(-1) == weight_->size(0), "[RMSNorm] input ", shape_str(x.shape()),
               " does not end in ", weight_->size(0));
  return rms_norm(x, *weight_, eps_);
}

BatchNorm2d::BatchNorm2d(int64_t channels, double eps, double momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  STRATA_CHECK(channels > 0, "[BatchNorm2d] channels must be positive, got ", channels);
  weight_ = &register_parameter("weight", init::full({channels}, 1.0));
  bias_ = &register_parameter("bias", init::full({channels}, 0.0));
  running_mean_ = &register_buffer("running_mean", ops::zeros({channels}));
  running_var_ = &register_buffer("running_var", ops::ones({channels}));
  num_batches_ = &register_buffer("num_batches_tracked", ops::zeros({}, DType::i64));
}

int64_t BatchNorm2d::num_batches_tracked() const { return num_batches_->item<int64_t>(); }

Tensor BatchNorm2d::forward(const Tensor& x) { return run(x, Tail::none); }
Tensor BatchNorm2d::forward_relu(const Tensor& x) { return run(x, Tail::relu); }
Tensor BatchNorm2d::forward_relu_max_pool2(const Tensor& x) { return run(x, Tail::relu_max_pool2); }

Tensor BatchNorm2d::run(const Tensor& x, Tail tail) {
  STRATA_CHECK(x.dim() == 4 && x.size(1) == channels_, "[BatchNorm2d] expects (N, ", channels_,
               ", H, W), got ", shape_str(x.shape()));
  const bool training = is_training();
  Tensor y = tail == Tail::relu_max_pool2
                 ? batch_norm_relu_max_pool2(x, *weight_, *bias_, *running_mean_, *running_var_, training, momentum_,
                                             eps_)
                 : batch_norm(x, *weight_, *bias_, *running_mean_, *running_var_, training, momentum_, eps_,
                              tail == Tail::relu);
  if (training) {
    if (num_batches_->device().is_cpu()) {
      num_batches_->data<int64_t>()[0] += 1;
      num_batches_->bump_version();
    } else {  // a device counter: read it back (one sync per forward) and write n + 1
      ops::fill_(*num_batches_, double(num_batches_tracked() + 1));
    }
  }
  return y;
}

}  // namespace strata::nn
