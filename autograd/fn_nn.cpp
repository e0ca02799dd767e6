// Differentiable neural-network functions. Each forward is one raw op from
// tensor/nn_ops.cpp; its backward node keeps only what the matching *_backward raw
// op needs (outputs, statistics, indices, masks), never a copy of the input.
#include <strata/autograd/autocast.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>
#include <strata/tensor/half_ops.h>

namespace strata {
namespace {

bool needs(const Tensor& t) { return t.defined() && t.requires_grad(); }

// Keeps the gradient only for inputs that want one.
Tensor if_needed(bool need, Tensor g) { return need ? std::move(g) : Tensor(); }

}  // namespace

Tensor softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast::to_f32(x_in);  // f32 op under autocast
  Tensor y = ops::softmax(x, dim);
  if (!any_requires_grad(x)) return y;
  SavedTensor sy(y);
  return record_fn("SoftmaxBackward", y, {x}, [sy, dim](const Tensor& g) {
    return std::vector{ops::softmax_backward(g, sy.get("SoftmaxBackward"), dim)};
  });
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast::to_f32(x_in);  // f32 op under autocast
  Tensor y = ops::log_softmax(x, dim);
  if (!any_requires_grad(x)) return y;
  SavedTensor sy(y);
  return record_fn("LogSoftmaxBackward", y, {x}, [sy, dim](const Tensor& g) {
    return std::vector{ops::log_softmax_backward(g, sy.get("LogSoftmaxBackward"), dim)};
  });
}

Tensor layer_norm(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, double eps) {
  // f32 op under autocast
  const Tensor x = autocast::to_f32(x_in), weight = autocast::to_f32(w_in), bias = autocast::to_f32(b_in);
  auto [y, mean, rstd] = ops::layer_norm(x, weight, bias, eps);
  if (!any_requires_grad(x, weight, bias)) return y;
  const bool nx = needs(x), nw = needs(weight), nb = needs(bias);
  SavedTensor sx(x), sw(weight);
  return record_fn("LayerNormBackward", y, {x, weight, bias}, [=, mean = mean, rstd = rstd](const Tensor& g) {
    auto [dx, dw, db] = ops::layer_norm_backward(g, sx.get("LayerNormBackward"), mean, rstd,
                                                 sw.defined() ? sw.get("LayerNormBackward") : Tensor(), nb);
    return std::vector{if_needed(nx, dx), if_needed(nw, dw), if_needed(nb, db)};
  });
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  auto [y, save_mean, save_invstd] =
      ops::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
  if (!any_requires_grad(x, weight, bias)) return y;
  const bool nx = needs(x), nw = needs(weight), nb = needs(bias);
  const char* name = relu ? "BatchNormReluBackward" : "BatchNormBackward";
  SavedTensor sx(x), sw(weight), sy(relu ? y : Tensor());
  return record_fn(name, y, {x, weight, bias}, [=, sm = save_mean, si = save_invstd](const Tensor& g) {
    auto [dx, dw, db] = ops::batch_norm_backward(g, sx.get(name), sw.defined() ? sw.get(name) : Tensor(), sm, si,
                                                 training, sy.defined() ? sy.get(name) : Tensor());
    return std::vector{if_needed(nx, dx), if_needed(nw, dw), if_needed(nb, db)};
  });
}

Tensor batch_norm_relu_max_pool2(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                                 Tensor& running_var, bool training, double momentum, double eps) {
  if (!x.device().is_cpu())
    return strata::max_pool2d(batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, true),
                              ops::Pool2dParams{2, 2, 2, 2, 0, 0});
  auto [p, win, save_mean, save_invstd] =
      ops::batch_norm_relu_max_pool2(x, weight, bias, running_mean, running_var, training, momentum, eps);
  if (!any_requires_grad(x, weight, bias)) return p;
  const bool nx = needs(x), nw = needs(weight), nb = needs(bias);
  const char* name = "BatchNormReluMaxPoolBackward";
  SavedTensor sx(x), sw(weight), sp(p);
  return record_fn(name, p, {x, weight, bias}, [=, win = win, sm = save_mean, si = save_invstd](const Tensor& g) {
    auto [dx, dw, db] = ops::batch_norm_relu_max_pool2_backward(
        g, sp.get(name), win, sx.get(name), sw.defined() ? sw.get(name) : Tensor(), sm, si, training);
    return std::vector{if_needed(nx, dx), if_needed(nw, dw), if_needed(nb, db)};
  });
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p) {
  if (autocast::wants_low_precision({x, w, b}))
    return autocast::run_low_precision(
        {x, w, b}, [&p](const std::vector<Tensor>& in) { return strata::conv2d(in[0], in[1], in[2], p); });
  Tensor y = ops::conv2d(x, w, b, p);
  if (!any_requires_grad(x, w, b)) return y;
  const bool nx = needs(x), nw = needs(w), nb = needs(b);
  SavedTensor sx(x), sw(w);
  return record_fn("Conv2dBackward", y, {x, w, b}, [=](const Tensor& g) {
    auto [dx, dw, db] = ops::conv2d_backward(g, sx.get("Conv2dBackward"), sw.get("Conv2dBackward"), nb, p, nx);
    return std::vector{if_needed(nx, dx), if_needed(nw, dw), if_needed(nb, db)};
  });
}

Tensor max_pool2d(const Tensor& x, const ops::Pool2dParams& p) {
  auto [y, idx] = ops::max_pool2d(x, p);
  if (!any_requires_grad(x)) return y;
  const Shape xs = x.shape();
  return record_fn("MaxPool2dBackward", y, {x}, [xs, idx = idx](const Tensor& g) {
    return std::vector{ops::max_pool2d_backward(g, idx, xs)};
  });
}

Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p) {
  Tensor y = ops::avg_pool2d(x, p);
  if (!any_requires_grad(x)) return y;
  const Shape xs = x.shape();
  return record_fn("AvgPool2dBackward", y, {x},
                   [xs, p](const Tensor& g) { return std::vector{ops::avg_pool2d_backward(g, xs, p)}; });
}

Tensor embedding(const Tensor& weight, const Tensor& idx) {
  Tensor y = ops::embedding(weight, idx);
  if (!any_requires_grad(weight)) return y;
  const int64_t V = weight.size(0);
  SavedTensor si(idx);
  return record_fn("EmbeddingBackward", y, {weight}, [si, V](const Tensor& g) {
    return std::vector{ops::embedding_backward(g, si.get("EmbeddingBackward"), V)};
  });
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index) {
  const Tensor logits = autocast::to_f32(logits_in);  // f32 op under autocast
  STRATA_CHECK(logits.dim() >= 1, "[cross_entropy] logits must be (..., C), got ", shape_str(logits.shape()));
  const int64_t C = logits.size(-1);
  Tensor l2 = logits.dim() == 2 ? logits : ops::reshape(logits, {-1, C});  // (N, C)
  Tensor t2 = target.dim() == 1 ? target : ops::reshape(target, {-1});     // (N)
  STRATA_CHECK(t2.numel() == l2.size(0), "[cross_entropy] logits ", shape_str(logits.shape()),
               " need a target of shape ", shape_str(Shape(logits.shape().begin(), logits.shape().end() - 1)),
               ", got ", shape_str(target.shape()));
  auto [loss, probs] = ops::cross_entropy(l2, t2, ignore_index);
  if (!any_requires_grad(logits)) return loss;
  const Shape ls = logits.shape();
  const DType ldt = logits.dtype();  // bf16/f16 logits: f32 loss and probs, 16-bit gradient
  SavedTensor st(t2);
  return record_fn("CrossEntropyBackward", loss, {logits}, [=, probs = probs](const Tensor& g) {
    Tensor d = ops::cross_entropy_backward(g, probs, st.get("CrossEntropyBackward"), ignore_index, ldt);
    return std::vector{ops::reshape(d, ls)};
  });
}

Tensor causal_attention(const Tensor& qkv, int64_t head_dim, int64_t kv_heads) {
  // Under autocast a lower-precision op (as PyTorch's scaled_dot_product_attention): q, k
  // and v rounded to 16 bits, scores, softmax and the weighted sum in f32, the output
  // rounded; on CUDA the kernel reads and writes the 16-bit tensors themselves.
  if (autocast::wants_low_precision({qkv}))
    return autocast::run_low_precision({qkv}, [head_dim, kv_heads](const std::vector<Tensor>& in) {
      return causal_attention(in[0], head_dim, kv_heads);
    });
  auto [y, probs] = ops::causal_attention(qkv, head_dim, kv_heads);
  if (!any_requires_grad(qkv)) return y;
  SavedTensor sq(qkv);
  return record_fn("CausalAttentionBackward", y, {qkv},
                   [sq, head_dim, kv_heads, probs = probs](const Tensor& g) mutable {
                     // d qkv written over qkv where it is handed over (SavedTensor::take)
                     const auto [saved, own] = sq.take("CausalAttentionBackward");
                     return std::vector{ops::causal_attention_backward(g, saved, probs, head_dim, kv_heads, own)};
                   });
}

Tensor causal_attention_rotary(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim,
                               int64_t kv_heads) {
  if (!ops::fuses_rotary_attention(qkv) || autocast::wants_low_precision({qkv})) {
    const int64_t b = qkv.size(0), t = qkv.size(1), heads = qkv.size(2) / head_dim;
    const int64_t kv = kv_heads > 0 ? kv_heads : heads / 3, h = heads - 2 * kv;
    const Tensor turned = rotary(reshape(qkv, {b, t, heads, head_dim}), positions, inv_freq, h + kv);
    return causal_attention(reshape(turned, {b, t, heads * head_dim}), head_dim, kv_heads);
  }
  auto [y, lse] = ops::causal_attention_rotary(qkv, positions, inv_freq, head_dim, kv_heads);
  if (!any_requires_grad(qkv)) return y;
  SavedTensor sq(qkv);
  return record_fn("CausalAttentionRotaryBackward", y, {qkv},
                   [sq, positions, inv_freq, head_dim, kv_heads, lse = lse](const Tensor& g) mutable {
                     const auto [saved, own] = sq.take("CausalAttentionRotaryBackward");
                     return std::vector{ops::causal_attention_rotary_backward(g, saved, positions, inv_freq, lse,
                                                                              head_dim, kv_heads, own)};
                   });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0) return x;
  auto [y, mask] = ops::dropout(x, p, gen);
  if (!any_requires_grad(x)) return y;
  return record_fn("DropoutBackward", y, {x},
                   [p, mask = mask](const Tensor& g) { return std::vector{ops::dropout_backward(g, mask, p)}; });
}

}  // namespace strata
