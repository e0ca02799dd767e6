// Neural-network op front ends: shape/dtype checks, output allocation, contiguous
// inputs, then dispatch to the kernels in tensor/cpu/{softmax,norm,conv,pool,
// embedding,loss,dropout,attention}. Batch norm's: tensor/batch_norm_ops.cpp.
#include <array>
#include <cmath>
#include <limits>

#include <strata/tensor/attention_composed.h>
#include <strata/tensor/cpu/attention.h>
#include <strata/tensor/cpu/conv.h>
#include <strata/tensor/cpu/dropout.h>
#include <strata/tensor/cpu/embedding.h>
#include <strata/tensor/cpu/loss.h>
#include <strata/tensor/cpu/norm.h>
#include <strata/tensor/cpu/pool.h>
#include <strata/tensor/cpu/softmax.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/half_ops.h>
#include <strata/tensor/op_checks.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using SoftmaxFn = void(const Tensor&, Tensor&, int64_t, int64_t, int64_t, bool);
using SoftmaxBwdFn = void(const Tensor&, const Tensor&, Tensor&, int64_t, int64_t, int64_t, bool);
using LayerNormFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, int64_t, int64_t,
                         double);
using LayerNormBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                            Tensor&, Tensor&, int64_t, int64_t);
using ConvFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, const Conv2dParams&);
using ConvBwdFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const Conv2dParams&);
using MaxPoolFn = void(const Tensor&, Tensor&, Tensor&, const Pool2dParams&);
using MaxPoolBwdFn = void(const Tensor&, const Tensor&, Tensor&);
using AvgPoolFn = void(const Tensor&, Tensor&, const Pool2dParams&);
using AvgPoolBwdFn = void(const Tensor&, Tensor&, const Pool2dParams&);
using EmbeddingFn = void(const Tensor&, const Tensor&, Tensor&);
using CrossEntropyFn = void(const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&);
using CrossEntropyBwdFn = void(const Tensor&, const Tensor&, const Tensor&, int64_t, Tensor&);
using DropoutFn = void(const Tensor&, Tensor&, Tensor&, double, const Generator&, uint64_t);
using DropoutBwdFn = void(const Tensor&, const Tensor&, Tensor&, double);
using AttentionFn = void(const Tensor&, Tensor&, Tensor&, int64_t, int64_t);
using AttentionBwdFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, int64_t, int64_t);
using AttentionRotaryFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, int64_t, int64_t);
using AttentionRotaryBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                  int64_t, int64_t);

const KernelTable<SoftmaxFn> kSoftmax{"softmax", {&cpu::softmax_kernel, nullptr}};
const KernelTable<SoftmaxBwdFn> kSoftmaxBwd{"softmax_backward", {&cpu::softmax_backward_kernel, nullptr}};
const KernelTable<LayerNormFn> kLayerNorm{"layer_norm", {&cpu::layer_norm_kernel, nullptr}};
const KernelTable<LayerNormBwdFn> kLayerNormBwd{"layer_norm_backward", {&cpu::layer_norm_backward_kernel, nullptr}};
const KernelTable<ConvFn> kConv{"conv2d", {&cpu::conv2d_kernel, nullptr}};
const KernelTable<ConvBwdFn> kConvBwd{"conv2d_backward", {&cpu::conv2d_backward_kernel, nullptr}};
const KernelTable<MaxPoolFn> kMaxPool{"max_pool2d", {&cpu::max_pool2d_kernel, nullptr}};
const KernelTable<MaxPoolBwdFn> kMaxPoolBwd{"max_pool2d_backward", {&cpu::max_pool2d_backward_kernel, nullptr}};
const KernelTable<AvgPoolFn> kAvgPool{"avg_pool2d", {&cpu::avg_pool2d_kernel, nullptr}};
const KernelTable<AvgPoolBwdFn> kAvgPoolBwd{"avg_pool2d_backward", {&cpu::avg_pool2d_backward_kernel, nullptr}};
const KernelTable<EmbeddingFn> kEmbedding{"embedding", {&cpu::embedding_kernel, nullptr}};
const KernelTable<EmbeddingFn> kEmbeddingBwd{"embedding_backward", {&cpu::embedding_backward_kernel, nullptr}};
const KernelTable<CrossEntropyFn> kCrossEntropy{"cross_entropy", {&cpu::cross_entropy_kernel, nullptr}};
const KernelTable<CrossEntropyBwdFn> kCrossEntropyBwd{"cross_entropy_backward",
                                                      {&cpu::cross_entropy_backward_kernel, nullptr}};
const KernelTable<DropoutFn> kDropout{"dropout", {&cpu::dropout_kernel, nullptr}};
const KernelTable<DropoutBwdFn> kDropoutBwd{"dropout_backward", {&cpu::dropout_backward_kernel, nullptr}};
const KernelTable<AttentionFn> kAttention{"causal_attention", {&cpu::causal_attention_kernel, nullptr}};
const KernelTable<AttentionBwdFn> kAttentionBwd{"causal_attention_backward",
                                                {&cpu::causal_attention_backward_kernel, nullptr}};
const KernelTable<AttentionRotaryFn> kAttentionRotary{"causal_attention_rotary",
                                                      {&cpu::causal_attention_rotary_kernel, nullptr}};
const KernelTable<AttentionRotaryBwdFn> kAttentionRotaryBwd{"causal_attention_rotary_backward",
                                                            {&cpu::causal_attention_rotary_backward_kernel, nullptr}};

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (d < 0) d += n;
  STRATA_CHECK(d >= 0 && d < n, "[", op, "] dim ", d, " out of range for a ", ndim, "-d tensor");
  return d;
}

void check_float(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), "[", op, "] ", what, " is undefined");
  STRATA_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "[", op, "] ", what, " must be f32 or f64, got ",
               t.str());
}

using detail::check_float16;
using detail::check_same;
using detail::check_vec;
using detail::is_16bit;

// The dtype statistics and losses of x are kept in: f32 for 16-bit x, else x's.
DType stat_dtype(DType dt) { return is_16bit(dt) ? DType::f32 : dt; }

// (outer, n, inner) around dim d of shape s.
std::tuple<int64_t, int64_t, int64_t> split_at(const Shape& s, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[size_t(i)];
  for (size_t i = size_t(d) + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s.empty() ? 1 : s[size_t(d)], inner};
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_float16(x, op, "input");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const auto [outer, n, inner] = split_at(x.shape(), d);
  Tensor xc = contiguous(x);
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  kSoftmax(x.device())(xc, y, outer, n, inner, log);
  return y;
}

Tensor softmax_backward_impl(const Tensor& dy, const Tensor& y, int64_t dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_float16(y, op, "output");
  check_same(y, dy, op, "grad");
  common_device(op, dy, y);
  const int64_t d = wrap_dim(dim, y.dim(), op);
  const auto [outer, n, inner] = split_at(y.shape(), d);
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  kSoftmaxBwd(y.device())(contiguous(dy), contiguous(y), dx, outer, n, inner, log);
  return dx;
}

Shape pool_out_shape(const Shape& xs, const Pool2dParams& p, const char* op) {
  STRATA_CHECK(xs.size() == 4, "[", op, "] expects (N,C,H,W) input, got ", shape_str(xs));
  STRATA_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, "[", op,
               "] kernel and stride must be positive, got kernel (", p.kernel_h, ",", p.kernel_w, ") stride (",
               p.stride_h, ",", p.stride_w, ")");
  STRATA_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, "[", op,
               "] padding (", p.pad_h, ",", p.pad_w, ") must be at most half the kernel (", p.kernel_h, ",",
               p.kernel_w, ")");
  STRATA_CHECK(xs[2] + 2 * p.pad_h >= p.kernel_h && xs[3] + 2 * p.pad_w >= p.kernel_w, "[", op, "] input ",
               shape_str(xs), " with padding (", p.pad_h, ",", p.pad_w, ") is smaller than the kernel (",
               p.kernel_h, ",", p.kernel_w, ")");
  return {xs[0], xs[1], (xs[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1,
          (xs[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1};
}

void check_pool_grad(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p, const char* op) {
  check_float16(dy, op, "grad");
  const Shape want = pool_out_shape(x_shape, p, op);
  STRATA_CHECK(dy.shape() == want, "[", op, "] grad shape ", shape_str(dy.shape()), " does not match the output ",
               shape_str(want), " of input ", shape_str(x_shape));
}

// qkv (B, T, (H + 2*Hkv)*hd) with q of H heads and k, v of Hkv heads each (kv_heads 0:
// Hkv = H, width 3*H*hd): checks it, returns {H, Hkv}.
std::pair<int64_t, int64_t> attention_heads(const Tensor& qkv, int64_t head_dim, int64_t kv_heads, const char* op) {
  STRATA_CHECK(qkv.defined() && is_floating(qkv.dtype()), "[", op, "] qkv must be f32, f64, bf16 or f16, got ",
               qkv.defined() ? qkv.str() : "undefined");  // 16-bit: the composition on the CPU
  STRATA_CHECK(qkv.dim() == 3, "[", op, "] expects qkv (B, T, (H + 2*Hkv)*hd), got ", shape_str(qkv.shape()));
  STRATA_CHECK(kv_heads >= 0, "[", op, "] kv_heads must be >= 0, got ", kv_heads);
  if (kv_heads == 0) {
    STRATA_CHECK(head_dim > 0 && qkv.size(2) % (3 * head_dim) == 0, "[", op, "] qkv width ", qkv.size(2),
                 " is not 3 * heads * head_dim (head_dim ", head_dim, ")");
    const int64_t h = qkv.size(2) / (3 * head_dim);
    return {h, h};
  }
  STRATA_CHECK(head_dim > 0 && qkv.size(2) % head_dim == 0, "[", op, "] qkv width ", qkv.size(2),
               " is not whole heads of ", head_dim);
  const int64_t h = qkv.size(2) / head_dim - 2 * kv_heads;
  STRATA_CHECK(h > 0 && h % kv_heads == 0, "[", op, "] qkv width ", qkv.size(2), " holds ", qkv.size(2) / head_dim,
               " heads of ", head_dim, ": not H query heads and 2 x ", kv_heads,
               " key/value heads with H a multiple of ", kv_heads);
  return {h, kv_heads};
}

}  // namespace

// ---------------------------------------------------------------- softmax
Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(dy, y, dim, false);
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(dy, y, dim, true);
}

// ---------------------------------------------------------------- layer norm
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              double eps) {
  check_float16(x, "layer_norm", "input");
  STRATA_CHECK(x.dim() >= 1, "[layer_norm] input must be at least 1-d");
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  check_vec(weight, C, x.dtype(), "layer_norm", "weight");
  check_vec(bias, C, x.dtype(), "layer_norm", "bias");
  const Device d = x.device();
  Tensor y = empty(x.shape(), x.dtype(), d);
  const DType sdt = stat_dtype(x.dtype());
  Tensor mean = empty({rows}, sdt, d), rstd = empty({rows}, sdt, d);
  kLayerNorm(d)(contiguous(x), contig_or_undef(weight), contig_or_undef(bias), y, mean, rstd, rows, C, eps);
  return {y, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight, bool has_bias) {
  check_float16(x, "layer_norm_backward", "input");
  check_same(x, dy, "layer_norm_backward", "grad");
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  STRATA_CHECK(mean.dtype() == stat_dtype(x.dtype()) && rstd.dtype() == mean.dtype(),
               "[layer_norm_backward] mean/rstd must be ", dtype_name(stat_dtype(x.dtype())), " for a ",
               dtype_name(x.dtype()), " input, got ", dtype_name(mean.dtype()), " and ", dtype_name(rstd.dtype()));
  STRATA_CHECK(mean.numel() == rows && rstd.numel() == rows, "[layer_norm_backward] mean/rstd must have ", rows,
               " elements, got ", mean.numel(), " and ", rstd.numel());
  check_vec(weight, C, x.dtype(), "layer_norm_backward", "weight");
  const Device d = x.device();
  Tensor dx = empty(x.shape(), x.dtype(), d);
  Tensor dw = weight.defined() ? empty({C}, x.dtype(), d) : Tensor();
  Tensor db = has_bias ? empty({C}, x.dtype(), d) : Tensor();
  kLayerNormBwd(d)(contiguous(dy), contiguous(x), contiguous(mean), contiguous(rstd), contig_or_undef(weight), dx,
                   dw, db, rows, C);
  return {dx, dw, db};
}

// ---------------------------------------------------------------- conv2d
namespace {
Shape conv_out_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p, const char* op) {
  // f16 / bf16 too off the CPU: cuDNN runs them (autocast's native path)
  const auto half_ok = [](const Tensor& t) {
    return t.defined() && !t.device().is_cpu() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
  };
  if (!half_ok(x)) check_float16(x, op, "input");  // and f16 / bf16 on the CPU: its kernel widens
  if (!half_ok(w)) check_float16(w, op, "weight");
  STRATA_CHECK(x.dim() == 4 && w.dim() == 4, "[", op, "] expects x (N,C,H,W) and w (O,C,kh,kw), got ",
               shape_str(x.shape()), " and ", shape_str(w.shape()));
  STRATA_CHECK(x.dtype() == w.dtype(), "[", op, "] dtype mismatch: x ", dtype_name(x.dtype()), ", w ",
               dtype_name(w.dtype()));
  STRATA_CHECK(x.size(1) == w.size(1), "[", op, "] input has ", x.size(1), " channels but weight ",
               shape_str(w.shape()), " expects ", w.size(1));
  STRATA_CHECK(p.stride_h > 0 && p.stride_w > 0 && p.pad_h >= 0 && p.pad_w >= 0, "[", op,
               "] stride must be positive and padding non-negative, got stride (", p.stride_h, ",", p.stride_w,
               ") pad (", p.pad_h, ",", p.pad_w, ")");
  const int64_t hp = x.size(2) + 2 * p.pad_h, wp = x.size(3) + 2 * p.pad_w;
  STRATA_CHECK(hp >= w.size(2) && wp >= w.size(3), "[", op, "] input ", shape_str(x.shape()), " with padding (",
               p.pad_h, ",", p.pad_w, ") is smaller than the kernel ", shape_str(w.shape()));
  return {x.size(0), w.size(0), (hp - w.size(2)) / p.stride_h + 1, (wp - w.size(3)) / p.stride_w + 1};
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const Shape out = conv_out_shape(x, w, p, "conv2d");
  check_vec(b, w.size(0), x.dtype(), "conv2d", "bias");
  const Device d = b.defined() ? common_device("conv2d", x, w, b) : common_device("conv2d", x, w);
  Tensor y = empty(out, x.dtype(), d);
  kConv(d)(contiguous(x), contiguous(w), contig_or_undef(b), y, p);
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                   bool has_bias, const Conv2dParams& p, bool need_input_grad) {
  const Shape out = conv_out_shape(x, w, p, "conv2d_backward");
  STRATA_CHECK(dy.shape() == out && dy.dtype() == x.dtype(), "[conv2d_backward] grad ", dy.str(),
               " does not match the output ", shape_str(out));
  const Device d = common_device("conv2d_backward", dy, x, w);
  // The CPU kernel skips an undefined dx; other devices' kernels always get one.
  const bool alloc_dx = need_input_grad || !d.is_cpu();
  Tensor dx = alloc_dx ? empty(x.shape(), x.dtype(), d) : Tensor(), dw = empty(w.shape(), w.dtype(), d);
  Tensor db = has_bias ? empty({w.size(0)}, w.dtype(), d) : Tensor();
  kConvBwd(d)(contiguous(dy), contiguous(x), contiguous(w), dx, dw, db, p);
  return {need_input_grad ? dx : Tensor(), dw, db};
}

// ---------------------------------------------------------------- pooling
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_float16(x, "max_pool2d", "input");
  const Shape out = pool_out_shape(x.shape(), p, "max_pool2d");
  Tensor y = empty(out, x.dtype(), x.device()), idx = empty(out, DType::i64, x.device());
  kMaxPool(x.device())(contiguous(x), y, idx, p);
  return {y, idx};
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  check_float16(dy, "max_pool2d_backward", "grad");
  STRATA_CHECK(x_shape.size() == 4 && dy.dim() == 4 && indices.shape() == dy.shape() &&
                   indices.dtype() == DType::i64 && dy.size(0) == x_shape[0] && dy.size(1) == x_shape[1],
               "[max_pool2d_backward] grad ", dy.str(), " and indices ", indices.str(), " do not fit input ",
               shape_str(x_shape));
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  kMaxPoolBwd(dy.device())(contiguous(dy), contiguous(indices), dx);
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_float16(x, "avg_pool2d", "input");
  const Shape out = pool_out_shape(x.shape(), p, "avg_pool2d");
  Tensor y = empty(out, x.dtype(), x.device());
  kAvgPool(x.device())(contiguous(x), y, p);
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p) {
  check_pool_grad(dy, x_shape, p, "avg_pool2d_backward");
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  kAvgPoolBwd(dy.device())(contiguous(dy), dx, p);
  return dx;
}

// ---------------------------------------------------------------- embedding
Tensor embedding(const Tensor& weight, const Tensor& idx) {
  check_float16(weight, "embedding", "weight");
  STRATA_CHECK(weight.dim() == 2, "[embedding] weight must be (V, D), got ", shape_str(weight.shape()));
  STRATA_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32, "[embedding] indices must be i64 or i32, got ",
               idx.str());
  const Device d = common_device("embedding", weight, idx);
  Shape out = idx.shape();
  out.push_back(weight.size(1));
  Tensor y = empty(out, weight.dtype(), d);
  kEmbedding(d)(contiguous(weight), contiguous(idx), y);
  return y;
}

Tensor embedding_backward(const Tensor& dy, const Tensor& idx, int64_t num_weights) {
  check_float16(dy, "embedding_backward", "grad");
  STRATA_CHECK(dy.dim() == idx.dim() + 1 && dy.numel() == idx.numel() * dy.size(-1), "[embedding_backward] grad ",
               shape_str(dy.shape()), " does not match indices ", shape_str(idx.shape()), " + (D)");
  STRATA_CHECK(num_weights >= 0, "[embedding_backward] num_weights must be non-negative, got ", num_weights);
  const Device d = common_device("embedding_backward", dy, idx);
  Tensor dw = empty({num_weights, dy.size(-1)}, dy.dtype(), d);
  kEmbeddingBwd(d)(contiguous(dy), contiguous(idx), dw);
  return dw;
}

// ---------------------------------------------------------------- cross-entropy
std::pair<Tensor, Tensor> cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  check_float16(logits, "cross_entropy", "logits");
  STRATA_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
               "[cross_entropy] expects logits (N,C) and target (N), got ", shape_str(logits.shape()), " and ",
               shape_str(target.shape()));
  const Device d = common_device("cross_entropy", logits, target);
  // 16-bit logits: the softmax, the probabilities kept for backward and the loss are f32
  Tensor loss = empty({}, stat_dtype(logits.dtype()), d);
  Tensor probs = empty(logits.shape(), stat_dtype(logits.dtype()), d);
  kCrossEntropy(d)(contiguous(logits), contiguous(target), ignore_index, loss, probs);
  return {loss, probs};
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                              int64_t ignore_index) {
  check_float(probs, "cross_entropy_backward", "probs");
  return cross_entropy_backward(dloss, probs, target, ignore_index, probs.dtype());
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& probs, const Tensor& target, int64_t ignore_index,
                              DType gdt) {
  check_float(probs, "cross_entropy_backward", "probs");
  STRATA_CHECK(gdt == probs.dtype() || (is_16bit(gdt) && probs.dtype() == DType::f32),
               "[cross_entropy_backward] a ", dtype_name(gdt), " gradient needs ", dtype_name(gdt),
               " probs, or f32 probs for bf16/f16; got ", probs.str());
  STRATA_CHECK(dloss.numel() == 1, "[cross_entropy_backward] dloss must have one element, got ",
               shape_str(dloss.shape()));
  STRATA_CHECK(probs.dim() == 2 && target.dim() == 1 && target.size(0) == probs.size(0),
               "[cross_entropy_backward] expects probs (N,C) and target (N), got ", shape_str(probs.shape()),
               " and ", shape_str(target.shape()));
  const Device d = common_device("cross_entropy_backward", dloss, probs, target);
  Tensor dlogits = empty(probs.shape(), gdt, d);
  kCrossEntropyBwd(d)(dloss, contiguous(probs), contiguous(target), ignore_index, dlogits);
  return dlogits;
}

// ---------------------------------------------------------------- causal attention
namespace detail {
namespace {
// Views (B, H, T, hd) of q, k and v inside a packed (B, T, 3*H*hd) tensor.
std::array<Tensor, 3> attention_head_views(const Tensor& qkv, int64_t head_dim) {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(2) / (3 * head_dim);
  const Tensor t5 = view(qkv, {B, T, 3, H, head_dim});
  const auto part = [&](int64_t i) { return permute(select(t5, 2, i), {0, 2, 1, 3}); };
  return {part(0), part(1), part(2)};
}

// The views' batch (B, H) has no single stride, so a matmul on them makes one batched
// GEMM call per sequence; contiguous (B, H, T, hd) copies (one copy kernel each) make it
// one call for the whole batch (the small GPT on a GPU: docs/cuda.md).
std::array<Tensor, 3> attention_heads(const Tensor& qkv, int64_t head_dim) {
  const auto [q, k, v] = attention_head_views(qkv, head_dim);
  return {contiguous(q), contiguous(k), contiguous(v)};
}

// Grouped q|k|v (B, T, (H + 2 Hkv) hd) -> plain (B, T, 3 H hd): each key/value head
// repeated H/Hkv times, for the paths that take H heads of each.
Tensor repeat_kv_heads(const Tensor& qkv, int64_t hd, int64_t H, int64_t Hkv) {
  const int64_t B = qkv.size(0), T = qkv.size(1), rep = H / Hkv;
  const auto part = [&](int64_t i) {
    const Tensor heads = reshape(narrow(qkv, 2, (H + i * Hkv) * hd, Hkv * hd), {B, T, Hkv, 1, hd});
    return reshape(contiguous(expand(heads, {B, T, Hkv, rep, hd})), {B, T, H * hd});
  };
  return cat({narrow(qkv, 2, 0, H * hd), part(0), part(1)}, 2);
}
// Its adjoint: d plain q|k|v -> d grouped, each key/value head's gradient summed over its
// query heads.
Tensor sum_kv_heads(const Tensor& dqkv, int64_t hd, int64_t H, int64_t Hkv) {
  const int64_t B = dqkv.size(0), T = dqkv.size(1), rep = H / Hkv;
  const auto part = [&](int64_t i) {
    return reshape(sum(reshape(narrow(dqkv, 2, (1 + i) * H * hd, H * hd), {B, T, Hkv, rep, hd}), {3}),
                   {B, T, Hkv * hd});
  };
  return cat({narrow(dqkv, 2, 0, H * hd), part(0), part(1)}, 2);
}
}  // namespace

void composed_causal_attention(const Tensor& qkv, Tensor& y, Tensor& probs, int64_t head_dim) {
  const auto [q, k, v] = attention_heads(qkv, head_dim);
  const int64_t B = qkv.size(0), T = qkv.size(1), H = q.size(1);
  Tensor s = binary_scalar(BinaryOp::mul, matmul(q, transpose(k, -1, -2)), 1.0 / std::sqrt(double(head_dim)));
  s = masked_fill(s, to_device(causal_mask(T), qkv.device()), -std::numeric_limits<double>::infinity());
  copy_(probs, softmax(s, -1));
  Tensor yh = transpose(view(y, {B, T, H, head_dim}), 1, 2);  // (B, H, T, hd) view of y
  copy_(yh, matmul(probs, v));
}

void composed_causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, Tensor& dqkv,
                                        int64_t head_dim) {
  const auto [q, k, v] = attention_heads(qkv, head_dim);
  const int64_t B = qkv.size(0), T = qkv.size(1), H = q.size(1);
  const double scale = 1.0 / std::sqrt(double(head_dim));
  const Tensor g = contiguous(transpose(view(dy, {B, T, H, head_dim}), 1, 2));  // (B, H, T, hd)
  const Tensor ds = softmax_backward(matmul(g, transpose(v, -1, -2)), probs, -1);
  auto [dq, dk, dv] = attention_head_views(dqkv, head_dim);
  copy_(dq, binary_scalar(BinaryOp::mul, matmul(ds, k), scale));
  copy_(dk, binary_scalar(BinaryOp::mul, matmul(transpose(ds, -1, -2), q), scale));
  copy_(dv, matmul(transpose(probs, -1, -2), g));
}
}  // namespace detail

namespace {
// 16-bit tensors on the CPU run the composition (detail::composed_causal_attention, whose
// matmuls and softmax widen inside their kernels; the fused CPU kernel is f32/f64) and
// keep the probabilities (B, H, T, T), in 16 bits. Everything else runs a fused kernel
// (tensor/cpu/attention.cpp, tensor/cuda/attention.cu), which saves the rows' log-sum-exp
// (B, H, T) and recomputes the probabilities from it.
bool runs_composed(Device d, DType dt) { return d.is_cpu() && is_16bit(dt); }
Shape attention_stats_shape(Device d, DType dt, int64_t B, int64_t H, int64_t T) {
  return runs_composed(d, dt) ? Shape{B, H, T, T} : Shape{B, H, T};
}
DType attention_stats_dtype(Device d, DType dt) { return runs_composed(d, dt) ? dt : stat_dtype(dt); }
// Grouped key/value heads go to the CPU's fused kernel as they are; the other paths take
// them repeated to H heads (and sum the gradient back).
bool runs_grouped(const Tensor& qkv) { return qkv.device().is_cpu() && !runs_composed(qkv.device(), qkv.dtype()); }
}  // namespace

std::pair<Tensor, Tensor> causal_attention(const Tensor& qkv, int64_t head_dim, int64_t kv_heads) {
  const auto [H, Hkv] = attention_heads(qkv, head_dim, kv_heads, "causal_attention");
  if (Hkv != H && !runs_grouped(qkv)) return causal_attention(detail::repeat_kv_heads(qkv, head_dim, H, Hkv), head_dim);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const Device d = qkv.device();
  Tensor y = empty({B, T, H * head_dim}, qkv.dtype(), d);
  Tensor probs = empty(attention_stats_shape(d, qkv.dtype(), B, H, T), attention_stats_dtype(d, qkv.dtype()), d);
  if (runs_composed(d, qkv.dtype()))
    detail::composed_causal_attention(contiguous(qkv), y, probs, head_dim);
  else
    kAttention(d)(contiguous(qkv), y, probs, head_dim, Hkv);
  return {y, probs};
}

Tensor causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t head_dim,
                                 int64_t kv_heads, bool overwrite_qkv) {
  const auto [H, Hkv] = attention_heads(qkv, head_dim, kv_heads, "causal_attention_backward");
  if (Hkv != H && !runs_grouped(qkv))
    return detail::sum_kv_heads(
        causal_attention_backward(dy, detail::repeat_kv_heads(qkv, head_dim, H, Hkv), probs, head_dim), head_dim, H,
        Hkv);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  STRATA_CHECK(dy.shape() == (Shape{B, T, H * head_dim}) && dy.dtype() == qkv.dtype(),
               "[causal_attention_backward] grad ", dy.str(), " does not match the output (", B, ", ", T, ", ",
               H * head_dim, ") of qkv ", qkv.str());
  const Device d = common_device("causal_attention_backward", dy, qkv, probs);
  const Shape want = attention_stats_shape(d, qkv.dtype(), B, H, T);
  STRATA_CHECK(probs.shape() == want && probs.dtype() == attention_stats_dtype(d, qkv.dtype()),
               "[causal_attention_backward] saved statistics ", probs.str(), " do not match ", shape_str(want), " ",
               dtype_name(attention_stats_dtype(d, qkv.dtype())),
               runs_composed(d, qkv.dtype()) ? " (probabilities)" : " (log-sum-exp)");
  // over qkv in the CPU's fused kernel only (it reads a pair's rows before it writes their
  // gradients; the composed ops do not)
  const bool over = writes_over(qkv, overwrite_qkv && !runs_composed(d, qkv.dtype()));
  Tensor dqkv = over ? qkv : empty(qkv.shape(), qkv.dtype(), d);
  if (runs_composed(d, qkv.dtype()))
    detail::composed_causal_attention_backward(contiguous(dy), contiguous(qkv), contiguous(probs), dqkv, head_dim);
  else
    kAttentionBwd(d)(contiguous(dy), contiguous(qkv), contiguous(probs), dqkv, head_dim, Hkv);
  return dqkv;
}

bool fuses_rotary_attention(const Tensor& qkv) {
  return qkv.defined() && qkv.device().is_cpu() && (qkv.dtype() == DType::f32 || qkv.dtype() == DType::f64);
}

namespace {
// Checks causal_attention_rotary's inputs; returns the query and key/value heads.
std::pair<int64_t, int64_t> check_rotary_attention(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                                   int64_t head_dim, int64_t kv_heads, const char* op) {
  const auto heads = attention_heads(qkv, head_dim, kv_heads, op);
  STRATA_CHECK(fuses_rotary_attention(qkv), "[", op, "] runs on CPU f32/f64 tensors, got ", qkv.str());
  STRATA_CHECK(head_dim % 2 == 0, "[", op, "] head_dim ", head_dim, " must be even (rotary pairs)");
  STRATA_CHECK(positions.defined() && positions.dtype() == DType::i64 && positions.shape() == Shape{qkv.size(1)} &&
                   positions.device().is_cpu(),
               "[", op, "] positions must be (", qkv.size(1), ") i64 on the CPU, got ",
               positions.defined() ? positions.str() : "undefined");
  STRATA_CHECK(inv_freq.defined() && inv_freq.dtype() == DType::f64 && inv_freq.shape() == Shape{head_dim / 2} &&
                   inv_freq.device().is_cpu(),
               "[", op, "] inv_freq must be (", head_dim / 2, ") f64 on the CPU, got ",
               inv_freq.defined() ? inv_freq.str() : "undefined");
  return heads;
}
}  // namespace

std::pair<Tensor, Tensor> causal_attention_rotary(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                                  int64_t head_dim, int64_t kv_heads) {
  const auto [H, Hkv] = check_rotary_attention(qkv, positions, inv_freq, head_dim, kv_heads, "causal_attention_rotary");
  const int64_t B = qkv.size(0), T = qkv.size(1);
  Tensor y = empty({B, T, H * head_dim}, qkv.dtype(), kCPU);
  Tensor lse = empty({B, H, T}, qkv.dtype(), kCPU);
  kAttentionRotary(kCPU)(contiguous(qkv), contiguous(positions), contiguous(inv_freq), y, lse, head_dim, Hkv);
  return {y, lse};
}

Tensor causal_attention_rotary_backward(const Tensor& dy, const Tensor& qkv, const Tensor& positions,
                                        const Tensor& inv_freq, const Tensor& lse, int64_t head_dim,
                                        int64_t kv_heads, bool overwrite_qkv) {
  const char* op = "causal_attention_rotary_backward";
  const auto [H, Hkv] = check_rotary_attention(qkv, positions, inv_freq, head_dim, kv_heads, op);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  STRATA_CHECK(dy.shape() == (Shape{B, T, H * head_dim}) && dy.dtype() == qkv.dtype() && dy.device().is_cpu(), "[",
               op, "] grad ", dy.str(), " does not match the output (", B, ", ", T, ", ", H * head_dim, ") of qkv ",
               qkv.str());
  STRATA_CHECK(lse.shape() == (Shape{B, H, T}) && lse.dtype() == qkv.dtype() && lse.device().is_cpu(), "[", op,
               "] saved log-sum-exp ", lse.str(), " does not match (", B, ", ", H, ", ", T, ")");
  Tensor dqkv = writes_over(qkv, overwrite_qkv) ? qkv : empty(qkv.shape(), qkv.dtype(), kCPU);
  kAttentionRotaryBwd(kCPU)(contiguous(dy), contiguous(qkv), contiguous(positions), contiguous(inv_freq),
                            contiguous(lse), dqkv, head_dim, Hkv);
  return dqkv;
}

// ---------------------------------------------------------------- dropout
std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, Generator& gen) {
  check_float16(x, "dropout", "input");
  STRATA_CHECK(p >= 0 && p <= 1, "[dropout] p must be in [0, 1], got ", p);
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  Tensor mask = empty(x.shape(), DType::u8, x.device());
  const uint64_t base = gen.reserve(uint64_t(x.numel()));
  kDropout(x.device())(contiguous(x), y, mask, p, gen, base);
  return {y, mask};
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p) {
  check_float16(dy, "dropout_backward", "grad");
  STRATA_CHECK(mask.shape() == dy.shape() && mask.dtype() == DType::u8, "[dropout_backward] mask ", mask.str(),
               " does not match grad ", dy.str());
  Tensor dx = empty(dy.shape(), dy.dtype(), dy.device());
  kDropoutBwd(dy.device())(contiguous(dy), contiguous(mask), dx, p);
  return dx;
}

}  // namespace strata::ops
