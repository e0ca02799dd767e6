// CPU kernels for the SwiGLU gate of Llama's MLP: silu(gate) * up, elementwise.
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// y = silu(g) * u = g * sigmoid(g) * u over n contiguous elements of g, u and y.
void swiglu_kernel(const Tensor& g, const Tensor& u, Tensor& y, int64_t n);
/// dg = dy * u * s * (1 + g (1 - s)), du = dy * g * s, s = sigmoid(g).
void swiglu_backward_kernel(const Tensor& dy, const Tensor& g, const Tensor& u, Tensor& dg, Tensor& du, int64_t n);

}  // namespace strata::cpu
