// CPU kernels for 2-d max and average pooling over contiguous (N*C, H, W) planes.
#pragma once
#include <strata/tensor/ops.h>

namespace strata::cpu {

/// y, idx (N,C,Ho,Wo) preallocated; idx (i64) is the flat h*W+w of each window's max
/// (first on ties, NaN wins). Padded positions never win.
void max_pool2d_kernel(const Tensor& x, Tensor& y, Tensor& idx, const ops::Pool2dParams& p);
/// dx (N,C,H,W) preallocated: zero, then dx[idx] += dy per plane.
void max_pool2d_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dx);
/// Mean over each window, padding counted (count_include_pad = true).
void avg_pool2d_kernel(const Tensor& x, Tensor& y, const ops::Pool2dParams& p);
void avg_pool2d_backward_kernel(const Tensor& dy, Tensor& dx, const ops::Pool2dParams& p);

}  // namespace strata::cpu
