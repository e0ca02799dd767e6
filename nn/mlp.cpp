// MLP model assembly.
#include <strata/nn/mlp.h>

#include <strata/nn/activation.h>
#include <strata/nn/dropout.h>
#include <strata/nn/linear.h>

namespace strata::nn {

MLP::MLP(const MLPConfig& cfg, Generator& gen) : cfg_(cfg) {
  STRATA_CHECK(cfg.input > 0 && cfg.classes > 0, "[MLP] input and classes must be positive, got ", cfg.input,
               ", ", cfg.classes);
  auto net = register_module("net", std::make_shared<Sequential>());
  net->push_back(std::make_shared<Flatten>(1, -1));
  int64_t width = cfg.input;
  for (int64_t h : cfg.hidden) {
    STRATA_CHECK(h > 0, "[MLP] hidden sizes must be positive, got ", h);
    net->push_back(std::make_shared<Linear>(width, h, gen));
    net->push_back(make_activation(cfg.activation));
    if (cfg.dropout > 0) net->push_back(std::make_shared<Dropout>(cfg.dropout, gen));
    width = h;
  }
  net->push_back(std::make_shared<Linear>(width, cfg.classes, gen));
}

Tensor MLP::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() >= 2 && x.numel() == x.size(0) * cfg_.input, "[MLP] input ", shape_str(x.shape()),
               " is not (B, ...) with ", cfg_.input, " features per sample");
  return (*child("net"))(x);
}

}  // namespace strata::nn
