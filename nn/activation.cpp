// Activation factory for configs that name their activation.
#include <strata/nn/activation.h>

namespace strata::nn {

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>(false);
  if (name == "gelu_tanh") return std::make_shared<GELU>(true);
  if (name == "tanh") return std::make_shared<Tanh>();
  STRATA_THROW(ConfigError, "[activation] unknown activation '", name, "' (expected relu, gelu, gelu_tanh, tanh)");
}

}  // namespace strata::nn
