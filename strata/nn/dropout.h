// Dropout with its own counter-based generator, so masks are reproducible and a
// checkpointed segment can replay them by restoring the generator state.
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// Inverted dropout: zeroes with probability p and scales by 1/(1-p) in training;
/// identity in eval or when p == 0. The generator is seeded from one draw of `gen`.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  Generator* own_generator() override { return &gen_; }
  double p() const { return p_; }

 private:
  double p_;
  Generator gen_;
};

}  // namespace strata::nn
