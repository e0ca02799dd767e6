// CNN model assembly.
#include <strata/nn/cnn.h>

#include <strata/nn/activation.h>
#include <strata/nn/conv.h>
#include <strata/nn/dropout.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/pooling.h>

namespace strata::nn {

CNN::CNN(const CNNConfig& cfg, Generator& gen) : cfg_(cfg) {
  STRATA_CHECK(cfg.in_channels > 0 && cfg.classes > 0 && !cfg.channels.empty() && cfg.hidden > 0,
               "[CNN] in_channels, classes, hidden must be positive and channels non-empty");
  STRATA_CHECK(feature_size() > 0, "[CNN] image_size ", cfg.image_size, " is too small for ", cfg.channels.size(),
               " pooling blocks");
  auto features = register_module("features", std::make_shared<Sequential>());
  int64_t c = cfg.in_channels;
  for (int64_t out : cfg.channels) {
    STRATA_CHECK(out > 0, "[CNN] channel counts must be positive, got ", out);
    features->push_back(std::make_shared<Conv2d>(c, out, 3, gen, 1, 1, !cfg.batch_norm));
    if (cfg.batch_norm) features->push_back(std::make_shared<BatchNorm2d>(out));
    features->push_back(std::make_shared<ReLU>());
    features->push_back(std::make_shared<MaxPool2d>(2));
    c = out;
  }
  auto classifier = register_module("classifier", std::make_shared<Sequential>());
  const int64_t s = feature_size();
  classifier->push_back(std::make_shared<Flatten>(1, -1));
  classifier->push_back(std::make_shared<Linear>(c * s * s, cfg.hidden, gen));
  classifier->push_back(std::make_shared<ReLU>());
  if (cfg.dropout > 0) classifier->push_back(std::make_shared<Dropout>(cfg.dropout, gen));
  classifier->push_back(std::make_shared<Linear>(cfg.hidden, cfg.classes, gen));
}

int64_t CNN::feature_size() const {
  int64_t s = cfg_.image_size;
  for (size_t i = 0; i < cfg_.channels.size(); ++i) s /= 2;
  return s;
}

Tensor CNN::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() == 4 && x.size(1) == cfg_.in_channels && x.size(2) == cfg_.image_size &&
                   x.size(3) == cfg_.image_size,
               "[CNN] expects (B, ", cfg_.in_channels, ", ", cfg_.image_size, ", ", cfg_.image_size, "), got ",
               shape_str(x.shape()));
  return (*child("classifier"))((*child("features"))(x));
}

}  // namespace strata::nn
