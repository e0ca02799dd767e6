// Gradient norm and clipping over .grad tensors.
#include <strata/optim/clip.h>

#include <cmath>

#include <strata/autograd/grad_mode.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>

namespace strata::optim {

namespace {
// The defined gradients of params, and whether all are contiguous (the multi-tensor ops
// take those; otherwise the per-tensor ops, in the same order).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, bool* contiguous) {
  std::vector<Tensor> gs;
  *contiguous = true;
  for (const auto& p : params)
    if (Tensor g = p.grad(); g.defined()) {
      *contiguous = *contiguous && g.is_contiguous();
      gs.push_back(std::move(g));
    }
  return gs;
}
}  // namespace

double grad_norm_sq(const std::vector<Tensor>& params) {
  bool contiguous = false;
  const std::vector<Tensor> gs = grads_of(params, &contiguous);
  if (contiguous && !gs.empty()) return ops::sum_squares_multi(gs);  // one launch set on CUDA
  double s = 0;
  for (const Tensor& g : gs) s += ops::sum_squares(g);
  return s;
}

void scale_grads(const std::vector<Tensor>& params, double factor) {
  NoGradGuard no_grad;
  bool contiguous = false;
  std::vector<Tensor> gs = grads_of(params, &contiguous);
  if (contiguous) return ops::mul_multi_(gs, factor);
  for (Tensor& g : gs) ops::mul_(g, factor);
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
