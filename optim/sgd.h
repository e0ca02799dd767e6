// SGD with momentum, dampening, weight decay and Nesterov (torch.optim.SGD semantics).
#pragma once
#include <strata/optim/optimizer.h>

namespace strata::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// g += wd*p; buf = momentum*buf + (1-dampening)*g (buf = g on the first step);
/// g = nesterov ? g + momentum*buf : buf; p -= lr*g. State "momentum_buffer.<name>".
class SGD : public Optimizer {
 public:
  SGD(NamedTensors named_params, const SGDOptions& opt);
  void step() override;
  std::string type_name() const override { return "SGD"; }
  const SGDOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  void save_hparams(nlohmann::json& j) const override;
  void load_hparams(const nlohmann::json& j) override;

 private:
  SGDOptions opt_;
};

}  // namespace strata::optim
