// Differentiable ops: what models are written with. Each wraps a raw op from
// tensor/ops.h and, when grad mode is on and an input requires grad, records a
// Node (defined next to its forward in autograd/fn_*.cpp) whose backward is built
// from raw ops. Shapes follow PyTorch; negative dims count from the end.
#pragma once
#include <functional>
#include <vector>

#include <strata/tensor/ops.h>

namespace strata {

// ---------------------------------------------------------------- views / shape (fn_shape.cpp)
Tensor view(const Tensor& t, Shape shape);
Tensor reshape(const Tensor& t, Shape shape);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& t);
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim);
Tensor cat(const std::vector<Tensor>& ts, int64_t dim);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& idx);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& idx);

// ---------------------------------------------------------------- linear algebra (fn_linalg.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);
/// x (..., in) @ w(out, in)^T + b(out); b may be undefined. One GEMM, no transposed copy.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
/// gelu(linear(x, w, b), tanh_approx) with the bias and GELU in one pass after a
/// bias-free GEMM, and in backward the GELU and bias gradients in one pass (node
/// "LinearGeluBackward"). Saves x, w, b and the GEMM output (not the pre-activation).
/// For 16-bit dtypes, under autocast or with mixed dtypes: linear then gelu.
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, bool tanh_approx);
/// residual + linear(x, w, b) with the bias and the residual added in one pass after a
/// bias-free GEMM (a transformer's output projection into the residual stream; node
/// "LinearResidualBackward", which passes the gradient to the residual uncopied and saves
/// x and w only). residual has the Linear's output shape. For 16-bit dtypes, under
/// autocast or with mixed dtypes: add(residual, linear(x, w, b)).
Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual);
/// (s, z) = (residual + linear(x, w, b), layer_norm(s, ln_w, ln_b, eps)): a pre-LN block's
/// residual add and the LayerNorm after it. Where it fuses (as linear_residual, with ln_w /
/// ln_b of x's dtype and device, on a device residual_norm_fusion() admits) the bias, the
/// residual and the LayerNorm are one pass after a bias-free GEMM
/// (ops::bias_residual_layer_norm_), and the LayerNorm's backward (node
/// "LayerNormAddBackward") adds the gradient s received from its other consumers in its
/// own pass (ops::layer_norm_backward_add); otherwise linear_residual then layer_norm.
/// Same values either way, bit for bit.
std::pair<Tensor, Tensor> linear_residual_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b,
                                                     const Tensor& residual, const Tensor& ln_w, const Tensor& ln_b,
                                                     double eps = 1e-5);
/// Where linear_residual_layer_norm fuses: automatic (the default: every device, CPU and
/// CUDA, docs/performance.md), always (the same today) or never (the separate ops: tests
/// compare the two). Process-wide; thread-safe.
enum class ResidualNormFusion { automatic, always, never };
void set_residual_norm_fusion(ResidualNormFusion f);
ResidualNormFusion residual_norm_fusion();
/// Bias-free linears sharing their input, their outputs side by side: (..., sum of the
/// weights' out) = cat(linear(x, w_i)), one GEMM against the weights stacked (a copy of the
/// weights, not of the outputs); backward accumulates dx over the blocks in the GEMMs (beta 1, no adds) and
/// takes each weight's gradient from its block (node "LinearPackedBackward"). Saves x and
/// the weights. Under autocast or with mixed dtypes: cat of the separate linears.
Tensor linear_packed(const Tensor& x, const std::vector<Tensor>& ws);

// ---------------------------------------------------------------- elementwise (fn_elementwise.cpp)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor square(const Tensor& a);
Tensor relu(const Tensor& a);
/// Exact (erf) GELU; tanh_approx selects GPT-2's tanh form.
Tensor gelu(const Tensor& a, bool tanh_approx = false);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
/// cond (u8, not differentiable) ? a : b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
/// x converted to dtype dt (returns x itself when it already is dt). Backward casts the
/// gradient back to x's dtype, so an f32 leaf read through a bf16 cast gets an f32 .grad.
/// Differentiable between floating dtypes only (a cast to or from an integer records nothing).
Tensor cast(const Tensor& x, DType dt);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator+(double s, const Tensor& a);

// ---------------------------------------------------------------- reductions (fn_reduce.cpp)
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Max values along dim; the gradient goes to the (first) argmax.
Tensor amax(const Tensor& t, int64_t dim, bool keepdim = false);

// ---------------------------------------------------------------- nn functional (fn_nn.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
/// RMSNorm over the last dim (Llama): x / sqrt(mean(x^2) + eps) * weight (weight may be
/// undefined). One fused op; saves x and the per-row rstd. An f32 op under autocast.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
/// Rotary position embedding of x (B, T, H, hd) in the rotate-half layout (ops::rotary);
/// positions (T) i64 and inv_freq (hd/2) f64 are not differentiated. Backward turns the
/// gradient back by the same angles. Saves nothing but the two tables' handles.
/// rotated_heads >= 0: only the first rotated_heads heads turn, the rest pass through.
Tensor rotary(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, int64_t rotated_heads = -1);
/// silu(gate) * up (Llama's SwiGLU MLP), one fused op; saves gate and up.
Tensor swiglu(const Tensor& gate, const Tensor& up);
/// swiglu(linear(x, w1), linear(x, w3)) (Llama's SwiGLU MLP up to its output projection)
/// with the GEMMs and the activation in row chunks (ops::linear_swiglu), and in backward
/// each chunk's SwiGLU gradient formed just before the chunk's weight- and input-gradient
/// GEMMs read it (node "LinearSwigluBackward"). Saves x, w1, w3, gate and up, as the
/// three ops do. For 16-bit dtypes, under autocast or with mixed dtypes: the three ops.
Tensor linear_swiglu(const Tensor& x, const Tensor& w1, const Tensor& w3);
/// Updates running stats in place when training. With relu, relu(batch_norm(...)) as one
/// op (ops::batch_norm's fused pass): the same values and gradients as the two ops, without
/// the tensor between them; it saves its output for the ReLU's mask, as relu does.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5, bool relu = false);
/// batch_norm(..., relu = true) then max_pool2d with a 2x2 window and stride 2, as one op
/// on the CPU (ops::batch_norm_relu_max_pool2: the same values and gradients, the ReLU's
/// output never stored; it saves x, the pooled output and each max's place); elsewhere the
/// two ops. x (N, C, H, W), H, W >= 2.
Tensor batch_norm_relu_max_pool2(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                                 Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p);
Tensor max_pool2d(const Tensor& x, const ops::Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const ops::Pool2dParams& p);
Tensor embedding(const Tensor& weight, const Tensor& idx);
/// logits (N,C) or (..., C) flattened, target (N) / (...) i64; mean over non-ignored.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);
/// Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
/// Causal self-attention of a packed projection qkv (B, T, 3*H*hd) -> (B, T, H*hd), one
/// fused op (ops::causal_attention): softmax(q k^T / sqrt(hd), causal) v per head, no
/// dropout on the probabilities. Saves qkv and the rows' log-sum-exp (B, H, T) (the
/// probabilities (B, H, T, T) for 16-bit tensors on the CPU). kv_heads > 0: grouped-query
/// attention over qkv (B, T, (H + 2*kv_heads)*hd), as ops::causal_attention.
Tensor causal_attention(const Tensor& qkv, int64_t head_dim, int64_t kv_heads = 0);
/// causal_attention of qkv (B, T, (H + 2 Hkv)*hd) after the rotary embedding of its q and k
/// heads (rotary(..., H + Hkv) at positions (T) i64 with inv_freq (hd/2) f64): on CPU f32/f64
/// tensors outside autocast one kernel turns q and k as it packs them (ops::
/// causal_attention_rotary, node "CausalAttentionRotaryBackward", which saves qkv as given
/// and no turned copy); elsewhere the two ops. Same values either way, bit for bit.
Tensor causal_attention_rotary(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim,
                               int64_t kv_heads = 0);

// ---------------------------------------------------------------- activation checkpointing (checkpoint.cpp)
/// Runs fn(inputs) without recording; in backward re-runs it with grad and
/// backpropagates through the recomputed segment. Parameters used inside fn
/// receive their gradient once (their hooks fire once). fn must be deterministic
/// (dropout: pass a generator whose state fn restores, see nn::Dropout).
std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs);

}  // namespace strata
