// CPU kernels for 2-d convolution: im2col of a group of samples into one matrix,
// one BLAS GEMM per group (BLAS threads it), col2im for the input gradient.
#pragma once
#include "tensor/ops.h"

namespace strata::cpu {

/// y (N,O,Ho,Wo) = conv(x (N,C,H,W), w (O,C,kh,kw)) + b (O, may be undefined).
/// All operands contiguous, same float dtype; y preallocated.
void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);
/// dx (N,C,H,W), dw (O,C,kh,kw), db (O, skipped when undefined); all preallocated, overwritten.
void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                            Tensor& db, const ops::Conv2dParams& p);

}  // namespace strata::cpu
