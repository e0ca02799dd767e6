// Differentiable Llama ops: RMSNorm, the rotary embedding and SwiGLU, each one raw op
// forward (tensor/llama_ops.cpp) and one backward node.
#include <strata/autograd/autocast.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata {
namespace {

bool needs(const Tensor& t) { return t.defined() && t.requires_grad(); }

// RMSNorm's backward, which takes over the gradient its input has already received from
// its other consumers (the residual stream's: Node::absorbs_edge) and adds it in its own
// pass (ops::rms_norm_backward_add) instead of the engine's separate add.
class RmsNormNode final : public PendingAddNode {
 public:
  RmsNormNode(const Tensor& x, const Tensor& w, Tensor rstd, bool need_x, bool need_w)
      : PendingAddNode(need_x), x_(x), w_(w), rstd_(std::move(rstd)), need_x_(need_x), need_w_(need_w) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor& x = x_.get("RmsNormBackward");
    const auto [other, in_place] = take_pending(x);
    auto [dx, dw] = ops::rms_norm_backward_add(g, x, rstd_, w_.defined() ? w_.get("RmsNormBackward") : Tensor(),
                                               other, in_place);
    return {need_x_ ? dx : Tensor(), need_w_ ? dw : Tensor()};
  }
  std::string name() const override { return "RmsNormBackward"; }
  void release_saved() override {
    x_.reset();
    w_.reset();
    rstd_ = Tensor();
    PendingAddNode::release_saved();
  }

 private:
  SavedTensor x_, w_;
  Tensor rstd_;
  bool need_x_, need_w_;
};

}  // namespace

Tensor rms_norm(const Tensor& x_in, const Tensor& w_in, double eps) {
  const Tensor x = autocast::to_f32(x_in), weight = autocast::to_f32(w_in);  // f32 op under autocast
  auto [y, rstd] = ops::rms_norm(x, weight, eps);
  if (!any_requires_grad(x, weight)) return y;
  auto node = std::make_shared<RmsNormNode>(x, weight, rstd, needs(x), needs(weight));
  set_history(y, node, {x, weight});
  return y;
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
