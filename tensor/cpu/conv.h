// CPU kernels for 2-d convolution: samples split over the threads, each thread runs
// im2col of a group of its samples, one single-threaded BLAS GEMM, col2im for dx. f32
// convolutions may instead run through oneDNN (conv_dnnl.h), by a fixed rule.
#pragma once
#include <strata/tensor/ops.h>

namespace strata::cpu {

/// Which implementation conv2d_kernel and conv2d_backward_kernel run for f32 (f64 and
/// 16-bit dtypes, and anything oneDNN does not take, always run the im2col kernel).
/// native: the im2col kernel. onednn: oneDNN. automatic: conv_auto_uses_dnnl decides.
enum class ConvPath { native, onednn, automatic };

/// STRATA_CONV=native|onednn|auto, else automatic; set_conv_path overrides it (tests,
/// benchmarks; call it between ops).
ConvPath conv_path();
void set_conv_path(ConvPath path);

/// The automatic rule: whether the forward (backward = false) or the backward pass of this
/// convolution runs through oneDNN at `threads` threads. A function of the shapes,
/// parameters and thread count only, so a given thread count always gives the same bits.
bool conv_auto_uses_dnnl(bool backward, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, int threads);

/// The im2col kernels alone, whatever conv_path says (what `native` runs).
void conv2d_im2col(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);
void conv2d_backward_im2col(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                            const ops::Conv2dParams& p);

/// y (N,O,Ho,Wo) = conv(x (N,C,H,W), w (O,C,kh,kw)) + b (O, may be undefined).
/// All operands contiguous, same float dtype; y preallocated.
void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p);
/// dx (N,C,H,W), dw (O,C,kh,kw), db (O); all preallocated, overwritten. dx and db may
/// be undefined: not computed (an undefined dx skips half the backward GEMMs). dw is
/// summed per thread then reduced, so it may differ from the 1-thread result in the
/// last bits; it does not vary between runs with the same thread count (nor does
/// oneDNN's, where conv_path routes there).
void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                            Tensor& db, const ops::Conv2dParams& p);

}  // namespace strata::cpu
