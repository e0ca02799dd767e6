// CPU kernels for layer norm (rows of a contiguous (rows, C) matrix) and batch norm
// (channels of a contiguous (N, C, S) tensor, S = H*W or 1).
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// y = (x - mean) * rstd * w + b per row; w/b may be undefined. mean, rstd: (rows), f32 when x is
/// f16/bf16 (statistics in f32), else x's dtype.
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean, Tensor& rstd,
                       int64_t rows, int64_t C, double eps);
/// dx (always), dw and db (each only when defined, shape (C)).
void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, int64_t rows, int64_t C);
/// The body of layer_norm_backward_kernel and of layer_norm_backward_add_kernel
/// (residual_norm.h): with `pending` (rows, C) defined, dx = pending + the LayerNorm's dx in
/// the same pass (norm_rows::layer_norm_backward). `op` names the kernel in a dtype error.
void layer_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& pending, Tensor& dx, Tensor& dw,
                              Tensor& db, int64_t rows, int64_t C);

/// Training: batch statistics; updates running_mean/var in place when defined
/// (r = (1 - momentum) * r + momentum * stat, unbiased var). Eval: running statistics.
/// save_mean / save_invstd (C) receive the statistics y was normalised with.
void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                       Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N,
                       int64_t C, int64_t S, bool training, double momentum, double eps);
/// dx, dw (sum dy * xhat), db (sum dy); training includes the statistics' gradient.
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                                const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db, int64_t N,
                                int64_t C, int64_t S, bool training);

/// batch_norm_kernel with the ReLU after it in the same pass: y = relu(batch norm of x),
/// bit for bit the two kernels one after the other, without the intermediate tensor.
void batch_norm_relu_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                            Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N,
                            int64_t C, int64_t S, bool training, double momentum, double eps);
/// The backward of batch_norm_relu_kernel, y its output: dy masked by y > 0 (relu's
/// backward) as it is read, then batch_norm_backward_kernel's arithmetic, bit for bit.
void batch_norm_relu_backward_kernel(const Tensor& dy, const Tensor& y, const Tensor& x, const Tensor& w,
                                     const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dw,
                                     Tensor& db, int64_t N, int64_t C, int64_t S, bool training);

/// batch_norm_relu_kernel then a 2x2 stride-2 unpadded max pool of x (N, C, H, W), H, W >= 2,
/// in one pass: p (N, C, H/2, W/2) the window maxima, bit for bit max_pool2d's values, and
/// win (u8, same shape) each max's place in its window (0..3, row-major; the first of equal
/// maxima). The ReLU's output is not stored.
void batch_norm_relu_max_pool2_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                                      Tensor& running_var, Tensor& p, Tensor& win, Tensor& save_mean,
                                      Tensor& save_invstd, int64_t N, int64_t C, int64_t H, int64_t W, bool training,
                                      double momentum, double eps);
/// Its backward (dp the gradient of p): dx, dw, db, bit for bit max_pool2d_backward, then
/// batch_norm_relu_backward_kernel.
void batch_norm_relu_max_pool2_backward_kernel(const Tensor& dp, const Tensor& p, const Tensor& win, const Tensor& x,
                                               const Tensor& w, const Tensor& save_mean, const Tensor& save_invstd,
                                               Tensor& dx, Tensor& dw, Tensor& db, int64_t N, int64_t C, int64_t H,
                                               int64_t W, bool training);

}  // namespace strata::cpu
