// CPU kernels for the fused optimizer updates (one pass over param, grad, state).
#pragma once
#include <strata/tensor/ops.h>

namespace strata::cpu {

/// Adam / AdamW as torch.optim (bias-corrected, eps outside the sqrt). All contiguous, same shape.
void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p);
/// SGD as torch.optim.SGD; buf is used only when momentum != 0.
void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p);

}  // namespace strata::cpu
