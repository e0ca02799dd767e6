// CPU kernels for 2-d convolution: samples split over the threads, each thread runs
// im2col of a group of its samples, one single-threaded BLAS GEMM, col2im for dx.
#pragma once
#include <strata/tensor/ops.h>

namespace strata::cpu {

/// y (N,O,Ho,Wo) = conv(x (N,C,H,W), w (O,C,kh,kw)) + b (O, may be undefined).
/// All operands contiguous, same float dtype; y preallocated.
void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);
/// dx (N,C,H,W), dw (O,C,kh,kw), db (O); all preallocated, overwritten. dx and db may
/// be undefined: not computed (an undefined dx skips half the backward GEMMs). dw is
/// summed per thread then reduced, so it may differ from the 1-thread result in the
/// last bits; it does not vary between runs with the same thread count.
void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                            Tensor& db, const ops::Conv2dParams& p);

}  // namespace strata::cpu
