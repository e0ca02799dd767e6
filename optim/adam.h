// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay),
// torch.optim semantics with per-parameter step counts for bias correction.
#pragma once
#include <strata/optim/optimizer.h>

namespace strata::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps),
/// with g += wd*p first (Adam). State "exp_avg.<name>", "exp_avg_sq.<name>".
class Adam : public Optimizer {
 public:
  Adam(NamedTensors named_params, const AdamOptions& opt);
  void step() override;
  std::string type_name() const override { return "Adam"; }
  const AdamOptions& options() const { return opt_; }

 protected:
  Adam(NamedTensors named_params, const AdamOptions& opt, bool decoupled);
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void save_hparams(nlohmann::json& j) const override;
  void load_hparams(const nlohmann::json& j) override;

 private:
  AdamOptions opt_;
  bool decoupled_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

/// As Adam, but the decay is p *= 1 - lr*wd before the update (not through the moments).
class AdamW : public Adam {
 public:
  AdamW(NamedTensors named_params, const AdamWOptions& opt);
  std::string type_name() const override { return "AdamW"; }
};

}  // namespace strata::optim
