// Gradient norm and clipping over .grad tensors.
#include <strata/optim/clip.h>

#include <cmath>

#include <strata/autograd/grad_mode.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>

namespace strata::optim {

double grad_norm_sq(const std::vector<Tensor>& params) {
  double s = 0;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) s += ops::sum_squares(g);
  }
  return s;
}

void scale_grads(const std::vector<Tensor>& params, double factor) {
  NoGradGuard no_grad;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) ops::mul_(g, factor);
  }
}

double clip_factor(double total_norm, double max_norm) {
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  STRATA_CHECK(max_norm > 0, "[clip_grad_norm] max_norm must be > 0, got ", max_norm);
  cpu::op_profile::Phase profile_phase("optimizer");
  const double total = std::sqrt(grad_norm_sq(params));
  const double f = clip_factor(total, max_norm);
  if (f < 1.0) scale_grads(params, f);
  return total;
}

}  // namespace strata::optim
