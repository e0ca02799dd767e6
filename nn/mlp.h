// MLP classifier: flatten -> [Linear -> activation -> dropout] x hidden -> Linear.
// configs/fashion_mlp is 784-256-128-10 with ReLU.
#pragma once
#include <string>
#include <vector>

#include <strata/nn/container.h>

namespace strata::nn {

struct MLPConfig {
  int64_t input = 784;
  std::vector<int64_t> hidden = {256, 128};
  int64_t classes = 10;
  double dropout = 0.0;
  std::string activation = "relu";  // relu | gelu | gelu_tanh | tanh
};

/// Parameters "net.<i>.weight/bias" (net is a Sequential: Flatten, Linear, act, [Dropout], ...).
class MLP : public Module {
 public:
  MLP(const MLPConfig& cfg, Generator& gen);
  /// x (B, ...) with prod(...) == input (e.g. (B,1,28,28)) -> logits (B, classes)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }
  const MLPConfig& config() const { return cfg_; }

 private:
  MLPConfig cfg_;
};

}  // namespace strata::nn
