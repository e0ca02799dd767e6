// The CUDA kernel entry points, one per KernelTable of the op front ends, with exactly
// the cpu:: kernels' signatures and semantics (tensor/cpu/*.h); register.cpp registers
// them for DeviceType::CUDA under the tables' op names. Each runs on the current
// stream of its tensors' device and returns without waiting, except where noted (index
// and target validation, sum_squares) because the result or the error is needed on the host.
#pragma once
#include <cstdint>

#include <strata/core/rng.h>
#include <strata/tensor/attention_block.h>
#include <strata/tensor/cpu/elementwise.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/ops.h>

namespace strata::cuda {

// copy.cu: strided copy with dtype conversion, fill, device transfers
void copy_kernel(Tensor& dst, const Tensor& src);
void fill_kernel(Tensor& t, double value);
/// out (contiguous, on `out`'s device) = src from another device (CPU or CUDA). Blocks
/// until done when either side is the CPU.
void transfer_kernel(Tensor& out, const Tensor& src);

// elementwise.cu
void binary_kernel(ops::BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b);
void binary_scalar_kernel(ops::BinaryOp op, Tensor& out, const Tensor& a, double s, bool scalar_first);
void compare_kernel(ops::CompareOp op, Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar_kernel(ops::CompareOp op, Tensor& out, const Tensor& a, double s);
void unary_kernel(ops::UnaryOp op, Tensor& out, const Tensor& a);
void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void masked_fill_kernel(Tensor& out, const Tensor& t, const Tensor& mask, double value);
void act_grad_kernel(cpu::ActGrad kind, Tensor& out, const Tensor& grad, const Tensor& x);
void add_kernel(Tensor& dst, const Tensor& src, double alpha);
void scale_kernel(Tensor& t, double s);

// reduce.cu
void sum_kernel(Tensor& out, const Tensor& in, double scale);
void max_kernel(Tensor& values, Tensor& indices, const Tensor& in, int64_t dim);
/// Waits for the result.
double sum_squares_kernel(const Tensor& in);

// gemm.cpp (cuBLAS)
void gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, cpu::MatRef a, cpu::MatRef b, double beta, void* c,
          int64_t ldc);
void gemm_batched(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, cpu::MatRef a, int64_t stride_a,
                  cpu::MatRef b, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c);

// index.cu
void index_select_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx);
void index_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);
void gather_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx);
void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);
void embedding_kernel(const Tensor& weight, const Tensor& idx, Tensor& out);
void embedding_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dw);

// softmax.cu (softmax and the fused cross-entropy)
void softmax_kernel(const Tensor& x, Tensor& y, int64_t outer, int64_t n, int64_t inner, bool log);
void softmax_backward_kernel(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t outer, int64_t n, int64_t inner,
                             bool log);
void cross_entropy_kernel(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor& loss,
                          Tensor& probs);
void cross_entropy_backward_kernel(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                                   int64_t ignore_index, Tensor& dlogits);

// norm.cu
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean, Tensor& rstd,
                       int64_t rows, int64_t C, double eps);
void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, int64_t rows, int64_t C);
void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean, Tensor& running_var,
                       Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N, int64_t C, int64_t S,
                       bool training, double momentum, double eps);
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                                const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db, int64_t N, int64_t C,
                                int64_t S, bool training);

// conv.cpp (cuDNN)
void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);
void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                            const ops::Conv2dParams& p);

// pool.cu
void max_pool2d_kernel(const Tensor& x, Tensor& y, Tensor& idx, const ops::Pool2dParams& p);
void max_pool2d_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dx);
void avg_pool2d_kernel(const Tensor& x, Tensor& y, const ops::Pool2dParams& p);
void avg_pool2d_backward_kernel(const Tensor& dy, Tensor& dx, const ops::Pool2dParams& p);

// dropout.cu (Philox masks identical to the CPU kernel's)
void dropout_kernel(const Tensor& x, Tensor& y, Tensor& mask, double p, const Generator& gen, uint64_t base);
void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p);

// bias_act.cu: bias + GELU forward and backward, bias + residual (f32, f64, bf16, f16)
void bias_gelu_kernel(const Tensor& y, const Tensor& b, Tensor& out, bool tanh_approx);
void bias_gelu_backward_kernel(const Tensor& dout, const Tensor& y, const Tensor& b, Tensor& dh, Tensor& db,
                               bool tanh_approx);
void bias_residual_kernel(Tensor& y, const Tensor& b, const Tensor& r);
// residual_norm.cu: residual add + LayerNorm forward, LayerNorm backward + the other gradient
void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps);
/// dw = sum over rows of dy * (x - mean) * rstd and db = sum of dy (each only when defined),
/// the layer norm backwards' deterministic column sums (chunked f64 partials).
void layer_norm_param_grads(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, Tensor& dw,
                            Tensor& db, int64_t rows, int64_t C);
/// The body of layer_norm_backward_kernel and layer_norm_backward_add_kernel: with `pending`
/// defined, dx = pending + the LayerNorm's dx in the dx kernel (norm_rows::ln_bwd_dx_k), then
/// layer_norm_param_grads. `op` names the kernel in errors.
void layer_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& pending, Tensor& dx, Tensor& dw,
                              Tensor& db, int64_t rows, int64_t C);
void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C);
// optim.cu
void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p);
void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p);
// The 16-bit model states' fused steps (tensor/half_ops.h): f32 master and state, grad
// bf16/f16/f32, param16 bf16/f16 receiving the rounded master.
void adam_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                       const ops::AdamParams& p);
void sgd_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const ops::SgdParams& p);
// attention.cu: fused causal attention (FlashAttention-2's algorithm). qkv (B, T, 3*H*hd)
// -> y (B, T, H*hd) and the rows' log-sum-exp (B, H, T) (f32; f64 for f64), as the CPU
// kernel; f32, f64, bf16, f16; hd <= attention_max_head_dim().
// kv_heads must be H (ops::causal_attention repeats grouped key/value heads first).
int64_t attention_max_head_dim();
void causal_attention_kernel(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim, int64_t kv_heads);
void causal_attention_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                      int64_t head_dim, int64_t kv_heads);
// attention_mma.cu: the same op on tensor cores, for the calls attention_mma_plan.h's
// choose_attention gives them (16-bit, hd 32/64/128, sm_80+); false (nothing done) otherwise.
bool mma_causal_attention(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim);
bool mma_causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                   int64_t head_dim);
// attention_block.cu: blockwise causal attention (ring attention's blocks), exactly
// cpu::attention_block_forward / _delta / _backward (tensor/cpu/attention_block.h); f32, f64.
bool attention_block_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                                    int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop);
void attention_block_delta_kernel(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta);
bool attention_block_backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                     const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos,
                                     int64_t head_dim, Tensor& dq, Tensor& dk, Tensor& dv, const AttentionDropout& drop);
// norm.cu / llama_ops.cu: the Llama family's RMSNorm, rotary embedding and SwiGLU (f32, f64,
// bf16, f16; RMSNorm's rstd in f32 for 16-bit x, as the CPU's)
void rms_norm_kernel(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, int64_t rows, int64_t C, double eps);
void rms_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w, Tensor& dx,
                              Tensor& dw, int64_t rows, int64_t C);
void rms_norm_backward_add_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                                  const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C);
void rotary_kernel(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y, int64_t B, int64_t T,
                   int64_t H, int64_t hd, bool inverse, int64_t rotated);
void swiglu_kernel(const Tensor& g, const Tensor& u, Tensor& y, int64_t n);
void swiglu_backward_kernel(const Tensor& dy, const Tensor& g, const Tensor& u, Tensor& dg, Tensor& du, int64_t n);
// The multi-tensor forms (ops.h): a list in a few launches; sum_squares_multi waits for its result.
void adam_multi_kernel(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> m,
                       std::span<Tensor> v, const ops::AdamParams& p);
void sgd_multi_kernel(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                      const ops::SgdParams& p);
double sum_squares_multi_kernel(std::span<const Tensor> ts);
void mul_multi_kernel(std::span<Tensor> ts, double s);

}  // namespace strata::cuda
