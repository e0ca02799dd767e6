// Raw tensor ops: no autograd. Each is one device-agnostic front end (checks, shape
// logic, output allocation) that dispatches to a kernel in tensor/cpu/ (later
// tensor/cuda/) through the table in tensor/dispatch.h. The differentiable versions
// that models use are in autograd/functions.h and are built on these.
//
// Conventions: `dim` arguments accept negative values; float kernels support f32
// and f64 (f64 is for gradcheck); outputs are new contiguous tensors unless the op is
// a view (documented as such) or ends in `_` (in place).
#pragma once
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include <strata/core/rng.h>
#include <strata/tensor/tensor.h>

namespace strata::ops {

// ---------------------------------------------------------------- creation
Tensor empty(Shape shape, DType dtype = DType::f32, Device device = kCPU);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = kCPU);
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/// [start, end) with step; dtype i64 or floating.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::i64);
/// (t, t) u8 on the CPU, 1 where j > i: the future positions causal attention masks out.
Tensor causal_mask(int64_t t);
/// Copies `values` into a new CPU tensor of `shape` (numel must match).
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
/// Uniform in [lo, hi) / normal(mean, std) from a counter-based generator: the
/// values depend only on the generator state, never on the thread count.
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype = DType::f32);
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype = DType::f32);

// ---------------------------------------------------------------- copy / convert
Tensor to_cpu(const Tensor& t);
Tensor to_device(const Tensor& t, Device d);
Tensor to_dtype(const Tensor& t, DType d);
/// Returns t itself when already contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& t);
/// contiguous(t), or t itself when undefined (an optional operand: a weight, a bias).
Tensor contig_or_undef(const Tensor& t);
Tensor clone(const Tensor& t);
/// dst[...] = src broadcast to dst's shape (dtype converts). dst may be a strided view.
/// src may sit on another device (as torch's copy_): it is transferred, then converted.
void copy_(Tensor& dst, const Tensor& src);
void fill_(Tensor& t, double value);

// ---------------------------------------------------------------- views (share storage)
/// View with a new shape; -1 infers one dim. Errors when the strides do not allow it.
Tensor view(const Tensor& t, Shape shape);
/// view() when possible, else a contiguous copy.
Tensor reshape(const Tensor& t, Shape shape);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
/// Removes dimension `dim` by taking index `index`.
Tensor select(const Tensor& t, int64_t dim, int64_t index);
/// Broadcast view (stride 0 on expanded dims); -1 keeps a size.
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
/// Views of consecutive pieces of `sizes` along dim.
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim);
/// Shape both broadcast to (numpy rules); throws naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---------------------------------------------------------------- elementwise
enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };
enum class CompareOp { eq, ne, lt, le, gt, ge };
enum class UnaryOp { neg, exp, log, sqrt, rsqrt, abs, relu, gelu, gelu_tanh, tanh, sigmoid, sign, square, reciprocal };

/// Broadcasting a (op) b; dtypes must match.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// a (op) s, or s (op) a when scalar_first.
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first = false);
/// Broadcasting comparison; result is u8 (0/1).
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor unary(UnaryOp op, const Tensor& a);
/// cond (u8) ? a : b, broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// t with `value` where mask (u8, broadcast to t) is nonzero.
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
/// Gradient helpers: grad * f'(x) for the activations (x = forward input, y = output).
Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approx);
Tensor relu_backward(const Tensor& grad, const Tensor& y);
Tensor tanh_backward(const Tensor& grad, const Tensor& y);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);

// in place, contiguous fast paths; dst and src same shape unless noted
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);  // dst += alpha * src (src broadcasts)
void mul_(Tensor& t, double s);
void zero_(Tensor& t);

// ---------------------------------------------------------------- reductions
/// Sum over `dims` (empty = all dims).
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Max values along one dim.
Tensor amax(const Tensor& t, int64_t dim, bool keepdim = false);
/// Index (i64) of the max along dim (first one on ties).
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
/// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
/// sum of squares of all elements, in f64 (grad-norm clipping).
double sum_squares(const Tensor& t);

// ---------------------------------------------------------------- linear algebra
/// Matrix product with numpy semantics: (n,k)@(k,m); batched (...,n,k)@(...,k,m) with
/// broadcast batch dims; 1-D operands are promoted. Transposed views go to BLAS as
/// transposes, not copies.
Tensor matmul(const Tensor& a, const Tensor& b);
/// out = alpha * op(a) @ op(b) + beta * out for 2-D f32/f64; out contiguous, or a block
/// of columns of a wider matrix (rows at any stride, each row contiguous).
void gemm_(Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0, double beta = 0.0);
/// bias (n) added to every row of a (m, k) @ b (k, n), 2-D, as torch.addmm(bias, a, b): a
/// linear layer's forward with b = W^T. On the CPU the f32 GEMM library adds the bias in its
/// kernel where the rule routes the call to one that can (cpu::gemm_bias).
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b);

// ---------------------------------------------------------------- indexing / joining
Tensor cat(const std::vector<Tensor>& ts, int64_t dim);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim);
/// Rows of t along dim picked by idx (1-D i64/i32).
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& idx);
/// out[..idx..] += src along dim (inverse of index_select); out has `shape`.
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& src);
/// out[i][j] = t[i][idx[i][j]] for dim=1 (general dims), idx i64 same rank as t.
Tensor gather(const Tensor& t, int64_t dim, const Tensor& idx);
/// Zeros of `shape` with src scattered (added) at idx along dim; inverse of gather.
Tensor scatter_add(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& src);

// ---------------------------------------------------------------- neural-network kernels
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
/// dx from dy and the forward output y.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);

/// gelu(y + b) with b (C) broadcast over the rows of y (..., C), in one pass (a Linear's
/// bias fused with the GELU after it); b may be undefined. CPU and CUDA.
Tensor bias_gelu(const Tensor& y, const Tensor& b, bool tanh_approx);
/// A linear's GEMM and bias_gelu as one op: y = x2 w^T (M, out) with x2 (M, in), w (out, in),
/// and gelu(y + b); returns {y, gelu(y + b)}. On one CPU thread in row chunks
/// (tensor/row_chunks.h), so that the GELU reads each chunk of y from L2 just after the GEMM
/// wrote it. The same values as gemm_ then bias_gelu.
std::pair<Tensor, Tensor> linear_bias_gelu(const Tensor& x2, const Tensor& w, const Tensor& b, bool tanh_approx);
/// (dh, db) of bias_gelu: dh = dout * gelu'(y + b), db = dh summed over rows (undefined
/// unless need_bias_grad), in one pass. overwrite_y: the caller hands y over, and on the
/// CPU a contiguous y gets dh written over it (each element read before it is written).
std::pair<Tensor, Tensor> bias_gelu_backward(const Tensor& dout, const Tensor& y, const Tensor& b, bool tanh_approx,
                                             bool need_bias_grad, bool overwrite_y = false);
/// y = r + (y + b) in place, one pass: a Linear's bias and the residual add after it,
/// onto the bias-free GEMM output y (rows, C), contiguous; r has y's element count and
/// last dim (any shape, e.g. (B, T, C)); b (C) may be undefined. CPU and CUDA.
void bias_residual_(Tensor& y, const Tensor& b, const Tensor& r);
/// The residual stream's update and the LayerNorm that reads it, one pass per row: y = s =
/// r + (y + b) in place (as bias_residual_), then z = layer_norm(s, weight, bias, eps). y
/// (rows, C) contiguous; r has y's element count and last dim; b, weight, bias (C) may be
/// undefined. Returns z (y's shape), mean and rstd (rows) as layer_norm; every value equals
/// bias_residual_ then layer_norm bit for bit. CPU and CUDA.
std::tuple<Tensor, Tensor, Tensor> bias_residual_layer_norm_(Tensor& y, const Tensor& b, const Tensor& r,
                                                             const Tensor& weight, const Tensor& bias, double eps);
/// (ds, dweight, dbias): layer_norm_backward(dz, s, mean, rstd, weight, has_bias) with g added
/// to its dx in the same pass (g: the gradient s received from its other consumers, s's
/// shape and dtype; undefined: layer_norm_backward itself). in_place: ds is written into
/// g's bytes (g contiguous). Equals layer_norm_backward then g + dx bit for bit.
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_add(const Tensor& dz, const Tensor& s, const Tensor& mean,
                                                           const Tensor& rstd, const Tensor& weight, bool has_bias,
                                                           const Tensor& g, bool in_place);

/// Over the last dim of x (..., C); weight/bias (C) may be undefined.
/// Returns y, mean (rows), rstd (rows).
std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              double eps);
/// Returns dx, dweight, dbias (the last two undefined when weight/bias are).
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight, bool has_bias);

/// x (N,C,H,W) or (N,C); training uses batch stats and updates running stats in
/// place (unbiased var, PyTorch momentum convention). Returns y, save_mean, save_invstd.
/// With relu, y is relu(batch norm of x): the values of batch_norm then unary(relu), in one
/// pass where the device has the fused kernel (the CPU), else those two ops.
std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              Tensor& running_mean, Tensor& running_var, bool training,
                                              double momentum, double eps, bool relu = false);
/// With relu_out (the y of batch_norm(..., relu = true)) defined, dy is first masked by
/// relu_out > 0 (relu_backward), in the same pass where the device has the fused kernel.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, const Tensor& relu_out = Tensor());

/// batch_norm(..., relu = true) then a 2x2 stride-2 unpadded max pool of x (N, C, H, W),
/// H, W >= 2, in one pass; CPU only (autograd's batch_norm_relu_max_pool2 runs the ops one
/// after another on other devices). Returns
/// p (N, C, H/2, W/2) with max_pool2d's values, win (u8, p's shape: each max's place in its
/// 2x2 window, 0..3 row-major), save_mean, save_invstd. The ReLU's output is not stored.
std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_relu_max_pool2(const Tensor& x, const Tensor& weight,
                                                                     const Tensor& bias, Tensor& running_mean,
                                                                     Tensor& running_var, bool training,
                                                                     double momentum, double eps);
/// Its backward, dp the gradient of p: dx, dw, db, the bits of max_pool2d_backward then
/// batch_norm_backward(..., relu_out).
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_max_pool2_backward(const Tensor& dp, const Tensor& p,
                                                                       const Tensor& win, const Tensor& x,
                                                                       const Tensor& weight, const Tensor& save_mean,
                                                                       const Tensor& save_invstd, bool training);

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};
/// x (N,C,H,W), w (O,C,kh,kw), b (O) or undefined -> (N,O,Ho,Wo). im2col + GEMM.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
/// Returns dx, dw, db (db undefined when has_bias is false; dx undefined, and on CPU not
/// computed, when need_input_grad is false, e.g. for a first layer whose input needs no
/// gradient).
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                   bool has_bias, const Conv2dParams& p,
                                                   bool need_input_grad = true);

struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
};
/// Returns y and the argmax indices (i64, flat over H*W of each plane).
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
/// count_include_pad = true (PyTorch default).
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p);

/// weight (V,D), idx any shape of i64/i32 -> idx.shape + (D).
Tensor embedding(const Tensor& weight, const Tensor& idx);
/// Scatter-add of dy rows into a (V,D) zero gradient.
Tensor embedding_backward(const Tensor& dy, const Tensor& idx, int64_t num_weights);

/// Mean cross-entropy of logits (N,C) against targets (N) i64, skipping ignore_index.
/// Returns the scalar loss and the softmax probabilities (N,C) for backward.
/// The mean is over non-ignored targets (0 loss if there are none).
std::pair<Tensor, Tensor> cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index);
/// d logits = dloss * (probs - onehot(target)) / count, zero rows for ignored targets.
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                              int64_t ignore_index);

/// Causal self-attention of a packed projection: qkv (B, T, 3*H*hd) holds q|k|v, each H
/// heads of head_dim hd. y = softmax(q k^T / sqrt(hd), causal) v per head, merged back
/// to (B, T, H*hd). Returns y and what backward needs: the rows' log-sum-exp (B, H, T)
/// (f32 for 16-bit qkv), or, for 16-bit tensors on the CPU (the composition), the
/// probabilities (B, H, T, T), zero above the diagonal. No dropout on the probabilities. Grouped-query attention: kv_heads = Hkv > 0 key/value
/// heads, qkv (B, T, (H + 2*Hkv)*hd) = q (H heads) | k (Hkv) | v (Hkv), query head h reading
/// key/value head h / (H/Hkv); the CPU's f32/f64 kernel reads the groups in place.
std::pair<Tensor, Tensor> causal_attention(const Tensor& qkv, int64_t head_dim, int64_t kv_heads = 0);
/// d qkv (the shape of qkv) from dy (B, T, H*hd), the forward's qkv and saved statistics.
/// overwrite_qkv: the caller hands qkv over, and the CPU's fused kernel writes d qkv over a
/// contiguous qkv (it reads each (batch, head) pair's rows before it writes their gradients).
Tensor causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, int64_t head_dim,
                                 int64_t kv_heads = 0, bool overwrite_qkv = false);
/// Whether causal_attention_rotary runs for qkv: the CPU's fused f32/f64 kernel.
bool fuses_rotary_attention(const Tensor& qkv);
/// causal_attention of qkv with its q and k heads turned by the rotary embedding first, in
/// the attention kernel as it packs each pair's rows: bit for bit causal_attention(rotary(
/// qkv as (B, T, H + 2 Hkv, hd), positions, inv_freq, false, H + Hkv)) without the turned
/// tensor. positions (T) i64, inv_freq (hd/2) f64. Where fuses_rotary_attention(qkv) only.
std::pair<Tensor, Tensor> causal_attention_rotary(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                                                  int64_t head_dim, int64_t kv_heads);
/// d qkv (as given, not turned) of causal_attention_rotary; overwrite_qkv as for
/// causal_attention_backward.
Tensor causal_attention_rotary_backward(const Tensor& dy, const Tensor& qkv, const Tensor& positions,
                                        const Tensor& inv_freq, const Tensor& lse, int64_t head_dim,
                                        int64_t kv_heads, bool overwrite_qkv = false);

// ---------------------------------------------------------------- Llama kernels (llama_ops.cpp)
/// RMSNorm over the last dim of x (..., C): y = x / sqrt(mean(x^2) + eps) * weight; weight
/// (C) may be undefined. Returns y and rstd (rows), f32 for a 16-bit x. CPU and CUDA.
std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Tensor& weight, double eps);
/// (dx, dweight) of rms_norm (dweight undefined when weight is).
std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                            const Tensor& weight);
/// rms_norm_backward with pending (x's shape) the gradient x already received from its
/// other consumers: dx = pending + the RMSNorm's dx, bit for bit the engine's add of the two,
/// in one pass (CPU and CUDA). in_place: written into pending (a
/// contiguous tensor the caller owns). Undefined pending: rms_norm_backward.
std::pair<Tensor, Tensor> rms_norm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                                const Tensor& weight, const Tensor& pending, bool in_place);
/// Rotary position embedding of x (B, T, H, hd), hd even, in the rotate-half layout of
/// Hugging Face's Llama: the pair (x[..., i], x[..., i + hd/2]) turns by the angle
/// positions[t] * inv_freq[i]. positions (T) i64 (global positions: context parallelism
/// passes its zigzag chunks'), inv_freq (hd/2) f64. `inverse` turns by the negative
/// angle (the backward). rotated_heads >= 0: only heads h < rotated_heads turn, the others
/// are copied (a packed q|k|v whose v heads come last). f32, f64, bf16, f16.
Tensor rotary(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse = false,
              int64_t rotated_heads = -1);
/// silu(gate) * up elementwise (Llama's SwiGLU), gate and up of one shape and dtype. CPU and CUDA.
Tensor swiglu(const Tensor& gate, const Tensor& up);
/// The SwiGLU MLP's input projections and activation as one op: gate = x2 w1^T and
/// up = x2 w3^T (M, F) each, with x2 (M, in) and w1, w3 (F, in), and h = swiglu(gate, up).
/// On one CPU thread in row chunks (tensor/row_chunks.h, sized by a chunk's gate and up
/// rows together), so the activation reads each chunk's GEMM outputs from L2. Returns
/// {gate, up, h}: the same values as two gemm_ and swiglu.
std::tuple<Tensor, Tensor, Tensor> linear_swiglu(const Tensor& x2, const Tensor& w1, const Tensor& w3);
/// (dgate, dup) of swiglu. overwrite_gate / overwrite_up: the caller hands gate / up over,
/// and on the CPU a contiguous one gets its gradient written over it.
std::pair<Tensor, Tensor> swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                                          bool overwrite_gate = false, bool overwrite_up = false);

/// Inverted dropout: returns y = x * mask / (1-p) and the mask (u8).
std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, Generator& gen);
/// dy * mask / (1-p)
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p);

// ---------------------------------------------------------------- optimizer kernels (in place)
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;        // 1-based, for bias correction
  bool decoupled;      // true: AdamW (decay the weight), false: Adam (L2 into grad)
};
/// Fused Adam/AdamW update of param using grad and state m, v (all same shape, contiguous).
void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p);
struct SgdParams {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;  // momentum buffer is initialised to grad on the first step
};
/// SGD with momentum/nesterov/weight decay; buf may be undefined when momentum == 0.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, const SgdParams& p);

// ---------------------------------------------------------------- multi-tensor forms
// One call over a list of tensors (an optimizer's parameters): on CUDA a few launches for
// the whole list (tensor/multi_tensor_plan.h), on the CPU the per-tensor kernels in list
// order, so a CPU result is bit-identical to calling the single-tensor op on each. Every
// list holds contiguous tensors of one device; entries i of the lists belong together.

/// adam_step_(params[i], grads[i], m[i], v[i], p) for every i (one step count for all).
void adam_step_multi_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> m,
                      std::span<Tensor> v, const AdamParams& p);
/// sgd_step_(params[i], grads[i], bufs[i], p) for every i; bufs empty when momentum == 0.
void sgd_step_multi_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                     const SgdParams& p);
/// The sum of sum_squares(ts[i]) over i, in f64 (0 for an empty list).
double sum_squares_multi(std::span<const Tensor> ts);
/// mul_(ts[i], s) for every i.
void mul_multi_(std::span<Tensor> ts, double s);

}  // namespace strata::ops
