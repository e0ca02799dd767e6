// Differentiable matmul and linear. Backward GEMMs read transposed views, so no
// operand is ever copied to be transposed.
#include <algorithm>
#include <atomic>
#include <span>
#include <type_traits>

#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>
#include <strata/tensor/row_chunks.h>

namespace strata {
namespace {

// w if it is a leaf that needs its gradient (one a DeferWeightGrads scope may defer), else
// undefined (an autocast copy, or no gradient wanted).
Tensor leaf_weight(const Tensor& w) { return w.requires_grad() && !w.grad_fn() ? w : Tensor(); }

// A linear's backward takes its rows in chunks (tensor/row_chunks.h) of the output
// gradient: the weight gradient's GEMM reads a chunk's gradient rows just after the GELU's
// backward wrote them, and the input gradient's GEMM reads them again and writes over the
// chunk's input rows, from the core's L2 rather than from memory. The weight gradient sums
// the chunks' products in order (the first GEMM with beta 0, the others accumulating): the
// same calls in a plain backward and a deferred one, so the same bits. GPT L4 C128 T64 B32
// step, one core: the c_fc weight gradient (512 x 128 x 2048 TN) ran at 0.79 of its rate
// alone, reading 5 MiB from memory; chunked, the step took 82.8-83.9 instead of 85.5-86.9 ms.

// gw = g_c^T x_c (chunk 0) or gw += g_c^T x_c: gc the rows (n, out) of chunk c of the output
// gradient, x2 all the input rows (M, in). weight_grad_chunks: every chunk, gs[c] chunk c's.
void weight_grad_chunk(Tensor& gw, const Tensor& gc, const Tensor& x2, const RowChunks& rc, int64_t c) {
  ops::gemm_(gw, ops::transpose(gc, 0, 1), ops::narrow(x2, 0, rc.start(c), rc.size(c)), 1.0, c == 0 ? 0.0 : 1.0);
}
Tensor weight_grad_chunks(const std::vector<Tensor>& gs, const Tensor& x2, const RowChunks& rc) {
  Tensor gw = ops::empty({gs.front().size(1), x2.size(1)}, x2.dtype(), x2.device());
  for (int64_t c = 0; c < rc.count(); ++c) weight_grad_chunk(gw, gs[size_t(c)], x2, rc, c);
  return gw;
}

// The weight and input gradients of linears packed along the output (weight i's rows of
// the output gradient are its columns [off_i, off_i + outs[i]); one weight: outs = {out}),
// chunk by chunk (RowChunks over rows of sum outs): chunk(r0, n) gives the chunk's gradient
// rows (n, sum outs) (a view of g2, or the GELU's backward of those rows), or each
// weight's part of them (n, outs[i]) as a vector (the SwiGLU's backward of the chunk);
// g2 gives the rows' count, dtype and device. Then each weight's gradient
// accumulates its part's product with the input rows, and the chunk's rows of gx are formed
// (the parts' products summed in order). A weight that needs its gradient in a
// DeferWeightGrads scope with its leaf defined hands its parts' rows and x2 to the deferred
// work (the same GEMMs later) and its gradient comes back undefined. Returns {gx as shape
// xs, the weights' gradients}.
template <class Chunk>
std::pair<Tensor, std::vector<Tensor>> linear_grads_packed(const Tensor& g2, int64_t in, Chunk&& chunk, SavedTensor& sx,
                                                           std::span<SavedTensor> sw, std::span<const int64_t> outs,
                                                           std::span<const Tensor> leaves,
                                                           const std::vector<bool>& need_w, bool need_x,
                                                           const Shape& xs, const char* op) {
  const size_t k = outs.size();
  int64_t width = 0;
  for (int64_t o : outs) width += o;
  const RowChunks rc(g2.size(0), width * int64_t(element_size(g2.dtype())), g2.device().is_cpu());
  DeferredGrads* active = DeferWeightGrads::active();
  std::vector<bool> defer(k);
  bool defer_any = false, any_w = false;
  for (size_t i = 0; i < k; ++i) {
    defer_any |= defer[i] = need_w[i] && active && leaves[i].defined();
    any_w |= need_w[i];
  }
  // The input rows x2 (saved where a weight needs its gradient). On the CPU, with nothing
  // deferred, they are taken: where SavedTensor::take hands them over they are the input
  // gradient's buffer (the weight gradient reads a chunk's rows before the input gradient
  // writes over them), so its GEMM stores into lines just read rather than into a block read
  // in from memory before its stores. GPU stores do not read lines in: a fresh buffer there.
  Tensor x2, gx;
  if (any_w && need_x && !defer_any && g2.device().is_cpu()) {
    auto [rows, own] = sx.take(op);
    x2 = rows;
    if (own && x2.dtype() == g2.dtype() && x2.shape() == (Shape{g2.size(0), in})) gx = x2;
  } else if (any_w) {
    x2 = sx.get(op);
  }
  if (need_x && !gx.defined()) gx = ops::empty({g2.size(0), in}, g2.dtype(), g2.device());
  std::vector<Tensor> ws(k), gw(k);
  std::vector<std::vector<Tensor>> gs(k);  // the deferred weights' chunk rows
  for (size_t i = 0; i < k; ++i) {
    if (need_x) ws[i] = sw[i].get(op);
    if (need_w[i] && !defer[i]) gw[i] = ops::empty({outs[i], in}, g2.dtype(), g2.device());
  }
  for (int64_t c = 0; c < rc.count(); ++c) {
    std::vector<Tensor> parts;  // (n, out_i)
    if constexpr (std::is_same_v<std::invoke_result_t<Chunk&, int64_t, int64_t>, std::vector<Tensor>>) {
      parts = chunk(rc.start(c), rc.size(c));
    } else {  // rows at stride sum outs
      const Tensor rows = chunk(rc.start(c), rc.size(c));
      for (size_t i = 0, off = 0; i < k; off += size_t(outs[i]), ++i)
        parts.push_back(k == 1 ? rows : ops::narrow(rows, 1, int64_t(off), outs[i]));
    }
    for (size_t i = 0; i < k; ++i) {
      if (defer[i]) gs[i].push_back(parts[i]);
      else if (need_w[i]) weight_grad_chunk(gw[i], parts[i], x2, rc, c);
    }
    if (need_x) {
      Tensor gxc = ops::narrow(gx, 0, rc.start(c), rc.size(c));
      for (size_t i = 0; i < k; ++i) ops::gemm_(gxc, parts[i], ws[i], 1.0, i == 0 ? 0.0 : 1.0);  // (n,out)@(out,in)
    }
  }
  for (size_t i = 0; i < k; ++i)
    if (defer[i])
      active->push_back(
          [g = gs[i], x2, leaf = leaves[i], rc] { accumulate_grad(leaf, weight_grad_chunks(g, x2, rc)); });
  return {need_x ? ops::reshape(gx, xs) : Tensor(), gw};
}

// The chunk function of a backward whose gradient rows need no pass of their own: the
// chunk's rows of g2 as a view.
auto rows_of(const Tensor& g2) {
  return [&g2](int64_t r0, int64_t n) { return ops::narrow(g2, 0, r0, n); };
}

// One linear's {gx, gw} (linear_grads_packed with one weight).
template <class Chunk>
std::pair<Tensor, Tensor> linear_grads(const Tensor& g2, int64_t in, Chunk&& chunk, SavedTensor& sx, SavedTensor& sw,
                                       const Tensor& leaf, bool need_w, bool need_x, const Shape& xs, const char* op) {
  const int64_t out = g2.size(1);
  auto [gx, gw] = linear_grads_packed(g2, in, chunk, sx, std::span(&sw, 1), std::span(&out, 1), std::span(&leaf, 1),
                                      {need_w}, need_x, xs, op);
  return {gx, gw[0]};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::wants_low_precision({a, b}))
    return autocast::run_low_precision({a, b},
                                       [](const std::vector<Tensor>& in) { return strata::matmul(in[0], in[1]); });
  Tensor out = ops::matmul(a, b);
  if (!any_requires_grad(a, b)) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  SavedTensor sa(need_b ? a : Tensor()), sb(need_a ? b : Tensor());
  const Shape as = a.shape(), bs = b.shape();
  return record_fn("MatmulBackward", out, {a, b}, [=](const Tensor& g) {
    // promote 1-d operands the way the forward did
    Tensor g2 = g;
    if (as.size() == 1) g2 = ops::unsqueeze(g2, bs.size() == 1 ? 0 : -2);
    if (bs.size() == 1) g2 = ops::unsqueeze(g2, -1);
    Tensor ga, gb;
    if (need_a) {
      Tensor B = sb.get("MatmulBackward");
      if (B.dim() == 1) B = ops::unsqueeze(B, 1);
      ga = ops::sum_to_shape(ops::matmul(g2, ops::transpose(B, -1, -2)), as.size() == 1 ? Shape{1, as[0]} : as);
      if (as.size() == 1) ga = ops::reshape(ga, as);
    }
    if (need_b) {
      Tensor A = sa.get("MatmulBackward");
      if (A.dim() == 1) A = ops::unsqueeze(A, 0);
      gb = ops::sum_to_shape(ops::matmul(ops::transpose(A, -1, -2), g2), bs.size() == 1 ? Shape{bs[0], 1} : bs);
      if (bs.size() == 1) gb = ops::reshape(gb, bs);
    }
    return std::vector{ga, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast::wants_low_precision({x, w, b}))
    return autocast::run_low_precision(
        {x, w, b}, [](const std::vector<Tensor>& in) { return strata::linear(in[0], in[1], in[2]); });
  STRATA_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), "[linear] input ", shape_str(x.shape()),
               " does not match weight ", shape_str(w.shape()), " (out, in)");
  const int64_t in = w.size(1), outf = w.size(0);
  Tensor x2 = ops::reshape(x, {-1, in});  // (M, in)
  Tensor y;
  if (b.defined()) {
    y = ops::addmm(b, x2, ops::transpose(w, 0, 1));
  } else {
    y = ops::empty({x2.size(0), outf}, x.dtype(), x.device());
    ops::gemm_(y, x2, ops::transpose(w, 0, 1), 1.0, 0.0);
  }
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  y = ops::view(y, out_shape);
  if (!any_requires_grad(x, w, b)) return y;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  SavedTensor sx(need_w ? x2 : Tensor()), sw(need_x ? w : Tensor());
  const Shape xs = x.shape();
  const Tensor wl = leaf_weight(w);
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  return record_fn("LinearBackward", y, inputs, [=](const Tensor& g) mutable {
    const Tensor g2 = ops::contiguous(ops::reshape(g, {-1, outf}));  // (M, out)
    Tensor gb = need_b ? ops::sum(g2, {0}) : Tensor();
    auto [gx, gw] = linear_grads(g2, in, rows_of(g2), sx, sw, wl, need_w, need_x, xs, "LinearBackward");
    return std::vector{gx, gw, gb};
  });
}

namespace {
// Whether the fused linear_gelu / linear_residual run: f32 or f64 tensors on one device
// (CPU or CUDA: tensor/cuda/bias_act.cu), outside autocast. With 16-bit tensors the
// unfused path rounds y + b to 16 bits before the GELU (or the residual add), and the
// 16-bit training tests' bounds are set on that path. `more`: further inputs (the residual).
bool fuses_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<Tensor>& more = {}) {
  if (!(x.dtype() == DType::f32 || x.dtype() == DType::f64)) return false;
  std::vector<Tensor> all{x, w, b};
  all.insert(all.end(), more.begin(), more.end());
  for (const Tensor& t : all)
    if (t.defined() && (t.device() != x.device() || t.dtype() != x.dtype())) return false;
  return !autocast::wants_low_precision(all);
}
}  // namespace

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, bool tanh_approx) {
  const bool fused = fuses_linear(x, w, b);
  if (!fused) return gelu(linear(x, w, b), tanh_approx);
  STRATA_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), "[linear_gelu] input ", shape_str(x.shape()),
               " does not match weight ", shape_str(w.shape()), " (out, in)");
  const int64_t in = w.size(1), outf = w.size(0);
  Tensor x2 = ops::reshape(x, {-1, in});  // (M, in)
  auto [y, h] = ops::linear_bias_gelu(x2, w, b, tanh_approx);  // y = x2 w^T (M, out), h = gelu(y + b)
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  Tensor out = ops::view(h, out_shape);
  if (!any_requires_grad(x, w, b)) return out;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool has_b = b.defined(), need_b = has_b && b.requires_grad();
  SavedTensor sx(need_w ? x2 : Tensor()), sw(need_x ? w : Tensor()), sy(y), sb(b);
  const Shape xs = x.shape();
  const Tensor wl = leaf_weight(w);
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  return record_fn("LinearGeluBackward", out, inputs, [=](const Tensor& g) mutable {
    const Tensor bias = has_b ? sb.get("LinearGeluBackward") : Tensor();
    const auto [y_saved, own_y] = sy.take("LinearGeluBackward");  // dh written over y where handed over
    const Tensor g2 = ops::contiguous(ops::reshape(g, {-1, outf}));  // (M, out)
    Tensor gb;  // the chunks' bias gradients summed in order
    const auto chunk = [&](int64_t r0, int64_t n) {  // dh of the chunk's rows, written over y's where handed over
      auto [dh, gbc] = ops::bias_gelu_backward(ops::narrow(g2, 0, r0, n), ops::narrow(y_saved, 0, r0, n), bias,
                                               tanh_approx, need_b, own_y);
      if (!need_b) return dh;
      if (gb.defined()) ops::add_(gb, gbc);
      else gb = gbc;
      return dh;
    };
    auto [gx, gw] = linear_grads(g2, in, chunk, sx, sw, wl, need_w, need_x, xs, "LinearGeluBackward");
    return std::vector{gx, gw, gb};
  });
}

Tensor linear_swiglu(const Tensor& x, const Tensor& w1, const Tensor& w3) {
  if (!fuses_linear(x, w1, Tensor(), {w3})) return swiglu(linear(x, w1, Tensor()), linear(x, w3, Tensor()));
  STRATA_CHECK(w1.dim() == 2 && w1.shape() == w3.shape() && x.size(-1) == w1.size(1), "[linear_swiglu] input ",
               shape_str(x.shape()), " does not match the weights ", shape_str(w1.shape()), " and ",
               shape_str(w3.shape()), " (hidden, in) each");
  const int64_t in = w1.size(1), hidden = w1.size(0);
  Tensor x2 = ops::reshape(x, {-1, in});  // (M, in)
  auto [gate, up, h] = ops::linear_swiglu(x2, w1, w3);  // (M, hidden) each
  Shape out_shape = x.shape();
  out_shape.back() = hidden;
  const Tensor out = ops::view(h, out_shape);
  if (!any_requires_grad(x, w1, w3)) return out;
  const bool need_x = x.requires_grad();
  const std::vector<bool> need_w{w1.requires_grad(), w3.requires_grad()};
  SavedTensor sx(need_w[0] || need_w[1] ? x2 : Tensor()), sg(gate), su(up);
  std::vector<SavedTensor> sw{SavedTensor(need_x ? w1 : Tensor()), SavedTensor(need_x ? w3 : Tensor())};
  const std::vector<Tensor> leaves{leaf_weight(w1), leaf_weight(w3)};
  const std::vector<int64_t> outs{hidden, hidden};
  const Shape xs = x.shape();
  return record_fn("LinearSwigluBackward", out, {x, w1, w3}, [=](const Tensor& g) mutable {
    // the chunk's gate and up gradients written over its gate and up rows where handed over
    const auto [gs, own_g] = sg.take("LinearSwigluBackward");
    const auto [us, own_u] = su.take("LinearSwigluBackward");
    const Tensor g2 = ops::contiguous(ops::reshape(g, {-1, hidden}));  // (M, hidden)
    const auto chunk = [&](int64_t r0, int64_t n) {
      auto [dg, du] = ops::swiglu_backward(ops::narrow(g2, 0, r0, n), ops::narrow(gs, 0, r0, n),
                                           ops::narrow(us, 0, r0, n), own_g, own_u);
      return std::vector<Tensor>{dg, du};
    };
    auto [gx, gw] = linear_grads_packed(g2, in, chunk, sx, std::span(sw), outs, leaves, need_w, need_x, xs,
                                        "LinearSwigluBackward");
    return std::vector{gx, gw[0], gw[1]};
  });
}

Tensor linear_packed(const Tensor& x, const std::vector<Tensor>& ws) {
  STRATA_CHECK(!ws.empty(), "[linear_packed] needs at least one weight");
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), ws.begin(), ws.end());
  bool same = !autocast::wants_low_precision(inputs);
  for (const Tensor& w : ws) {
    STRATA_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), "[linear_packed] input ", shape_str(x.shape()),
                 " does not match weight ", shape_str(w.shape()), " (out, in)");
    same = same && w.dtype() == x.dtype() && w.device() == x.device();
  }
  if (!same) {
    std::vector<Tensor> ys;
    for (const Tensor& w : ws) ys.push_back(linear(x, w, Tensor()));
    return cat(ys, -1);
  }
  const int64_t in = x.size(-1);
  std::vector<int64_t> outs;
  int64_t total = 0;
  for (const Tensor& w : ws) total += outs.emplace_back(w.size(0));
  Tensor x2 = ops::reshape(x, {-1, in});  // (M, in)
  // One GEMM against the weights stacked (total, in): a copy of the weights (their (out, in)
  // rows stacked, a few hundred KiB) buys one wide GEMM instead of narrow ones (the Llama's
  // 2048 x 64 x 128 key and value projections ran at 0.84 of their rate alone in the step).
  const Tensor w_cat = ws.size() == 1 ? ws[0] : ops::cat(ws, 0);
  Tensor y = ops::empty({x2.size(0), total}, x.dtype(), x.device());
  ops::gemm_(y, x2, ops::transpose(w_cat, 0, 1));  // (M, total)
  Shape out_shape = x.shape();
  out_shape.back() = total;
  const Tensor out = ops::view(y, out_shape);
  const bool need_x = x.requires_grad();
  std::vector<bool> need_w;
  for (const Tensor& w : ws) need_w.push_back(w.requires_grad());
  const bool any_w = std::find(need_w.begin(), need_w.end(), true) != need_w.end();
  if (!need_x && !any_w) return out;
  SavedTensor sx(any_w ? x2 : Tensor());
  std::vector<SavedTensor> sw;
  std::vector<Tensor> leaves;
  for (const Tensor& w : ws) {
    sw.emplace_back(need_x ? w : Tensor());
    leaves.push_back(leaf_weight(w));
  }
  const Shape xs = x.shape();
  return record_fn("LinearPackedBackward", out, inputs, [=](const Tensor& g) mutable {
    const Tensor g2 = ops::contiguous(ops::reshape(g, {-1, total}));  // (M, total)
    auto [gx, gw] = linear_grads_packed(g2, in, rows_of(g2), sx, std::span(sw), outs, leaves, need_w, need_x, xs,
                                        "LinearPackedBackward");
    std::vector<Tensor> grads{gx};
    grads.insert(grads.end(), gw.begin(), gw.end());
    return grads;
  });
}

namespace {
// Records residual + linear(x, w, b) = out, computed as y (M, out) = x2 w^T then y = residual +
// (y + b) (node "LinearResidualBackward"). x2: x's rows (M, in).
Tensor record_linear_residual(Tensor out, const Tensor& x, const Tensor& x2, const Tensor& w, const Tensor& b,
                              const Tensor& residual) {
  if (!any_requires_grad(x, w, b, residual)) return out;
  const int64_t outf = w.size(0), in = w.size(1);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad(), need_r = residual.requires_grad();
  SavedTensor sx(need_w ? x2 : Tensor()), sw(need_x ? w : Tensor());
  const Shape xs = x.shape();
  const Tensor wl = leaf_weight(w);
  std::vector<Tensor> inputs{x, w, residual};
  if (b.defined()) inputs.push_back(b);
  return record_fn("LinearResidualBackward", out, inputs, [=](const Tensor& g) mutable {
    const Tensor g2 = ops::contiguous(ops::reshape(g, {-1, outf}));  // (M, out)
    Tensor gb = need_b ? ops::sum(g2, {0}) : Tensor();
    auto [gx, gw] = linear_grads(g2, in, rows_of(g2), sx, sw, wl, need_w, need_x, xs, "LinearResidualBackward");
    // the residual's gradient is g itself (no copy): the engine adds it to the other
    // consumers' gradients of the residual stream as it would AddBackward's
    return std::vector{gx, gw, need_r ? g : Tensor(), gb};
  });
}

// The output shape of linear(x, w, .) (w's out features in place of x's last dim).
Shape linear_out_shape(const Tensor& x, const Tensor& w) {
  Shape out_shape = x.shape();
  if (!out_shape.empty()) out_shape.back() = w.dim() == 2 ? w.size(0) : -1;
  return out_shape;
}

// y = x2 w^T (M, out) without bias, x2 = x's rows (M, in).
std::pair<Tensor, Tensor> bias_free_gemm(const char* op, const Tensor& x, const Tensor& w) {
  STRATA_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), "[", op, "] input ", shape_str(x.shape()),
               " does not match weight ", shape_str(w.shape()), " (out, in)");
  Tensor x2 = ops::reshape(x, {-1, w.size(1)});  // (M, in)
  Tensor y = ops::empty({x2.size(0), w.size(0)}, x.dtype(), x.device());
  ops::gemm_(y, x2, ops::transpose(w, 0, 1), 1.0, 0.0);  // (M, out), no bias
  return {x2, y};
}

std::atomic<ResidualNormFusion> g_residual_norm_fusion{ResidualNormFusion::automatic};

bool fuses_residual_norm_on(Device d) {
  switch (g_residual_norm_fusion.load(std::memory_order_relaxed)) {
    case ResidualNormFusion::always: return true;
    case ResidualNormFusion::never: return false;
    case ResidualNormFusion::automatic: break;
  }
  // Every device: on CUDA the fused kernels save a global-memory pass each way; on the CPU
  // the GPT step measured 0.3-0.55 ms faster fused (docs/performance.md, "Fused residual +
  // LayerNorm"), though the kernels alone gain only 0.05 ms there.
  (void)d;
  return true;
}

// The LayerNorm of linear_residual_layer_norm: z = layer_norm(s), whose backward takes over
// the gradient already pending at s (its other consumers': the next residual add) and adds
// it in layer_norm_backward's pass (ops::layer_norm_backward_add), in place when nothing
// else holds it. The separate ops would write dx, and the engine read it back to add.
class LayerNormAddNode final : public PendingAddNode {
 public:
  LayerNormAddNode(const Tensor& s, const Tensor& w, Tensor mean, Tensor rstd, bool need_w, bool need_b)
      : PendingAddNode(true), s_(s), w_(w), mean_(std::move(mean)), rstd_(std::move(rstd)), need_w_(need_w),
        need_b_(need_b) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor& s = s_.get("LayerNormAddBackward");
    const auto [other, in_place] = take_pending(s);
    auto [ds, dw, db] = ops::layer_norm_backward_add(g, s, mean_, rstd_, w_.defined() ? w_.get("LayerNormAddBackward")
                                                                                      : Tensor(),
                                                     need_b_, other, in_place);
    return {ds, need_w_ ? dw : Tensor(), need_b_ ? db : Tensor()};
  }
  std::string name() const override { return "LayerNormAddBackward"; }
  void release_saved() override {
    s_.reset();
    w_.reset();
    mean_ = rstd_ = Tensor();
    PendingAddNode::release_saved();
  }

 private:
  SavedTensor s_, w_;
  Tensor mean_, rstd_;
  bool need_w_, need_b_;
};
}  // namespace

void set_residual_norm_fusion(ResidualNormFusion f) { g_residual_norm_fusion.store(f, std::memory_order_relaxed); }
ResidualNormFusion residual_norm_fusion() { return g_residual_norm_fusion.load(std::memory_order_relaxed); }

Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
  const Shape out_shape = linear_out_shape(x, w);
  // as linear_gelu, the residual exactly the Linear's output shape (no broadcast);
  // otherwise the unfused ops, which give the same values
  const bool fused = fuses_linear(x, w, b, {residual}) && residual.shape() == out_shape;
  if (!fused) return add(residual, linear(x, w, b));
  auto [x2, y] = bias_free_gemm("linear_residual", x, w);
  ops::bias_residual_(y, b, residual);  // y = residual + (y + b)
  return record_linear_residual(ops::view(y, out_shape), x, x2, w, b, residual);
}

std::pair<Tensor, Tensor> linear_residual_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b,
                                                     const Tensor& residual, const Tensor& ln_w, const Tensor& ln_b,
                                                     double eps) {
  const Shape out_shape = linear_out_shape(x, w);
  const bool fused = fuses_linear(x, w, b, {residual, ln_w, ln_b}) && residual.shape() == out_shape &&
                     fuses_residual_norm_on(x.device());
  if (!fused) {
    Tensor s = linear_residual(x, w, b, residual);
    Tensor z = layer_norm(s, ln_w, ln_b, eps);
    return {s, z};
  }
  auto [x2, y] = bias_free_gemm("linear_residual_layer_norm", x, w);
  auto [z, mean, rstd] = ops::bias_residual_layer_norm_(y, b, residual, ln_w, ln_b, eps);  // y = s, z = ln(s)
  Tensor s = record_linear_residual(ops::view(y, out_shape), x, x2, w, b, residual);
  Tensor out = ops::view(z, out_shape);
  const auto needs = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  if (!any_requires_grad(s, ln_w, ln_b)) return {s, out};
  auto node = std::make_shared<LayerNormAddNode>(s, ln_w, mean, rstd, needs(ln_w), needs(ln_b));
  set_history(out, node, {s, ln_w, ln_b});
  return {s, out};
}

}  // namespace strata
