// CPU kernels for a Linear's bias fused with the GELU after it: the MLP's c_fc
// GEMM leaves y = x W^T without bias, and one pass adds the bias and applies GELU; in
// backward one pass computes the GELU gradient and the bias gradient (column sums). The
// projections that feed the residual stream (attn c_proj, mlp c_proj) likewise leave
// y = x W^T, and one pass adds the bias and the residual.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// out = gelu(y + b) over the rows of y (rows, n), all contiguous; b (n) or undefined (no
/// bias). tanh_approx picks GPT-2's tanh form, else the exact erf form.
void bias_gelu_kernel(const Tensor& y, const Tensor& b, Tensor& out, bool tanh_approx);

/// dh = dout * gelu'(y + b) (rows, n); db (n) = sum of dh over rows when defined. dout, y,
/// dh contiguous (rows, n). db is summed in fixed row blocks, independent of the thread
/// count.
void bias_gelu_backward_kernel(const Tensor& dout, const Tensor& y, const Tensor& b, Tensor& dh, Tensor& db,
                               bool tanh_approx);

/// y = r + (y + b) in place over the rows of y (rows, n), all contiguous; r (rows, n) the
/// residual; b (n) or undefined (then y = r + y). The rounding is that of the unfused
/// r + linear(x, w, b), whose GEMM accumulates onto the copied bias.
void bias_residual_kernel(Tensor& y, const Tensor& b, const Tensor& r);

}  // namespace strata::cpu
