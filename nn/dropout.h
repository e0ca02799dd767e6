// Dropout with its own counter-based generator, so masks are reproducible and a
// checkpointed segment can replay them by restoring the generator state.
#pragma once
#include <functional>

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

  /// Draws the masks instead of dropout(x, p, training, gen) when set (training, p > 0):
  /// e.g. context parallelism's masks of a rank's tokens as the whole sequence has them.
  /// Empty: the default. Not thread-safe.
  using MaskedFn = std::function<Tensor(const Tensor& x, double p, Generator& gen)>;
  void set_dropout_fn(MaskedFn fn) { fn_ = std::move(fn); }
  bool has_dropout_fn() const { return static_cast<bool>(fn_); }

 private:
  double p_;
  Generator gen_;
  MaskedFn fn_;
};

}  // namespace strata::nn
