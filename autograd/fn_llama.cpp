// Differentiable Llama ops: RMSNorm, the rotary embedding and SwiGLU, each one raw op
// forward (tensor/llama_ops.cpp) and one backward node.
#include <strata/autograd/autocast.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata {
namespace {

bool needs(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

Tensor rms_norm(const Tensor& x_in, const Tensor& w_in, double eps) {
  const Tensor x = autocast::to_f32(x_in), weight = autocast::to_f32(w_in);  // f32 op under autocast
  auto [y, rstd] = ops::rms_norm(x, weight, eps);
  if (!any_requires_grad(x, weight)) return y;
  const bool nx = needs(x), nw = needs(weight);
  SavedTensor sx(x), sw(weight);
  return record_fn("RmsNormBackward", y, {x, weight}, [=, rstd = rstd](const Tensor& g) {
    auto [dx, dw] = ops::rms_norm_backward(g, sx.get("RmsNormBackward"), rstd,
                                           sw.defined() ? sw.get("RmsNormBackward") : Tensor());
    return std::vector{nx ? dx : Tensor(), nw ? dw : Tensor()};
  });
}

Tensor rotary(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t rotated_heads) {
  Tensor y = ops::rotary(x, positions, inv_freq, /*inverse=*/false, rotated_heads);
  if (!any_requires_grad(x)) return y;
  // d/dx of a rotation by a is the rotation by -a (its transpose); copied heads pass g on.
  return record_fn("RotaryBackward", y, {x}, [positions, inv_freq, rotated_heads](const Tensor& g) {
    return std::vector{ops::rotary(g, positions, inv_freq, /*inverse=*/true, rotated_heads)};
  });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  Tensor y = ops::swiglu(gate, up);
  if (!any_requires_grad(gate, up)) return y;
  const bool ng = needs(gate), nu = needs(up);
  SavedTensor sg(gate), su(up);
  return record_fn("SwigluBackward", y, {gate, up}, [=](const Tensor& g) mutable {
    // the gradients written over gate and up where they are handed over (SavedTensor::take)
    const auto [gs, own_g] = sg.take("SwigluBackward");
    const auto [us, own_u] = su.take("SwigluBackward");
    auto [dg, du] = ops::swiglu_backward(g, gs, us, own_g && ng, own_u && nu);
    return std::vector{ng ? dg : Tensor(), nu ? du : Tensor()};
  });
}

}  // namespace strata
