// CPU kernels for RMSNorm (Llama's normalization) over the rows of a contiguous (rows, C)
// matrix: no mean subtraction and no bias.
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// y = x * rstd * w per row, rstd = 1 / sqrt(mean(x^2) + eps); w (C) may be undefined.
/// rstd: (rows), f32 when x is f16/bf16 (statistics in f32), else x's dtype.
void rms_norm_kernel(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, int64_t rows, int64_t C,
                     double eps);
/// dx (always) and dw (when defined, shape (C)).
void rms_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w, Tensor& dx,
                              Tensor& dw, int64_t rows, int64_t C);
/// As rms_norm_backward_kernel with dx = pending + the RMSNorm's dx, bit for bit the two
/// added as the autograd engine adds them; dx may be pending itself.
void rms_norm_backward_add_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                                  const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C);

}  // namespace strata::cpu
